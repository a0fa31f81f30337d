//! Coscheduling (gang scheduling), after kubernetes-sigs/scheduler-plugins'
//! `pkg/coscheduling`, served as a Switchyard sidecar under the name `Coscheduling`.
//! Pods labelled `scheduling.x-k8s.io/pod-group: NAME` form a group that binds only
//! once minMember of them have a node: PreFilter turns members away while too few
//! exist or the group failed recently, Permit holds each placed member until the
//! group is complete and then releases them all, Unreserve releases the rest of the
//! group when one member fails. See README.md.

mod gang;
mod plugin;
mod podgroup;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use switchyard_plugin_sdk::{
    probe, resolve_listen, serve_until_signal_with, Listen, Plugin, SidecarArgs, LISTEN_ENV,
};

use crate::gang::Gangs;
use crate::plugin::{Coscheduling, NAME};

const DEFAULT_PERMIT_TIMEOUT_SECONDS: u64 = 10;
const DEFAULT_DENIED_BACKOFF_SECONDS: u64 = 3;

const USAGE: &str = "usage: switchyard-coscheduling [--listen ADDRESS] [--pod-groups PATH]...
                               [--permit-timeout-seconds N] [--denied-backoff-seconds N]
                               [--no-optional-capabilities]
       switchyard-coscheduling [--listen ADDRESS] --probe

Serves the Switchyard plugin Coscheduling (gang scheduling) over gRPC until SIGTERM.

  --listen ADDRESS               unix:///path.sock, tcp://host:port, host:port, or
                                 https://host:port with SWITCHYARD_PLUGIN_TLS_CERT and
                                 SWITCHYARD_PLUGIN_TLS_KEY naming PEM files
                                 (default: $SWITCHYARD_PLUGIN_LISTEN, else
                                 unix:///tmp/switchyard/coscheduling.sock)
  --probe                        check the running sidecar (gRPC health) and exit 0
                                 if it is serving, 1 if not (an exec probe)
  --no-optional-capabilities     offer none of the protocol's optional capabilities
                                 (filter-batch, replicate-batch,
                                 filter-after-pre-filter, permit-after-reserve):
                                 serve as a sidecar built before them would
  --pod-groups PATH              a file or directory of YAML/JSON manifests; the
                                 scheduling.x-k8s.io/v1alpha1 PodGroups in it are read,
                                 other documents skipped (repeatable)
  --permit-timeout-seconds N     how long placed members wait for the rest of their
                                 group when its PodGroup sets no scheduleTimeoutSeconds
                                 (default 10)
  --denied-backoff-seconds N     how long PreFilter turns a group away after one of its
                                 members failed (default 3; 0 disables)";

/// The command line.
#[derive(Debug, PartialEq)]
struct Args {
    listen: Listen,
    /// `--no-optional-capabilities`.
    no_optional_capabilities: bool,
    pod_groups: Vec<PathBuf>,
    permit_timeout: Duration,
    denied_backoff: Duration,
}

#[derive(Debug, PartialEq)]
enum Command {
    Serve(Args),
    /// Check the running sidecar's health at the listen address.
    Probe(Listen),
    Help,
}

/// Parses the arguments (without the program name). `env_listen` is
/// `SWITCHYARD_PLUGIN_LISTEN`, which `--listen` overrides. The SDK's own `run` parses
/// only `--listen`, so this sidecar parses its flags and lets the SDK resolve the
/// address and serve.
fn parse_args(
    args: impl IntoIterator<Item = String>,
    env_listen: Option<String>,
) -> Result<Command, String> {
    let mut listen = None;
    let mut pod_groups = Vec::new();
    let mut permit_timeout = DEFAULT_PERMIT_TIMEOUT_SECONDS;
    let mut denied_backoff = DEFAULT_DENIED_BACKOFF_SECONDS;
    let mut probe = false;
    let mut no_optional_capabilities = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(Command::Help);
        }
        if arg == "--probe" {
            probe = true;
            continue;
        }
        if arg == "--no-optional-capabilities" {
            no_optional_capabilities = true;
            continue;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg, None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value; try --help"))
        };
        let seconds = |v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: {v:?} is not a whole number of seconds"))
        };
        match flag.as_str() {
            "--listen" => listen = Some(value()?),
            "--pod-groups" => pod_groups.push(PathBuf::from(value()?)),
            "--permit-timeout-seconds" => {
                permit_timeout = seconds(value()?)?;
                if permit_timeout == 0 {
                    return Err(format!("{flag} must be at least 1"));
                }
            }
            "--denied-backoff-seconds" => denied_backoff = seconds(value()?)?,
            _ => return Err(format!("unknown argument {flag:?}; try --help")),
        }
    }
    let listen = resolve_listen(listen.as_deref(), env_listen, NAME).map_err(|e| e.to_string())?;
    if probe {
        return Ok(Command::Probe(listen));
    }
    Ok(Command::Serve(Args {
        listen,
        no_optional_capabilities,
        pod_groups,
        permit_timeout: Duration::from_secs(permit_timeout),
        denied_backoff: Duration::from_secs(denied_backoff),
    }))
}

/// Exit status 2 for usage errors, 1 for everything else.
fn run() -> Result<(), (i32, String)> {
    let env_listen = std::env::var(LISTEN_ENV).ok();
    let args = match parse_args(std::env::args().skip(1), env_listen).map_err(|e| (2, e))? {
        Command::Help => {
            println!("{USAGE}");
            return Ok(());
        }
        Command::Probe(l) => return probe(&l).map_err(|e| (1, e.to_string())),
        Command::Serve(a) => a,
    };
    let loaded = podgroup::load_paths(&args.pod_groups).map_err(|e| (1, e.to_string()))?;
    if !args.pod_groups.is_empty() {
        eprintln!(
            "switchyard-coscheduling: {} PodGroup(s) loaded, {} other document(s) skipped",
            loaded.groups.len(),
            loaded.skipped
        );
    }
    let plugin = Arc::new(Coscheduling::new(Gangs::new(
        loaded.groups,
        args.permit_timeout,
        args.denied_backoff,
    )));
    let p = plugin.clone();
    let plugins: Vec<Arc<dyn Plugin>> = vec![plugin];
    let sdk = SidecarArgs {
        no_optional_capabilities: args.no_optional_capabilities,
        ..SidecarArgs::default()
    };
    let options = sdk
        .serve_options(args.listen)
        .map_err(|e| (1, e.to_string()))?;
    serve_until_signal_with(plugins, options, move |h| p.set_handle(h))
        .map_err(|e| (1, e.to_string()))
}

fn main() {
    if let Err((code, e)) = run() {
        eprintln!("switchyard-coscheduling: {e}");
        std::process::exit(code);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Command, String> {
        parse_args(args.iter().map(|s| s.to_string()), None)
    }

    #[test]
    fn defaults() {
        assert_eq!(
            parse(&[]).unwrap(),
            Command::Serve(Args {
                listen: Listen::Unix("/tmp/switchyard/coscheduling.sock".into()),
                no_optional_capabilities: false,
                pod_groups: Vec::new(),
                permit_timeout: Duration::from_secs(10),
                denied_backoff: Duration::from_secs(3),
            })
        );
    }

    #[test]
    fn probe_uses_the_listen_address() {
        assert_eq!(
            parse(&["--probe", "--listen", "unix:///run/c.sock"]).unwrap(),
            Command::Probe(Listen::Unix("/run/c.sock".into()))
        );
    }

    #[test]
    fn flags_with_spaces_or_equals() {
        let Command::Serve(a) = parse(&[
            "--listen=127.0.0.1:9000",
            "--pod-groups",
            "a.yaml",
            "--pod-groups=dir",
            "--permit-timeout-seconds",
            "30",
            "--denied-backoff-seconds=0",
            "--no-optional-capabilities",
        ])
        .unwrap() else {
            panic!("expected Serve");
        };
        assert_eq!(a.listen, Listen::Tcp("127.0.0.1:9000".parse().unwrap()));
        assert_eq!(a.pod_groups, vec![PathBuf::from("a.yaml"), "dir".into()]);
        assert_eq!(a.permit_timeout, Duration::from_secs(30));
        assert_eq!(a.denied_backoff, Duration::ZERO);
        assert!(a.no_optional_capabilities);
    }

    #[test]
    fn environment_listen_is_overridden_by_the_flag() {
        let env = Some("unix:///tmp/env.sock".to_string());
        let Command::Serve(a) = parse_args(Vec::new(), env.clone()).unwrap() else {
            panic!("expected Serve");
        };
        assert_eq!(a.listen, Listen::Unix("/tmp/env.sock".into()));
        let Command::Serve(a) =
            parse_args(["--listen".into(), "unix:/tmp/f.sock".into()], env).unwrap()
        else {
            panic!("expected Serve");
        };
        assert_eq!(a.listen, Listen::Unix("/tmp/f.sock".into()));
    }

    #[test]
    fn bad_arguments() {
        assert_eq!(parse(&["--help"]).unwrap(), Command::Help);
        for (args, want) in [
            (&["--bogus"][..], "unknown argument \"--bogus\""),
            (&["--pod-groups"][..], "--pod-groups needs a value"),
            (
                &["--permit-timeout-seconds", "1.5"][..],
                "--permit-timeout-seconds: \"1.5\" is not a whole number",
            ),
            (
                &["--permit-timeout-seconds=0"][..],
                "--permit-timeout-seconds must be at least 1",
            ),
            (
                &["--denied-backoff-seconds", "-1"][..],
                "--denied-backoff-seconds: \"-1\" is not",
            ),
            (&["--listen", "nonsense"][..], "listen address"),
        ] {
            let e = parse(args).unwrap_err();
            assert!(e.starts_with(want), "{args:?}: {e}");
        }
    }
}
