//! TaintToleration, as kube-scheduler has it, served as a sidecar under the name
//! `RemoteTaintToleration`: Filter rejects nodes with NoSchedule/NoExecute taints the
//! pod does not tolerate; Score counts intolerable PreferNoSchedule taints and
//! NormalizeScore reverses them (fewest taints scores 100). The scheduler's built-in
//! plugin and this one must decide identically; the test suite checks it.
//!
//! It declares itself node-local, which lets the scheduler send it the next pod's
//! Filter ahead of time. `SWITCHYARD_TAINTTOLERATION_LOOKAHEAD=off` withdraws that, to
//! measure what the lookahead is worth (`switchyard bench --sidecar-command`).

use std::sync::Arc;

use switchyard_plugin_sdk::pb::{Taint, Toleration};
use switchyard_plugin_sdk::{
    Cycle, CycleState, FilterPlugin, NodeInfo, Plugin, PreScorePlugin, ScorePlugin, Status,
};

const NAME: &str = "RemoteTaintToleration";
const ERR_REASON_UNTOLERATED: &str = "node(s) had untolerated taint(s)";
const MAX_SCORE: i64 = 100;

struct TaintToleration {
    node_local: bool,
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

    fn has_normalize(&self) -> bool {
        true
    }

    /// Upstream `DefaultNormalizeScore(MaxNodeScore, reverse=true, ...)`.
    fn normalize(&self, _cycle: &Cycle, _state: &CycleState, scores: &mut [i64]) -> Status {
        let max = scores.iter().copied().fold(0, i64::max);
        for s in scores.iter_mut() {
            *s = if max == 0 {
                MAX_SCORE
            } else {
                MAX_SCORE - MAX_SCORE * *s / max
            };
        }
        Status::success()
    }
}

fn main() {
    let node_local = std::env::var("SWITCHYARD_TAINTTOLERATION_LOOKAHEAD").as_deref() != Ok("off");
    if let Err(e) = switchyard_plugin_sdk::run(vec![Arc::new(TaintToleration { node_local })]) {
        eprintln!("switchyard-tainttoleration: {e}");
        std::process::exit(1);
    }
}
