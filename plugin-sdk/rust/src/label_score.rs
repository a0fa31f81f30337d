//! A [`LabelScorePlugin`] served as PreScore and Score: PreScore computes the table
//! and keeps it as the plugin's cycle state (and the reply carries it, for a
//! scheduler that scores the nodes itself); Score looks each node's label value up
//! in it, for a scheduler that calls Score anyway.

use std::collections::HashMap;
use std::sync::Arc;

use crate::pb;
use crate::plugin::{Cycle, LabelScorePlugin};
use crate::snapshot::NodeInfo;
use crate::state::CycleState;
use crate::status::Status;

/// This attempt's raw scores by label value.
#[derive(Clone)]
pub(crate) struct LabelTable(Arc<HashMap<String, i64>>);

/// PreScore: the plugin's table, kept in `state`.
pub(crate) fn pre_score(
    lp: &dyn LabelScorePlugin,
    cycle: &Cycle,
    state: &mut CycleState,
) -> Status {
    match lp.label_scores(cycle) {
        Ok(t) => {
            state.write(LabelTable(Arc::new(t)));
            Status::success()
        }
        Err(s) => s,
    }
}

/// The table PreScore kept, for its reply (values sorted: the same table is the
/// same message).
pub(crate) fn reply(state: &CycleState) -> Option<pb::LabelScores> {
    let t = state.read::<LabelTable>()?;
    let mut entries: Vec<(&String, &i64)> = t.0.iter().collect();
    entries.sort_unstable();
    Some(pb::LabelScores {
        values: entries.iter().map(|(v, _)| (*v).clone()).collect(),
        scores: entries.iter().map(|(_, s)| **s).collect(),
    })
}

/// Whether the plugin's scores are normalised (a standard normalisation).
pub(crate) fn has_normalize(lp: &dyn LabelScorePlugin) -> bool {
    lp.score_normalization() != pb::ScoreNormalization::Custom
}

/// Score over `nodes` from the table PreScore kept, normalised when asked; the flag
/// says whether the scores are normalised.
pub(crate) fn scores(
    lp: &dyn LabelScorePlugin,
    state: &CycleState,
    nodes: &[&NodeInfo],
    normalize: bool,
) -> Result<(Vec<i64>, bool), Status> {
    let t = state.read::<LabelTable>().ok_or_else(|| {
        Status::error(format!(
            "plugin {:?}: Score before its PreScore in this cycle",
            lp.name()
        ))
    })?;
    let key = lp.score_node_label();
    let mut scores: Vec<i64> = nodes
        .iter()
        .map(|n| {
            n.node
                .labels
                .get(key)
                .and_then(|v| t.0.get(v))
                .copied()
                .unwrap_or(0)
        })
        .collect();
    if !has_normalize(lp) {
        return Ok((scores, true));
    }
    if !normalize {
        return Ok((scores, false));
    }
    switchyard_proto::normalize_scores(lp.score_normalization(), &mut scores);
    Ok((scores, true))
}
