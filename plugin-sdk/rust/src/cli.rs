//! A sidecar's command line: the flags every sidecar built on this SDK understands
//! ([`SidecarArgs`]), and [`run`], the whole `main` of a sidecar without flags of its
//! own.

use std::path::PathBuf;
use std::sync::Arc;

use crate::plugin::Plugin;
use crate::serve::{
    parse_listen_address, probe, serve_until_signal_with, Error, Listen, ServeOptions,
    CAPABILITIES_ENV, LISTEN_ENV, TLS_CERT_ENV, TLS_CLIENT_CA_ENV, TLS_KEY_ENV,
};
use crate::waiting::Handle;

/// The flags every sidecar built on this SDK understands, as [`run`] parses them:
///
/// * `--listen ADDRESS` (or `--listen=ADDRESS`): where to listen; else
///   `SWITCHYARD_PLUGIN_LISTEN`, else `unix:///tmp/switchyard/<first plugin>.sock`.
/// * `--probe`: check the running sidecar's gRPC health at that address and exit.
/// * `--no-optional-capabilities`: offer none of the protocol's optional capabilities
///   ([`ServeOptions::capabilities`] false), to serve as a sidecar built before them
///   would; `SWITCHYARD_PLUGIN_CAPABILITIES=off` is its environment fallback.
///
/// A sidecar with flags of its own offers each argument to [`SidecarArgs::accept`],
/// handles the ones it refuses, and ends with [`SidecarArgs::run`]
/// (`plugins/tainttoleration` does); its `--help` can show [`SidecarArgs::help`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SidecarArgs {
    /// `--listen ADDRESS`.
    pub listen: Option<String>,
    /// `--probe`.
    pub probe: bool,
    /// `--no-optional-capabilities`.
    pub no_optional_capabilities: bool,
}

impl SidecarArgs {
    /// The `--help` lines of these flags.
    pub fn help() -> String {
        format!(
            "  --listen ADDRESS  unix:///path.sock, tcp://host:port, host:port, or\n                    \
             https://host:port with {TLS_CERT_ENV} and {TLS_KEY_ENV}\n                    \
             naming PEM files ({TLS_CLIENT_CA_ENV}: require client\n                    \
             certificates from that CA). Default: ${LISTEN_ENV},\n                    \
             else unix:///tmp/switchyard/<plugin>.sock\n  \
             --probe           check the running sidecar at that address (gRPC\n                    \
             health) and exit 0 if it is serving, 1 if not\n  \
             --no-optional-capabilities\n                    \
             offer none of the protocol's optional capabilities\n                    \
             (filter-batch, replicate-batch, filter-after-pre-filter,\n                    \
             permit-after-reserve): serve as a sidecar built before\n                    \
             them would. Default: offered, unless {CAPABILITIES_ENV}=off"
        )
    }

    /// Takes `arg` when it is one of these flags (the address of `--listen` is the
    /// next argument of `rest`): `Ok(true)`; `Ok(false)` for any other argument.
    pub fn accept(
        &mut self,
        arg: &str,
        rest: &mut impl Iterator<Item = String>,
    ) -> Result<bool, Error> {
        match arg {
            "--probe" => self.probe = true,
            "--no-optional-capabilities" => self.no_optional_capabilities = true,
            "--listen" => {
                self.listen = Some(rest.next().ok_or_else(|| {
                    Error::Usage("--listen needs an address, e.g. unix:///tmp/p.sock".into())
                })?)
            }
            s if s.starts_with("--listen=") => {
                self.listen = Some(s["--listen=".len()..].to_string())
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Where to listen: `--listen`, else `SWITCHYARD_PLUGIN_LISTEN`, else the socket
    /// named after `plugin_name` ([`resolve_listen`]).
    pub fn listen_address(&self, plugin_name: &str) -> Result<Listen, Error> {
        resolve_listen(
            self.listen.as_deref(),
            std::env::var(LISTEN_ENV).ok(),
            plugin_name,
        )
    }

    /// The options to serve `listen` with: [`ServeOptions::from_env`] (TLS files, and
    /// `SWITCHYARD_PLUGIN_CAPABILITIES`), then these flags.
    pub fn serve_options(&self, listen: Listen) -> Result<ServeOptions, Error> {
        let mut o = ServeOptions::from_env(listen)?;
        if self.no_optional_capabilities {
            o.capabilities = false;
        }
        Ok(o)
    }

    /// With `--probe`, checks the running sidecar's health ([`probe`]); else serves
    /// `plugins` until SIGTERM or Ctrl-C ([`serve_until_signal_with`]), handing the
    /// Permit handle to `on_handle` first.
    pub fn run(
        &self,
        plugins: Vec<Arc<dyn Plugin>>,
        on_handle: impl FnOnce(Handle),
    ) -> Result<(), Error> {
        let name = plugins.first().map_or("plugin", |p| p.name()).to_string();
        let listen = self.listen_address(&name)?;
        if self.probe {
            return probe(&listen);
        }
        serve_until_signal_with(plugins, self.serve_options(listen)?, on_handle)
    }
}

/// A sidecar's `main`: reads the flags of [`SidecarArgs`] (`--listen ADDRESS`,
/// `--probe`, `--no-optional-capabilities`) and `--help`, and serves on a
/// single-threaded runtime (the fastest for request/reply over a socket) until
/// SIGTERM or Ctrl-C.
pub fn run(plugins: Vec<Arc<dyn Plugin>>) -> Result<(), Error> {
    run_with(plugins, |_| {})
}

/// [`run`], handing the Permit handle to `on_handle` first.
pub fn run_with(
    plugins: Vec<Arc<dyn Plugin>>,
    on_handle: impl FnOnce(Handle),
) -> Result<(), Error> {
    let mut sdk = SidecarArgs::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if sdk.accept(&a, &mut args)? {
            continue;
        }
        match a.as_str() {
            "-h" | "--help" => {
                println!(
                    "usage: {} [--listen ADDRESS] [--probe] [--no-optional-capabilities]\n\n\
                     Serves the Switchyard plugin(s) {} over gRPC until SIGTERM.\n\n{}",
                    std::env::args().next().unwrap_or_default(),
                    plugins
                        .iter()
                        .map(|p| p.name())
                        .collect::<Vec<_>>()
                        .join(", "),
                    SidecarArgs::help()
                );
                return Ok(());
            }
            other => {
                return Err(Error::Usage(format!(
                    "unknown argument {other:?}; try --help"
                )))
            }
        }
    }
    sdk.run(plugins, on_handle)
}

/// Where a sidecar listens: `flag` (its `--listen`), else `env` (the value of
/// [`LISTEN_ENV`]), else `unix:///tmp/switchyard/<plugin name, lowercase>.sock`. For
/// sidecars that parse their own command line.
pub fn resolve_listen(
    flag: Option<&str>,
    env: Option<String>,
    name: &str,
) -> Result<Listen, Error> {
    match flag.map(str::to_string).or(env) {
        Some(l) => parse_listen_address(&l),
        None => Ok(Listen::Unix(PathBuf::from(format!(
            "/tmp/switchyard/{}.sock",
            name.to_lowercase()
        )))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_listen_is_overridden_by_the_flag() {
        let env = Some("unix:///tmp/env.sock".to_string());
        assert_eq!(
            resolve_listen(None, env.clone(), "X").unwrap(),
            Listen::Unix("/tmp/env.sock".into())
        );
        assert_eq!(
            resolve_listen(Some("unix:/tmp/f.sock"), env, "X").unwrap(),
            Listen::Unix("/tmp/f.sock".into())
        );
        assert_eq!(
            resolve_listen(None, None, "Coscheduling").unwrap(),
            Listen::Unix("/tmp/switchyard/coscheduling.sock".into())
        );
    }

    fn parse(args: &[&str]) -> Result<(SidecarArgs, Vec<String>), Error> {
        let mut sdk = SidecarArgs::default();
        let mut others = Vec::new();
        let mut it = args.iter().map(|a| a.to_string());
        while let Some(a) = it.next() {
            if !sdk.accept(&a, &mut it)? {
                others.push(a);
            }
        }
        Ok((sdk, others))
    }

    #[test]
    fn the_sdk_flags_are_taken_and_the_others_left() {
        let (sdk, others) = parse(&[
            "--no-lookahead",
            "--listen",
            "unix:///tmp/a.sock",
            "--no-optional-capabilities",
            "--probe",
        ])
        .unwrap();
        assert_eq!(
            sdk,
            SidecarArgs {
                listen: Some("unix:///tmp/a.sock".into()),
                probe: true,
                no_optional_capabilities: true,
            }
        );
        assert_eq!(others, ["--no-lookahead"]);
        let (sdk, _) = parse(&["--listen=tcp://127.0.0.1:1"]).unwrap();
        assert_eq!(sdk.listen.as_deref(), Some("tcp://127.0.0.1:1"));
        assert!(parse(&["--listen"]).is_err());
    }

    #[test]
    fn no_optional_capabilities_turns_them_off() {
        let listen = Listen::Unix("/tmp/x.sock".into());
        let off = SidecarArgs {
            no_optional_capabilities: true,
            ..Default::default()
        };
        assert!(!off.serve_options(listen.clone()).unwrap().capabilities);
        assert!(ServeOptions::new(listen).capabilities, "on by default");
        assert!(SidecarArgs::help().contains("--no-optional-capabilities"));
    }
}
