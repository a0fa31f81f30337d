//! Accelerator, the example plugin every SDK ships (here the Rust one): a pod
//! annotated `accelerator.switchyard.dev/type: T` fits only nodes labelled with the same
//! type; among those it prefers nodes already running pods of its type (packing them).
//!
//! `cargo build --release --examples -p switchyard-plugin-sdk`, then
//! `target/release/examples/accelerator --listen unix:///tmp/acc.sock`.

use std::sync::Arc;

use switchyard_plugin_sdk::{
    pb, Cycle, CycleState, FilterPlugin, NodeInfo, Plugin, ScorePlugin, Status,
};

const KEY: &str = "accelerator.switchyard.dev/type";

struct Accelerator;

impl Plugin for Accelerator {
    fn name(&self) -> &str {
        "Accelerator"
    }
    // Pods it rejected can fit once a node is added or relabelled.
    fn events(&self) -> Vec<pb::ClusterEvent> {
        vec![pb::ClusterEvent {
            resource: "Node".into(),
            actions: vec!["Add".into(), "UpdateNodeLabel".into()],
        }]
    }
    // Filter and Score read only the pod and the node asked about.
    fn node_local(&self) -> bool {
        true
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl FilterPlugin for Accelerator {
    fn filter(&self, cycle: &Cycle, _: &CycleState, node: &NodeInfo) -> Status {
        match cycle.pod.annotations.get(KEY) {
            Some(want) if node.node.labels.get(KEY) != Some(want) => {
                Status::unschedulable(format!("node has no {want} accelerator"))
            }
            _ => Status::success(),
        }
    }
}

impl ScorePlugin for Accelerator {
    fn score(&self, cycle: &Cycle, _: &CycleState, node: &NodeInfo) -> Result<i64, Status> {
        let Some(want) = cycle.pod.annotations.get(KEY) else {
            return Ok(0);
        };
        Ok(node
            .pods
            .iter()
            .filter(|p| p.annotations.get(KEY) == Some(want))
            .count() as i64)
    }
    fn has_normalize(&self) -> bool {
        true
    }
    fn normalize(&self, _: &Cycle, _: &CycleState, scores: &mut [i64]) -> Status {
        let top = scores.iter().copied().max().unwrap_or(0);
        for s in scores.iter_mut() {
            *s = if top > 0 { *s * 100 / top } else { 0 };
        }
        Status::success()
    }
}

fn main() -> Result<(), switchyard_plugin_sdk::Error> {
    switchyard_plugin_sdk::run(vec![Arc::new(Accelerator)])
}
