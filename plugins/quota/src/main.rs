//! `switchyard-quota`: serves the Switchyard plugin `TenantQuota` as a sidecar. Pods
//! labelled `quota.switchyard.dev/tenant: T` may not exceed, on any node labelled
//! `quota.switchyard.dev/pods-per-tenant: N`, N pods of tenant T. See README.md.

mod plugin;

use std::sync::Arc;

use switchyard_plugin_sdk::{
    probe, resolve_listen, serve_until_signal_with, Listen, Plugin, SidecarArgs, LISTEN_ENV,
};

use crate::plugin::{TenantQuota, LIMIT_LABEL, NAME, TENANT_LABEL};

/// The command line.
#[derive(Debug, PartialEq)]
enum Command {
    /// Serve at the address, with the SDK's flags (`--no-optional-capabilities`).
    Serve(Listen, SidecarArgs),
    /// Check the running sidecar's health at the listen address.
    Probe(Listen),
    Help,
}

fn usage() -> String {
    format!(
        "usage: switchyard-quota [--listen ADDRESS] [--probe] [--no-optional-capabilities]

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
  --no-optional-capabilities
                     offer none of the protocol's optional capabilities
                     (filter-batch, replicate-batch, filter-after-pre-filter,
                     permit-after-reserve): serve as a sidecar built before
                     them would
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
    let mut sdk = SidecarArgs::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(Command::Help);
        }
        if !sdk.accept(&arg, &mut args).map_err(|e| e.to_string())? {
            return Err(format!("unknown argument {arg:?}; try --help"));
        }
    }
    let listen =
        resolve_listen(sdk.listen.as_deref(), env_listen, NAME).map_err(|e| e.to_string())?;
    Ok(if sdk.probe {
        Command::Probe(listen)
    } else {
        Command::Serve(listen, sdk)
    })
}

/// Exit status 2 for usage errors, 1 for everything else.
fn run() -> Result<(), (i32, String)> {
    let options = match parse_args(std::env::args().skip(1), std::env::var(LISTEN_ENV).ok())
        .map_err(|e| (2, e))?
    {
        Command::Help => {
            println!("{}", usage());
            return Ok(());
        }
        Command::Probe(l) => return probe(&l).map_err(|e| (1, e.to_string())),
        Command::Serve(l, sdk) => sdk.serve_options(l).map_err(|e| (1, e.to_string()))?,
    };
    let plugins: Vec<Arc<dyn Plugin>> = vec![Arc::new(TenantQuota)];
    serve_until_signal_with(plugins, options, |_| {}).map_err(|e| (1, e.to_string()))
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

    /// The address a `Serve` command listens on.
    fn served(c: Command) -> Listen {
        match c {
            Command::Serve(l, _) => l,
            other => panic!("expected Serve, got {other:?}"),
        }
    }

    #[test]
    fn listen_from_flag_environment_or_default() {
        assert_eq!(
            served(parse(&[], None).unwrap()),
            Listen::Unix("/tmp/switchyard/tenantquota.sock".into())
        );
        assert_eq!(
            served(parse(&[], Some("unix:///tmp/env.sock")).unwrap()),
            Listen::Unix("/tmp/env.sock".into())
        );
        assert_eq!(
            served(
                parse(
                    &["--listen", "http://127.0.0.1:9000"],
                    Some("unix:///tmp/env.sock")
                )
                .unwrap()
            ),
            Listen::Tcp("127.0.0.1:9000".parse().unwrap())
        );
        assert_eq!(
            served(parse(&["--listen=unix:///tmp/q.sock"], None).unwrap()),
            Listen::Unix("/tmp/q.sock".into())
        );
    }

    #[test]
    fn sdk_flags_pass_through() {
        let Command::Serve(_, sdk) = parse(&["--no-optional-capabilities"], None).unwrap() else {
            panic!("expected Serve");
        };
        assert!(sdk.no_optional_capabilities);
        assert!(matches!(
            parse(&["--probe", "--listen", "unix:///tmp/q.sock"], None).unwrap(),
            Command::Probe(Listen::Unix(p)) if p.to_str() == Some("/tmp/q.sock")
        ));
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
