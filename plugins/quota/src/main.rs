//! `switchyard-quota`: serves the Switchyard plugin `TenantQuota` as a sidecar. Pods
//! labelled `quota.switchyard.dev/tenant: T` may not exceed, on any node labelled
//! `quota.switchyard.dev/pods-per-tenant: N`, N pods of tenant T. See README.md.

mod plugin;

use std::sync::Arc;

use switchyard_plugin_sdk::{
    probe, resolve_listen, serve_until_signal, Listen, Plugin, LISTEN_ENV,
};

use crate::plugin::{TenantQuota, LIMIT_LABEL, NAME, TENANT_LABEL};

/// The command line.
#[derive(Debug, PartialEq)]
enum Command {
    Serve(Listen),
    /// Check the running sidecar's health at the listen address.
    Probe(Listen),
    Help,
}

fn usage() -> String {
    format!(
        "usage: switchyard-quota [--listen ADDRESS] [--probe]

Serves the Switchyard plugin {NAME} (PreFilter with AddPod/RemovePod, Filter)
over gRPC until SIGTERM or Ctrl-C. A node labelled
  {LIMIT_LABEL}=N
takes at most N pods of any one tenant; a pod's tenant is its label
  {TENANT_LABEL}.

  --listen ADDRESS   unix:///path.sock, tcp://host:port, http://host:port, host:port,
                     or https://host:port with SWITCHYARD_PLUGIN_TLS_CERT and
                     SWITCHYARD_PLUGIN_TLS_KEY naming PEM files
                     (default: ${LISTEN_ENV}, else
                     unix:///tmp/switchyard/{}.sock)
  --probe            check the running sidecar (gRPC health) and exit 0 if it is
                     serving, 1 if not (an exec probe)
  -h, --help         print this help",
        NAME.to_lowercase()
    )
}

/// Parses the arguments (without the program name). `env_listen` is the value of
/// `SWITCHYARD_PLUGIN_LISTEN`, which `--listen` overrides.
fn parse_args(
    args: impl IntoIterator<Item = String>,
    env_listen: Option<String>,
) -> Result<Command, String> {
    let mut listen = None;
    let mut probe = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--probe" => probe = true,
            "--listen" => {
                listen = Some(args.next().ok_or_else(|| {
                    "--listen needs an address, e.g. unix:///tmp/quota.sock; try --help".to_string()
                })?)
            }
            a => match a.strip_prefix("--listen=") {
                Some(v) => listen = Some(v.to_string()),
                None => return Err(format!("unknown argument {a:?}; try --help")),
            },
        }
    }
    let listen = resolve_listen(listen.as_deref(), env_listen, NAME).map_err(|e| e.to_string())?;
    Ok(if probe {
        Command::Probe(listen)
    } else {
        Command::Serve(listen)
    })
}

/// Exit status 2 for usage errors, 1 for everything else.
fn run() -> Result<(), (i32, String)> {
    let listen = match parse_args(std::env::args().skip(1), std::env::var(LISTEN_ENV).ok())
        .map_err(|e| (2, e))?
    {
        Command::Help => {
            println!("{}", usage());
            return Ok(());
        }
        Command::Probe(l) => return probe(&l).map_err(|e| (1, e.to_string())),
        Command::Serve(l) => l,
    };
    let plugins: Vec<Arc<dyn Plugin>> = vec![Arc::new(TenantQuota)];
    serve_until_signal(plugins, listen, |_| {}).map_err(|e| (1, e.to_string()))
}

fn main() {
    if let Err((code, e)) = run() {
        eprintln!("switchyard-quota: {e}");
        std::process::exit(code);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str], env: Option<&str>) -> Result<Command, String> {
        parse_args(args.iter().map(|s| s.to_string()), env.map(String::from))
    }

    #[test]
    fn listen_from_flag_environment_or_default() {
        assert_eq!(
            parse(&[], None).unwrap(),
            Command::Serve(Listen::Unix("/tmp/switchyard/tenantquota.sock".into()))
        );
        assert_eq!(
            parse(&[], Some("unix:///tmp/env.sock")).unwrap(),
            Command::Serve(Listen::Unix("/tmp/env.sock".into()))
        );
        assert_eq!(
            parse(
                &["--listen", "http://127.0.0.1:9000"],
                Some("unix:///tmp/env.sock")
            )
            .unwrap(),
            Command::Serve(Listen::Tcp("127.0.0.1:9000".parse().unwrap()))
        );
        assert_eq!(
            parse(&["--listen=unix:///tmp/q.sock"], None).unwrap(),
            Command::Serve(Listen::Unix("/tmp/q.sock".into()))
        );
    }

    #[test]
    fn help_and_bad_arguments() {
        assert_eq!(parse(&["--help"], None).unwrap(), Command::Help);
        assert_eq!(parse(&["-h", "--bogus"], None).unwrap(), Command::Help);
        assert!(usage().contains(LIMIT_LABEL) && usage().contains(TENANT_LABEL));
        for (args, want) in [
            (&["--bogus"][..], "unknown argument \"--bogus\""),
            (&["--listen"][..], "--listen needs an address"),
            (&["--listen", "nonsense"][..], "listen address"),
        ] {
            let e = parse(args, None).unwrap_err();
            assert!(e.starts_with(want), "{args:?}: {e}");
        }
        // A bad environment value is reported too (not silently replaced).
        assert!(parse(&[], Some("nonsense")).is_err());
    }
}
