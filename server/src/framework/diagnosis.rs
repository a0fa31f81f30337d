//! Why a pod did not fit (upstream `Diagnosis` and `FitError`): per-node statuses, the
//! plugins that rejected it, and the `0/N nodes are available: ...` message built from
//! them. Shared by the scheduling cycle and preemption.

use std::collections::HashSet;

use super::interface::NodeToStatus;
use super::interned::PluginName;
use super::status::{Code, Status};

/// Why no node was chosen, and what each node said (upstream `Diagnosis`).
#[derive(Default, Debug)]
pub struct Diagnosis {
    pub node_to_status: NodeToStatus,
    /// Nodes Filter rejected in this attempt. Their statuses are kept in
    /// `node_to_status` only when no node fit: nothing reads them otherwise.
    pub filter_rejected: usize,
    pub unschedulable_plugins: HashSet<PluginName>,
    pub pending_plugins: HashSet<PluginName>,
    pub pre_filter_msg: String,
    pub post_filter_msg: String,
}

impl Diagnosis {
    /// Upstream `AddPluginStatus`.
    pub fn add_plugin_status(&mut self, s: &Status) {
        let Some(p) = s.plugin() else { return };
        if s.is_rejected() {
            if s.code() == Code::Pending {
                self.pending_plugins.insert(p);
            } else {
                self.unschedulable_plugins.insert(p);
            }
        }
    }
}

/// Upstream `FitError.Error()`: `0/N nodes are available: <reasons>.` with reasons
/// counted per node, sorted as strings, then the PostFilter message.
pub fn fit_error_message(num_all_nodes: usize, d: &Diagnosis) -> String {
    let mut msg = format!("0/{num_all_nodes} nodes are available:");
    if !d.pre_filter_msg.is_empty() {
        msg.push_str(&format!(" {}.", d.pre_filter_msg));
    } else {
        let mut counts: std::collections::HashMap<&str, usize> = Default::default();
        for (_, s) in d.node_to_status.iter() {
            for r in s.reasons() {
                *counts.entry(r).or_default() += 1;
            }
        }
        let explicit = d.node_to_status.len();
        if explicit < num_all_nodes {
            for r in d.node_to_status.absent().reasons() {
                *counts.entry(r).or_default() += num_all_nodes - explicit;
            }
        }
        let mut strs: Vec<String> = counts
            .into_iter()
            .map(|(r, c)| format!("{c} {r}"))
            .collect();
        strs.sort();
        if !strs.is_empty() {
            msg.push_str(&format!(" {}.", strs.join(", ")));
        }
    }
    if !d.post_filter_msg.is_empty() {
        msg.push_str(&format!(" {}", d.post_filter_msg));
    }
    msg
}
