//! TaintToleration, as kube-scheduler has it, served as a sidecar under the name
//! `RemoteTaintToleration`: Filter rejects nodes with NoSchedule/NoExecute taints the
//! pod does not tolerate; Score counts intolerable PreferNoSchedule taints and
//! NormalizeScore reverses them (fewest taints scores 100). The scheduler's built-in
//! plugin and this one must decide identically; the test suite checks it.
//!
//! It declares itself node-local, which lets the scheduler send it the next pod's
//! Filter ahead of time, and signs pods (its answers depend on tolerations and taints
//! only), which lets the scheduler reuse answers for alike pods. `--no-lookahead`
//! withdraws both, `--no-signature` the second, to measure what each is worth
//! (`switchyard bench --sidecar-command 'switchyard-tainttoleration --no-signature'`).
//! The SDK's flags (`--listen`, `--probe`, `--no-optional-capabilities`) work as in
//! every sidecar; `--help` lists them all.

use std::sync::Arc;

use switchyard_plugin_sdk::pb::{PodField, ScoreNormalization, Taint, Toleration};
use switchyard_plugin_sdk::{
    Cycle, CycleState, FilterPlugin, NodeInfo, Plugin, PreScorePlugin, ScorePlugin, SidecarArgs,
    Status,
};

const NAME: &str = "RemoteTaintToleration";
const ERR_REASON_UNTOLERATED: &str = "node(s) had untolerated taint(s)";

struct TaintToleration {
    node_local: bool,
    signature: bool,
}

/// Upstream `ToleratesTaint`.
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if !t.effect.is_empty() && t.effect != taint.effect {
        return false;
    }
    if !t.key.is_empty() && t.key != taint.key {
        return false;
    }
    match t.operator.as_str() {
        "Exists" => true,
        // "Equal" and the empty default.
        _ => t.value == taint.value,
    }
}

fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

/// PreScore state: the tolerations that apply to PreferNoSchedule taints.
#[derive(Clone)]
struct PreferNoScheduleTolerations(Vec<Toleration>);

impl Plugin for TaintToleration {
    fn name(&self) -> &str {
        NAME
    }
    fn events(&self) -> Vec<switchyard_plugin_sdk::pb::ClusterEvent> {
        vec![
            switchyard_plugin_sdk::pb::ClusterEvent {
                resource: "Node".into(),
                actions: vec!["Add".into(), "UpdateNodeTaint".into()],
            },
            switchyard_plugin_sdk::pb::ClusterEvent {
                resource: "Pod".into(),
                actions: vec!["UpdatePodToleration".into()],
            },
        ]
    }
    /// Taints and tolerations are per node: the scheduler may look ahead.
    fn node_local(&self) -> bool {
        self.node_local
    }
    /// Filter and Score read the pod's tolerations and the node's taints only (as
    /// upstream's TaintToleration signs pods): pods with the same tolerations get the
    /// same answer on an unchanged node.
    fn signature(&self) -> Vec<PodField> {
        if self.node_local && self.signature {
            vec![PodField::Tolerations]
        } else {
            Vec::new()
        }
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, cycle: &Cycle, _state: &CycleState, node: &NodeInfo) -> Status {
        let untolerated = node.node.taints.iter().any(|t| {
            (t.effect == "NoSchedule" || t.effect == "NoExecute")
                && !tolerated(&cycle.pod.tolerations, t)
        });
        if untolerated {
            Status::unresolvable(ERR_REASON_UNTOLERATED)
        } else {
            Status::success()
        }
    }
}

impl PreScorePlugin for TaintToleration {
    fn pre_score(&self, cycle: &Cycle, state: &mut CycleState, _nodes: &[&NodeInfo]) -> Status {
        let tolerations = cycle
            .pod
            .tolerations
            .iter()
            .filter(|t| t.effect.is_empty() || t.effect == "PreferNoSchedule")
            .cloned()
            .collect();
        state.write(PreferNoScheduleTolerations(tolerations));
        Status::success()
    }
}

impl ScorePlugin for TaintToleration {
    fn score(&self, _cycle: &Cycle, state: &CycleState, node: &NodeInfo) -> Result<i64, Status> {
        let tolerations = state
            .read::<PreferNoScheduleTolerations>()
            .ok_or_else(|| Status::error("PreScore state of RemoteTaintToleration is missing"))?;
        Ok(node
            .node
            .taints
            .iter()
            .filter(|t| t.effect == "PreferNoSchedule" && !tolerated(&tolerations.0, t))
            .count() as i64)
    }

    /// Upstream `DefaultNormalizeScore(MaxNodeScore, reverse=true, ...)`, applied by
    /// the SDK (and by a scheduler reusing raw scores).
    fn score_normalization(&self) -> ScoreNormalization {
        ScoreNormalization::DefaultReverse
    }
}

const USAGE: &str = "usage: switchyard-tainttoleration [--listen ADDRESS] [--probe]
                                  [--no-optional-capabilities] [--no-lookahead] [--no-signature]

Serves kube-scheduler's TaintToleration as the Switchyard plugin RemoteTaintToleration
over gRPC until SIGTERM.
";

const OWN_HELP: &str =
    "  --no-lookahead    do not declare the plugin node-local: the scheduler sends
                    no Filter ahead of a pod's cycle and reuses no answer
                    (implies --no-signature)
  --no-signature    declare no pod signature: node-local, but no answer is
                    reused for alike pods";

/// The command line: the plugin, and the SDK's flags; `None` for `--help`.
fn parse_args(
    args: impl IntoIterator<Item = String>,
) -> Result<Option<(TaintToleration, SidecarArgs)>, String> {
    let mut plugin = TaintToleration {
        node_local: true,
        signature: true,
    };
    let mut sdk = SidecarArgs::default();
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        if sdk.accept(&a, &mut args).map_err(|e| e.to_string())? {
            continue;
        }
        match a.as_str() {
            "--no-lookahead" => plugin.node_local = false,
            "--no-signature" => plugin.signature = false,
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}; try --help")),
        }
    }
    Ok(Some((plugin, sdk)))
}

fn main() {
    let r = match parse_args(std::env::args().skip(1)) {
        Ok(None) => {
            println!("{USAGE}\n{}\n{OWN_HELP}", SidecarArgs::help());
            Ok(())
        }
        Ok(Some((plugin, sdk))) => sdk
            .run(vec![Arc::new(plugin)], |_| {})
            .map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    if let Err(e) = r {
        eprintln!("switchyard-tainttoleration: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<(TaintToleration, SidecarArgs)>, String> {
        parse_args(args.iter().map(|a| a.to_string()))
    }

    #[test]
    fn flags_withdraw_the_lookahead_and_the_signature() {
        let (p, sdk) = parse(&[]).unwrap().unwrap();
        assert!(p.node_local() && p.signature() == [PodField::Tolerations]);
        assert_eq!(sdk, SidecarArgs::default());
        let (p, _) = parse(&["--no-signature"]).unwrap().unwrap();
        assert!(p.node_local() && p.signature().is_empty());
        let (p, sdk) = parse(&["--no-lookahead", "--listen", "unix:///tmp/t.sock"])
            .unwrap()
            .unwrap();
        assert!(!p.node_local() && p.signature().is_empty());
        assert_eq!(sdk.listen.as_deref(), Some("unix:///tmp/t.sock"));
        let (_, sdk) = parse(&["--no-optional-capabilities"]).unwrap().unwrap();
        assert!(sdk.no_optional_capabilities);
        assert!(parse(&["--help"]).unwrap().is_none());
        assert!(parse(&["--lookahead=off"]).is_err());
    }
}
