//! NodeAffinity: `spec.nodeSelector` and required node affinity filter nodes (and may
//! narrow them in PreFilter when terms pin `metadata.name`); preferred terms score
//! them. `addedAffinity` in the plugin args applies to every pod of the profile.

use std::collections::HashSet;
use std::sync::Arc;

use serde::Deserialize;

use crate::cache::Snapshot;
use crate::framework::events::{ActionType, ClusterEventWithHint, EventResource, QueueingHint};
use crate::framework::interface::{
    FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult, PreScorePlugin, ScorePlugin,
};
use crate::framework::{CycleState, Handle, NodeInfo, PluginFactory, Status};
use crate::model::convert::{node_selector_from_k8s, node_selector_term_from_k8s};
use crate::model::labels::{NodeSelector, PreferredSchedulingTerm};
use crate::model::{Node, Pod};
use crate::plugins::helper::{decode_args, default_normalize_score, MAX_SCORE};

pub const NAME: &str = "NodeAffinity";
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";
pub const ERR_REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";
pub const ERR_REASON_CONFLICT: &str = "pod affinity terms conflict";

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NodeAffinityArgs {
    #[serde(default)]
    added_affinity: Option<k8s_openapi::api::core::v1::NodeAffinity>,
}

pub struct NodeAffinity {
    added_node_selector: Option<NodeSelector>,
    added_pref_terms: Vec<PreferredSchedulingTerm>,
}

/// Whether the pod's nodeSelector and required affinity both match the node.
pub fn required_node_affinity_matches(pod: &Pod, node: &Node) -> bool {
    if let Some(sel) = &pod.spec.node_selector {
        if !sel.iter().all(|(k, v)| node.labels.get(k) == Some(v)) {
            return false;
        }
    }
    match &pod.spec.required_node_affinity {
        Some(ns) => ns.matches(&node.name, &node.labels),
        None => true,
    }
}

impl NodeAffinity {
    fn added_matches(&self, node: &Node) -> bool {
        self.added_node_selector
            .as_ref()
            .is_none_or(|s| s.matches(&node.name, &node.labels))
    }
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &str {
        NAME
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
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
        let added = self.added_node_selector.clone();
        Some(vec![ClusterEventWithHint::with_hint(
            EventResource::Node,
            ActionType::ADD.union(ActionType::UPDATE_NODE_LABEL),
            move |pod, old, new| {
                let Some(new) = new.and_then(|n| n.as_node()) else {
                    return QueueingHint::QueueSkip;
                };
                if let Some(a) = &added {
                    if !a.matches(&new.name, &new.labels) {
                        return QueueingHint::QueueSkip;
                    }
                }
                if !required_node_affinity_matches(pod, new) {
                    return QueueingHint::QueueSkip;
                }
                match old.and_then(|o| o.as_node()) {
                    None => QueueingHint::Queue,
                    Some(o) if required_node_affinity_matches(pod, o) => QueueingHint::QueueSkip,
                    Some(_) => QueueingHint::Queue,
                }
            },
        )])
    }
}

impl PreFilterPlugin for NodeAffinity {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &Pod,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let required = pod.spec.required_node_affinity.as_ref();
        if required.is_none()
            && self.added_node_selector.is_none()
            && pod.spec.node_selector.is_none()
        {
            return (None, Status::skip());
        }
        let Some(required) = required.filter(|r| !r.terms.is_empty()) else {
            return (None, Status::success());
        };
        // Node names pinned by `metadata.name In` in every term: the pod can only go there.
        let mut names: Option<HashSet<Arc<str>>> = None;
        for term in required.terms.iter() {
            let Some(pins) = &term.name_pins else {
                return (None, Status::success());
            };
            names
                .get_or_insert_with(HashSet::new)
                .extend(pins.iter().map(|n| Arc::from(&**n)));
        }
        match names {
            Some(n) if n.is_empty() => (None, Status::unresolvable(ERR_REASON_CONFLICT)),
            Some(n) => (
                Some(PreFilterResult {
                    node_names: Some(n),
                }),
                Status::success(),
            ),
            None => (None, Status::success()),
        }
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, _state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let n = node.node();
        if !self.added_matches(n) {
            return Status::unresolvable(ERR_REASON_ENFORCED);
        }
        if !required_node_affinity_matches(pod, n) {
            return Status::unresolvable(ERR_REASON_POD);
        }
        Status::success()
    }
}

impl PreScorePlugin for NodeAffinity {
    fn pre_score(
        &self,
        _state: &mut CycleState,
        pod: &Pod,
        _nodes: &[Arc<NodeInfo>],
        _snapshot: &Snapshot,
    ) -> Status {
        let prefs = &pod.spec.preferred_node_affinity;
        if prefs.is_empty() && self.added_pref_terms.is_empty() {
            return Status::skip();
        }
        // A preferred term that failed to parse makes the attempt fail, as upstream's
        // strict `NewPreferredSchedulingTerms` does.
        if let Some(bad) = prefs.iter().find(|p| !p.term.valid) {
            return Status::error(format!(
                "invalid preferred node affinity term with weight {}",
                bad.weight
            ));
        }
        Status::success()
    }
}

impl ScorePlugin for NodeAffinity {
    fn score(&self, _state: &CycleState, pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let n = node.node();
        let sum = self
            .added_pref_terms
            .iter()
            .chain(pod.spec.preferred_node_affinity.iter())
            .filter(|t| t.weight != 0 && !t.term.is_empty() && t.term.matches(&n.name, &n.labels))
            .map(|t| i64::from(t.weight))
            .sum();
        Ok(sum)
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
        default_normalize_score(MAX_SCORE, false, scores);
        Status::success()
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|args, _h: &Arc<Handle>| {
        let a: NodeAffinityArgs = decode_args(args)?;
        let mut added_node_selector = None;
        let mut added_pref_terms = Vec::new();
        if let Some(na) = a.added_affinity {
            if let Some(req) = &na.required_during_scheduling_ignored_during_execution {
                let sel = node_selector_from_k8s(req, "addedAffinity");
                if let Some(i) = sel.terms.iter().position(|t| !t.valid) {
                    return Err(format!(
                        "parsing addedAffinity.requiredDuringSchedulingIgnoredDuringExecution: nodeSelectorTerms[{i}] is invalid"
                    ).into());
                }
                added_node_selector = Some(sel);
            }
            for (i, p) in na
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .enumerate()
            {
                let term = node_selector_term_from_k8s(&p.preference);
                if !term.valid {
                    return Err(format!(
                        "parsing addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}]: invalid term"
                    ).into());
                }
                added_pref_terms.push(PreferredSchedulingTerm {
                    weight: p.weight,
                    term,
                });
            }
        }
        Ok(Arc::new(NodeAffinity {
            added_node_selector,
            added_pref_terms,
        }) as Arc<dyn Plugin>)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};

    fn plugin() -> NodeAffinity {
        NodeAffinity {
            added_node_selector: None,
            added_pref_terms: vec![],
        }
    }

    #[test]
    fn selector_and_required_affinity_are_anded() {
        let n = NodeInfo::new(node("n").label("zone", "a").label("disk", "ssd").build());
        let st = CycleState::new();
        assert!(plugin()
            .filter(&st, &pod("p").node_selector("zone", "a").build(), &n)
            .is_success());
        assert_eq!(
            plugin()
                .filter(&st, &pod("p").node_selector("zone", "b").build(), &n)
                .message(),
            ERR_REASON_POD
        );
        let both = pod("p")
            .node_selector("zone", "a")
            .node_affinity_in("disk", &["hdd"])
            .build();
        assert_eq!(plugin().filter(&st, &both, &n).message(), ERR_REASON_POD);
    }

    #[test]
    fn skip_without_affinity_and_score_preferred() {
        let p = pod("p").build();
        let (_, s) = plugin().pre_filter(&mut CycleState::new(), &p, &Snapshot::default());
        assert!(s.is_skip());
        assert!(plugin()
            .pre_score(&mut CycleState::new(), &p, &[], &Snapshot::default())
            .is_skip());
        let p = pod("p")
            .preferred_node_affinity(30, "zone", &["a"])
            .preferred_node_affinity(5, "disk", &["ssd"])
            .build();
        let n = NodeInfo::new(node("n").label("zone", "a").label("disk", "ssd").build());
        assert_eq!(plugin().score(&CycleState::new(), &p, &n).unwrap(), 35);
    }
}
