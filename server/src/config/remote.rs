//! The `remotePlugins` section (Switchyard's extension of KubeSchedulerConfiguration):
//! one resolved, validated entry per plugin sidecar. The runtime that connects to
//! them is [`crate::remote`].

use std::path::PathBuf;
use std::time::Duration;

use super::parse_go_duration;
use super::types::{RemotePluginEndpoint, RemotePluginTls};

/// What a failing sidecar call does to the attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    /// The attempt fails with an error and the pod is retried with backoff.
    Fail,
    /// The plugin is skipped for this call: Filter passes, Score adds nothing.
    Ignore,
}

/// A resolved `remotePlugins[]` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointConfig {
    pub index: usize,
    pub endpoint: String,
    pub timeout: Duration,
    pub failure_policy: FailurePolicy,
    pub plugins: Vec<String>,
    pub startup_timeout: Duration,
    /// Enable the plugins it serves in every profile that does not mention them
    /// (endpoints given on the command line rather than in a configuration file).
    pub auto_enable: bool,
    /// Set for `https://` endpoints.
    pub tls: Option<TlsFiles>,
    /// Upper bound on the pods of one `FilterBatch` message (`maxBatchPods`).
    pub max_batch_pods: usize,
    /// Answers of plugins that declare pod signatures are reused for alike pods
    /// (`reuseAlikePods`, default true).
    pub reuse_alike_pods: bool,
    /// The verdict of the sidecar's Reserve and Permit (sent together) is awaited in
    /// the binding cycle, so the next pod's cycle does not wait for the round trip
    /// (`permitInBindingCycle`, default false; see
    /// [`crate::framework::unsettled_permit`]).
    pub permit_in_binding_cycle: bool,
}

/// `maxBatchPods` when unset, and its upper bound.
pub const DEFAULT_MAX_BATCH_PODS: u32 = 16;
pub const MAX_BATCH_PODS_LIMIT: u32 = 64;

/// The PEM files of a TLS endpoint, checked readable when the configuration is
/// loaded and read again at every connect.
#[derive(Clone, Debug, PartialEq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    /// Client certificate and key (mutual TLS).
    pub identity: Option<(PathBuf, PathBuf)>,
    pub server_name: Option<String>,
}

/// A `remotePlugins` entry refused: the field (relative to the entry) and why, so the
/// caller can name the file or flag it came from.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidEndpoint {
    pub field: String,
    pub message: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> InvalidEndpoint {
    InvalidEndpoint {
        field: field.into(),
        message: message.into(),
    }
}

impl TlsFiles {
    fn resolve(t: &RemotePluginTls) -> Result<Self, InvalidEndpoint> {
        let file = |v: &Option<String>, field: &str| -> Result<Option<PathBuf>, InvalidEndpoint> {
            let Some(v) = v.as_deref().map(str::trim).filter(|v| !v.is_empty()) else {
                return Ok(None);
            };
            let p = PathBuf::from(v);
            match std::fs::metadata(&p) {
                Ok(m) if m.is_file() => Ok(Some(p)),
                Ok(_) => Err(invalid(
                    format!("tls.{field}"),
                    format!("Invalid value: {v:?}: not a file"),
                )),
                Err(e) => Err(invalid(
                    format!("tls.{field}"),
                    format!("Invalid value: {v:?}: {e}"),
                )),
            }
        };
        let ca = file(&t.ca_file, "caFile")?.ok_or_else(|| {
            invalid(
                "tls.caFile",
                "Required value: the PEM file of the CA that signed the sidecar's certificate",
            )
        })?;
        let identity = match (
            file(&t.cert_file, "certFile")?,
            file(&t.key_file, "keyFile")?,
        ) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            (Some(_), None) => {
                return Err(invalid(
                    "tls.keyFile",
                    "Required value: certFile is set, so the client key is needed too",
                ))
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "tls.certFile",
                    "Required value: keyFile is set, so the client certificate is needed too",
                ))
            }
        };
        Ok(TlsFiles {
            ca,
            identity,
            server_name: t.server_name.clone().filter(|s| !s.trim().is_empty()),
        })
    }
}

impl EndpointConfig {
    /// Validates one entry; errors name the field (relative to the entry) and the fix.
    pub fn resolve(index: usize, r: &RemotePluginEndpoint) -> Result<Self, InvalidEndpoint> {
        let e = r.endpoint.trim();
        let https = e.starts_with("https://") && e.len() > "https://".len();
        let ok = e.starts_with("unix://") && e.len() > "unix://".len()
            || e.starts_with("unix:") && e.len() > "unix:".len()
            || e.starts_with("http://") && e.len() > "http://".len()
            || https;
        if !ok {
            return Err(invalid(
                "endpoint",
                format!(
                    "Invalid value: {e:?}: expected unix:///path/to.sock, http://host:port or https://host:port"
                ),
            ));
        }
        let tls = match (&r.tls, https) {
            (Some(t), true) => Some(TlsFiles::resolve(t)?),
            (None, true) => {
                return Err(invalid(
                    "tls",
                    "Required value: an https:// endpoint needs tls.caFile",
                ))
            }
            (Some(_), false) => {
                return Err(invalid(
                    "tls",
                    format!("Forbidden: TLS applies only to https:// endpoints, not {e:?}"),
                ))
            }
            (None, false) => None,
        };
        let dur = |v: &Option<String>, field: &str, default: Duration| match v {
            None => Ok(default),
            Some(s) => parse_go_duration(s)
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    invalid(
                        field,
                        format!("Invalid value: {s:?}: a positive duration such as \"500ms\""),
                    )
                }),
        };
        let failure_policy = match r.failure_policy.as_deref() {
            None | Some("Fail") => FailurePolicy::Fail,
            Some("Ignore") => FailurePolicy::Ignore,
            Some(other) => {
                return Err(invalid(
                    "failurePolicy",
                    format!("Unsupported value: {other:?}: supported values: \"Fail\", \"Ignore\""),
                ))
            }
        };
        let max_batch_pods = match r.max_batch_pods {
            None => DEFAULT_MAX_BATCH_PODS,
            Some(n) if (1..=MAX_BATCH_PODS_LIMIT).contains(&n) => n,
            Some(n) => {
                return Err(invalid(
                    "maxBatchPods",
                    format!(
                        "Invalid value: {n}: must be between 1 and {MAX_BATCH_PODS_LIMIT} (1 sends one pod ahead at a time)"
                    ),
                ))
            }
        } as usize;
        Ok(EndpointConfig {
            index,
            max_batch_pods,
            reuse_alike_pods: r.reuse_alike_pods.unwrap_or(true),
            permit_in_binding_cycle: r.permit_in_binding_cycle.unwrap_or(false),
            endpoint: e.to_string(),
            timeout: dur(&r.timeout, "timeout", Duration::from_secs(1))?,
            failure_policy,
            plugins: r.plugins.clone(),
            startup_timeout: dur(
                &r.startup_timeout,
                "startupTimeout",
                Duration::from_secs(10),
            )?,
            auto_enable: false,
            tls,
        })
    }

    /// An endpoint with every other field at its default (for endpoints given on the
    /// command line, benchmarks and tests).
    pub fn new(index: usize, endpoint: &str) -> Result<Self, InvalidEndpoint> {
        let raw = RemotePluginEndpoint {
            endpoint: endpoint.to_string(),
            ..Default::default()
        };
        Self::resolve(index, &raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_config_errors_name_the_field() {
        let r = RemotePluginEndpoint {
            endpoint: "https://x:1".into(),
            ..Default::default()
        };
        let InvalidEndpoint {
            field: f,
            message: m,
        } = EndpointConfig::resolve(0, &r).unwrap_err();
        assert_eq!(f, "tls");
        assert!(m.contains("tls.caFile"), "{m}");
        let r = RemotePluginEndpoint {
            endpoint: "grpc://x:1".into(),
            ..Default::default()
        };
        assert_eq!(
            EndpointConfig::resolve(0, &r).unwrap_err().field,
            "endpoint"
        );
        let r = RemotePluginEndpoint {
            endpoint: "unix:///tmp/x.sock".into(),
            failure_policy: Some("Sometimes".into()),
            ..Default::default()
        };
        assert_eq!(
            EndpointConfig::resolve(0, &r).unwrap_err().field,
            "failurePolicy"
        );
        let r = RemotePluginEndpoint {
            endpoint: "unix:///tmp/x.sock".into(),
            timeout: Some("250ms".into()),
            failure_policy: Some("Ignore".into()),
            ..Default::default()
        };
        let c = EndpointConfig::resolve(0, &r).unwrap();
        assert_eq!(c.timeout, Duration::from_millis(250));
        assert_eq!(c.failure_policy, FailurePolicy::Ignore);
        assert_eq!(c.tls, None);
        assert_eq!(c.max_batch_pods, DEFAULT_MAX_BATCH_PODS as usize);
        assert!(!c.permit_in_binding_cycle, "off unless asked for");
        let r = RemotePluginEndpoint {
            endpoint: "unix:///tmp/x.sock".into(),
            permit_in_binding_cycle: Some(true),
            ..Default::default()
        };
        assert!(
            EndpointConfig::resolve(0, &r)
                .unwrap()
                .permit_in_binding_cycle
        );
        for (n, ok) in [(0, false), (1, true), (64, true), (65, false)] {
            let r = RemotePluginEndpoint {
                endpoint: "unix:///tmp/x.sock".into(),
                max_batch_pods: Some(n),
                ..Default::default()
            };
            match EndpointConfig::resolve(0, &r) {
                Ok(c) => assert!(ok && c.max_batch_pods == n as usize, "{n}"),
                Err(InvalidEndpoint {
                    field: f,
                    message: m,
                }) => {
                    assert!(!ok, "{n}: {m}");
                    assert_eq!(f, "maxBatchPods");
                    assert!(m.contains("between 1 and 64"), "{m}");
                }
            }
        }
    }

    #[test]
    fn tls_files_are_checked_when_loaded() {
        let dir = std::env::temp_dir().join(format!("switchyard-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "not checked until connect").unwrap();
        let ca_s = ca.display().to_string();
        let entry = |tls: RemotePluginTls| RemotePluginEndpoint {
            endpoint: "https://sidecar:9443".into(),
            tls: Some(tls),
            ..Default::default()
        };
        let c = EndpointConfig::resolve(
            0,
            &entry(RemotePluginTls {
                ca_file: Some(ca_s.clone()),
                server_name: Some("plugins.local".into()),
                ..Default::default()
            }),
        )
        .unwrap();
        let t = c.tls.unwrap();
        assert_eq!(
            (t.ca, t.identity, t.server_name.as_deref()),
            (ca.clone(), None, Some("plugins.local"))
        );
        let err = |tls| EndpointConfig::resolve(0, &entry(tls)).unwrap_err();
        assert_eq!(err(RemotePluginTls::default()).field, "tls.caFile");
        let InvalidEndpoint {
            field: f,
            message: m,
        } = err(RemotePluginTls {
            ca_file: Some(dir.join("missing.pem").display().to_string()),
            ..Default::default()
        });
        assert_eq!(f, "tls.caFile");
        assert!(m.contains("missing.pem"), "{m}");
        let InvalidEndpoint { field: f, .. } = err(RemotePluginTls {
            ca_file: Some(ca_s.clone()),
            cert_file: Some(ca_s.clone()),
            ..Default::default()
        });
        assert_eq!(f, "tls.keyFile");
        let plain = RemotePluginEndpoint {
            endpoint: "unix:///tmp/x.sock".into(),
            tls: Some(RemotePluginTls {
                ca_file: Some(ca_s),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(EndpointConfig::resolve(0, &plain).unwrap_err().field, "tls");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
