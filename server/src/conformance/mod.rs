//! `switchyard conformance ENDPOINT`: plays the scheduler against a sidecar and checks
//! the clauses of the plugin contract (`proto/README.md`, "Clauses"), one verdict per
//! clause. It checks that a plugin is consistent — it answers every call in the
//! contract's shape, at the right generation, the same way for the same input, and
//! the same after deltas as on a fresh snapshot — never what its policy decides.
//!
//! The kit opens its own connections, so run it against a sidecar no scheduler is
//! using.

mod clauses;
mod conn;
mod fixture;
mod kit;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchyard_proto::v1 as pb;
use switchyard_proto::v1::plugin_client::PluginClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;

use clauses::Checks;
pub use clauses::{Clause, CLAUSES};
use conn::*;
pub use fixture::{Fixture, FixtureError};
use kit::Kit;

use pb::ExtensionPoint as Ep;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    /// Nothing the sidecar declares exercises the clause.
    Skip,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Outcome {
    pub clause: &'static str,
    pub title: &'static str,
    pub verdict: Verdict,
    /// For a failure: what was seen (the first violations) and what to change; for a
    /// skip: why.
    pub detail: String,
}

#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub endpoint: String,
    pub plugins: Vec<String>,
    pub capabilities: Vec<String>,
    pub outcomes: Vec<Outcome>,
}

impl Report {
    pub fn failed(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.verdict == Verdict::Fail)
            .count()
    }

    pub fn table(&self) -> String {
        let mut out = format!(
            "conformance of {} (plugins: {}; capabilities: {})\n",
            self.endpoint,
            if self.plugins.is_empty() {
                "none".into()
            } else {
                self.plugins.join(", ")
            },
            if self.capabilities.is_empty() {
                "none".into()
            } else {
                self.capabilities.join(", ")
            },
        );
        for o in &self.outcomes {
            let tag = match o.verdict {
                Verdict::Pass => "PASS",
                Verdict::Fail => "FAIL",
                Verdict::Skip => "SKIP",
            };
            out.push_str(&format!("{tag} {:<4} {}\n", o.clause, o.title));
            if !o.detail.is_empty() {
                for line in o.detail.lines() {
                    out.push_str(&format!("          {line}\n"));
                }
            }
        }
        let pass = self
            .outcomes
            .iter()
            .filter(|o| o.verdict == Verdict::Pass)
            .count();
        let skip = self
            .outcomes
            .iter()
            .filter(|o| o.verdict == Verdict::Skip)
            .count();
        out.push_str(&format!(
            "{pass} passed, {} failed, {skip} not exercised\n",
            self.failed()
        ));
        out
    }
}

pub struct Options {
    pub endpoint: String,
    /// For an `https://` endpoint: the CA to trust, and a client certificate and key
    /// when the sidecar requires one (mutual TLS).
    pub tls: Option<crate::remote::TlsFiles>,
    pub cluster: Vec<PathBuf>,
    /// How long one call may take.
    pub timeout: Duration,
    /// Where to receive the sidecar's spans over OTLP/gRPC (T1).
    pub otlp_listen: Option<std::net::SocketAddr>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConformanceError {
    #[error(transparent)]
    Fixture(#[from] FixtureError),
    #[error("endpoint {0:?}: {1}")]
    Endpoint(String, String),
    #[error("--otlp-listen {0}: cannot listen: {1}; pick a free port")]
    OtlpListen(std::net::SocketAddr, String),
}

/// Runs `switchyard conformance`: every clause against the sidecar at
/// `opts.endpoint`.
pub async fn run(opts: &Options) -> Result<Report, ConformanceError> {
    let fixture = Fixture::load(&opts.cluster)?;
    let endpoint = normalize_endpoint(&opts.endpoint)
        .map_err(|e| ConformanceError::Endpoint(opts.endpoint.clone(), e))?;
    match (endpoint.starts_with("https://"), opts.tls.is_some()) {
        (true, false) => {
            return Err(ConformanceError::Endpoint(
                opts.endpoint.clone(),
                "an https:// endpoint needs --tls-ca (and --tls-cert/--tls-key for mutual TLS)"
                    .into(),
            ))
        }
        (false, true) => {
            return Err(ConformanceError::Endpoint(
                opts.endpoint.clone(),
                "--tls-* options need an https:// endpoint".into(),
            ))
        }
        _ => {}
    }
    let target = Target {
        endpoint,
        tls: opts.tls.clone(),
    };
    let otlp = match opts.otlp_listen {
        None => None,
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| ConformanceError::OtlpListen(addr, e.to_string()))?;
            let collector = crate::telemetry::otlp_receiver::Collector::default();
            tokio::spawn(collector.clone().serve(listener));
            Some((addr, collector))
        }
    };
    let mut k = Kit {
        otlp,
        traced: Vec::new(),
        permit_waits_left: 2,
        checks: Checks::default(),
        unreachable: false,
        fixture,
        target,
        timeout: opts.timeout,
    };
    let mut report = Report {
        endpoint: opts.endpoint.clone(),
        plugins: vec![],
        capabilities: vec![],
        outcomes: vec![],
    };
    if let Some(hs) = k.run_all().await {
        report.plugins = hs.plugins.iter().map(|p| p.name.clone()).collect();
        report.capabilities = hs.capabilities.clone();
    }
    report.outcomes = k.checks.outcomes();
    if k.unreachable {
        for o in report
            .outcomes
            .iter_mut()
            .filter(|o| o.verdict == Verdict::Skip)
        {
            o.detail = "not checked: the sidecar could not be reached".into();
        }
    }
    Ok(report)
}

/// `unix:///path`, `unix:path`, a bare path (a Unix socket), `http://host:port`,
/// `https://host:port` (TLS).
fn normalize_endpoint(e: &str) -> Result<String, String> {
    if e.starts_with("unix:") || e.starts_with("http://") || e.starts_with("https://") {
        Ok(e.to_string())
    } else if let Some(rest) = e.strip_prefix("tcp://") {
        Ok(format!("http://{rest}"))
    } else if e.starts_with('/') || e.starts_with('.') {
        Ok(format!("unix://{e}"))
    } else if e.contains(':') && !e.contains('/') {
        Ok(format!("http://{e}"))
    } else {
        Err("expected unix:///path/to.sock, a socket path, tcp://host:port, http://host:port, https://host:port or host:port".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_normalized_or_refused_with_the_forms() {
        assert_eq!(
            normalize_endpoint("/tmp/a.sock").unwrap(),
            "unix:///tmp/a.sock"
        );
        assert_eq!(
            normalize_endpoint("127.0.0.1:9000").unwrap(),
            "http://127.0.0.1:9000"
        );
        assert_eq!(normalize_endpoint("unix:///x").unwrap(), "unix:///x");
        assert_eq!(normalize_endpoint("https://x:1").unwrap(), "https://x:1");
        assert!(normalize_endpoint("nonsense")
            .unwrap_err()
            .contains("expected"));
    }

    #[test]
    fn clauses_are_unique_and_every_one_has_a_fix() {
        let mut ids = std::collections::HashSet::new();
        for c in CLAUSES {
            assert!(ids.insert(c.id), "{} twice", c.id);
            assert!(!c.fix.is_empty() && !c.title.is_empty());
        }
    }

    #[test]
    fn a_clause_fails_on_any_violation_and_is_skipped_when_never_exercised() {
        let mut k = Checks::default();
        k.ok("F1");
        k.check("F2", false, || "different".into());
        let o = k.outcomes();
        let get = |id: &str| o.iter().find(|x| x.clause == id).unwrap();
        assert_eq!(get("F1").verdict, Verdict::Pass);
        assert_eq!(get("F2").verdict, Verdict::Fail);
        assert!(get("F2").detail.contains("different") && get("F2").detail.contains("fix:"));
        assert_eq!(get("SC2").verdict, Verdict::Skip);
    }
}
