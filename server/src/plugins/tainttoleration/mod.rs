//! TaintToleration: NoSchedule/NoExecute taints a pod does not tolerate exclude the
//! node; intolerable PreferNoSchedule taints lower its score.

use std::sync::Arc;

use crate::cache::Snapshot;
use crate::framework::events::{ActionType, ClusterEventWithHint, EventResource, QueueingHint};
use crate::framework::interface::{FilterPlugin, Plugin, PreScorePlugin, ScorePlugin};
use crate::framework::{CycleState, Handle, NodeInfo, PluginFactory, Status};
use crate::model::taint::{find_matching_untolerated_taint, tolerations_tolerate_taint};
use crate::model::{Node, Pod, Taint, TaintEffect, Toleration};
use crate::plugins::helper::{default_normalize_score, missing_state, MAX_SCORE};

pub const NAME: &str = "TaintToleration";
/// Upstream hides the taint's key and value since 1.34 (kubernetes#134740); before, it
/// printed `node(s) had untolerated taint {key: value}`. We follow the newest.
pub const ERR_REASON_UNTOLERATED: &str = "node(s) had untolerated taint(s)";

pub struct TaintToleration;

fn do_not_schedule(t: &Taint) -> bool {
    matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute)
}

fn untolerated(node: &Node, tolerations: &[Toleration]) -> bool {
    has_untolerated_do_not_schedule_taint(&node.taints, tolerations)
}

fn has_untolerated_do_not_schedule_taint(taints: &[Taint], tolerations: &[Toleration]) -> bool {
    find_matching_untolerated_taint(taints, tolerations, do_not_schedule).is_some()
}

/// PreScore state: the pod's tolerations that apply to PreferNoSchedule taints.
#[derive(Clone)]
struct PreScoreState {
    tolerations_prefer_no_schedule: Arc<[Toleration]>,
}

impl Plugin for TaintToleration {
    fn name(&self) -> &str {
        NAME
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
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![
            ClusterEventWithHint::with_hint(
                EventResource::Node,
                ActionType::ADD.union(ActionType::UPDATE_NODE_TAINT),
                |pod, old, new| {
                    let Some(new) = new.and_then(|n| n.as_node()) else {
                        return QueueingHint::QueueSkip;
                    };
                    let was = old
                        .and_then(|o| o.as_node())
                        .is_none_or(|o| untolerated(o, &pod.spec.tolerations));
                    if was && !untolerated(new, &pod.spec.tolerations) {
                        QueueingHint::Queue
                    } else {
                        QueueingHint::QueueSkip
                    }
                },
            ),
            ClusterEventWithHint::with_hint(
                EventResource::Pod,
                ActionType::UPDATE_POD_TOLERATION,
                |pod, _old, new| match new.and_then(|n| n.as_pod()) {
                    Some(p) if p.uid == pod.uid => QueueingHint::Queue,
                    _ => QueueingHint::QueueSkip,
                },
            ),
        ])
    }
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, _state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        if !node.has_hard_taints
            || !has_untolerated_do_not_schedule_taint(&node.node().taints, &pod.spec.tolerations)
        {
            return Status::success();
        }
        Status::unresolvable(ERR_REASON_UNTOLERATED)
    }
}

impl PreScorePlugin for TaintToleration {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _nodes: &[Arc<NodeInfo>],
        _snapshot: &Snapshot,
    ) -> Status {
        let tolerations: Vec<Toleration> = pod
            .spec
            .tolerations
            .iter()
            .filter(|t| t.effect.is_none() || t.effect == Some(TaintEffect::PreferNoSchedule))
            .cloned()
            .collect();
        state.write(PreScoreState {
            tolerations_prefer_no_schedule: tolerations.into(),
        });
        Status::success()
    }
}

impl ScorePlugin for TaintToleration {
    fn score(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .read::<PreScoreState>()
            .ok_or_else(|| missing_state("PreScoreTaintToleration"))?;
        Ok(node
            .node()
            .taints
            .iter()
            .filter(|t| {
                t.effect == TaintEffect::PreferNoSchedule
                    && !tolerations_tolerate_taint(&s.tolerations_prefer_no_schedule, t)
            })
            .count() as i64)
    }

    fn score_nodes(
        &self,
        state: &CycleState,
        _pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        out: &mut [i64],
    ) -> Result<(), Status> {
        let s = state
            .read::<PreScoreState>()
            .ok_or_else(|| missing_state("PreScoreTaintToleration"))?;
        for (n, o) in nodes.iter().zip(out.iter_mut()) {
            *o = if !n.has_soft_taints {
                0
            } else {
                n.node()
                    .taints
                    .iter()
                    .filter(|t| {
                        t.effect == TaintEffect::PreferNoSchedule
                            && !tolerations_tolerate_taint(&s.tolerations_prefer_no_schedule, t)
                    })
                    .count() as i64
            };
        }
        Ok(())
    }

    fn has_normalize_score(&self) -> bool {
        true
    }

    fn normalize_score(
        &self,
        _state: &CycleState,
        _pod: &Pod,
        _nodes: &[Arc<NodeInfo>],
        scores: &mut [i64],
    ) -> Status {
        default_normalize_score(MAX_SCORE, true, scores);
        Status::success()
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|_args, _h: &Arc<Handle>| Ok(Arc::new(TaintToleration)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::model::taint::TolerationOperator;
    use crate::testing::{node, pod};

    #[test]
    fn filter_and_score() {
        let tainted = NodeInfo::new(
            node("n")
                .taint("dedicated", "gpu", TaintEffect::NoSchedule)
                .build(),
        );
        let s = TaintToleration.filter(&CycleState::new(), &pod("p").build(), &tainted);
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), ERR_REASON_UNTOLERATED);
        let tol = Toleration {
            key: "dedicated".into(),
            operator: TolerationOperator::Equal,
            value: "gpu".into(),
            effect: Some(TaintEffect::NoSchedule),
            toleration_seconds: None,
        };
        assert!(TaintToleration
            .filter(
                &CycleState::new(),
                &pod("p").toleration(tol).build(),
                &tainted
            )
            .is_success());
        // PreferNoSchedule never filters; it counts in the score.
        let soft = NodeInfo::new(
            node("m")
                .taint("a", "", TaintEffect::PreferNoSchedule)
                .taint("b", "", TaintEffect::PreferNoSchedule)
                .build(),
        );
        let p = pod("p").build();
        assert!(TaintToleration
            .filter(&CycleState::new(), &p, &soft)
            .is_success());
        let mut st = CycleState::new();
        TaintToleration.pre_score(&mut st, &p, &[], &Snapshot::default());
        assert_eq!(TaintToleration.score(&st, &p, &soft).unwrap(), 2);
        // The batch path, which reads a node's taints only when it has soft ones, agrees.
        let nodes = [soft, tainted, NodeInfo::new(node("o").build())].map(Arc::new);
        let mut out = [9; 3];
        TaintToleration
            .score_nodes(&st, &p, &nodes, &mut out)
            .unwrap();
        let one: Vec<i64> = nodes
            .iter()
            .map(|n| TaintToleration.score(&st, &p, n).unwrap())
            .collect();
        assert_eq!((out.to_vec(), one), (vec![2, 0, 0], vec![2, 0, 0]));
    }
}
