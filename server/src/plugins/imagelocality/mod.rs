//! ImageLocality: favours nodes that already have the pod's images, weighted by how
//! widely each image is spread (so one node with a popular image does not win alone).

use std::sync::Arc;

use crate::cache::Snapshot;
use crate::framework::interface::{Plugin, PreScorePlugin, ScorePlugin, MAX_NODE_SCORE};
use crate::framework::{CycleState, Handle, NodeInfo, PluginFactory, Status};
use crate::model::Pod;

pub const NAME: &str = "ImageLocality";
const MB: i64 = 1024 * 1024;
const MIN_THRESHOLD: i64 = 23 * MB;
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

pub struct ImageLocality;

/// Per pod: each image with the share of nodes that have it, computed once per cycle.
#[derive(Clone)]
struct PreScoreState {
    images: Arc<[(Box<str>, f64)]>,
    slots: usize,
}

impl Plugin for ImageLocality {
    fn name(&self) -> &str {
        NAME
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreScorePlugin for ImageLocality {
    /// Upstream ImageLocality has no PreScore; this one only precomputes the spread of
    /// each image over the snapshot and never skips, so scores are unchanged.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        let total = snapshot.num_nodes().max(1) as f64;
        let images = pod
            .spec
            .images
            .iter()
            .map(|i| (i.clone(), snapshot.image_num_nodes(i) as f64 / total))
            .collect::<Vec<_>>();
        state.write(PreScoreState {
            images: images.into(),
            slots: pod.spec.image_slots,
        });
        Status::success()
    }
}

/// Upstream `calculatePriority`: clamp the summed scaled sizes into
/// [23MB, 1000MB × containers] and map linearly onto 0..=100.
fn calculate_priority(sum: i64, slots: usize) -> i64 {
    let max = MAX_CONTAINER_THRESHOLD * slots.max(1) as i64;
    let s = sum.clamp(MIN_THRESHOLD, max);
    MAX_NODE_SCORE * (s - MIN_THRESHOLD) / (max - MIN_THRESHOLD)
}

impl ScorePlugin for ImageLocality {
    fn score(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<PreScoreState>() else {
            return Err(crate::plugins::helper::missing_state(
                "PreScoreImageLocality",
            ));
        };
        let n = node.node();
        if n.images.is_empty() {
            return Ok(calculate_priority(0, s.slots));
        }
        let mut sum = 0i64;
        for (image, spread) in s.images.iter() {
            if let Some(size) = n.image_size(image) {
                sum += (size as f64 * spread) as i64;
            }
        }
        Ok(calculate_priority(sum, s.slots))
    }

    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        out: &mut [i64],
    ) -> Result<(), Status> {
        let Some(s) = state.read::<PreScoreState>() else {
            return Err(crate::plugins::helper::missing_state(
                "PreScoreImageLocality",
            ));
        };
        if s.images.iter().all(|(_, spread)| *spread == 0.0) {
            // No node has any of the pod's images.
            out.fill(calculate_priority(0, s.slots));
            return Ok(());
        }
        for (n, o) in nodes.iter().zip(out.iter_mut()) {
            *o = self.score(state, pod, n)?;
        }
        Ok(())
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|_args, _h: &Arc<Handle>| Ok(Arc::new(ImageLocality)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};

    #[test]
    fn spread_weighted_size() {
        let with = NodeInfo::new(node("a").image("nginx:latest", 500 * MB).build());
        let without = NodeInfo::new(node("b").build());
        let snap = Snapshot::from_node_infos(vec![with.clone(), without.clone()]);
        let p = pod("p").image("nginx").build();
        let mut st = CycleState::new();
        ImageLocality.pre_score(&mut st, &p, &[], &snap);
        // 500MB on half the nodes: 250MB scaled -> 100 * (250-23)/(1000-23) = 23
        assert_eq!(ImageLocality.score(&st, &p, &with).unwrap(), 23);
        assert_eq!(ImageLocality.score(&st, &p, &without).unwrap(), 0);
    }
}
