//! Handshake: the protocol version, the plugins and their extension points, and the
//! optional capabilities this sidecar serves of those the scheduler offers.

use switchyard_proto::{
    CAPABILITY_FILTER_AFTER_PRE_FILTER, CAPABILITY_FILTER_BATCH, CAPABILITY_PERMIT_AFTER_RESERVE,
    CAPABILITY_REPLICATE_BATCH,
};

use super::score::has_normalize;
use super::Shared;
use crate::label_score;
use crate::plugin::Plugin;
use crate::{pb, PROTOCOL_VERSION};

impl Shared {
    pub(super) fn handshake(
        &self,
        req: pb::HandshakeRequest,
    ) -> Result<pb::HandshakeResponse, tonic::Status> {
        if !req.protocol_versions.iter().any(|v| v == PROTOCOL_VERSION) {
            return Err(tonic::Status::failed_precondition(format!(
                "this sidecar speaks protocol {PROTOCOL_VERSION}; the scheduler offered {:?}",
                req.protocol_versions
            )));
        }
        let plugins = self
            .plugins
            .iter()
            .map(|p| pb::PluginInfo {
                name: p.name().to_string(),
                extension_points: points(p.as_ref()),
                pre_filter_extensions: p.as_pre_filter().is_some_and(|f| f.has_extensions()),
                normalize_score: p.as_score().is_some_and(has_normalize)
                    || p.as_label_score().is_some_and(label_score::has_normalize),
                events: p.events(),
                node_local: p.node_local(),
                signature: p.signature().into_iter().map(|f| f as i32).collect(),
                signature_node_pods: p.signature_node_pods(),
                signature_label_keys: p.signature_label_keys(),
                pre_filter_pod_only: p.signature_node_pods() && p.pre_filter_pod_only(),
                score_normalization: match (p.as_score(), p.as_label_score()) {
                    (Some(s), _) => s.score_normalization(),
                    (None, Some(l)) => l.score_normalization(),
                    (None, None) => pb::ScoreNormalization::Custom,
                } as i32,
                score_node_label: p
                    .as_label_score()
                    .map(|l| l.score_node_label().to_string())
                    .unwrap_or_default(),
            })
            .collect();
        Ok(pb::HandshakeResponse {
            protocol_version: PROTOCOL_VERSION.to_string(),
            plugins,
            max_batch_nodes: self.max_batch_nodes,
            // Pod batches are only sent for node-local plugins; offering them costs
            // nothing.
            capabilities: req
                .capabilities
                .into_iter()
                .filter(|c| {
                    self.capabilities
                        && (c == CAPABILITY_FILTER_BATCH
                            || c == CAPABILITY_REPLICATE_BATCH
                            || c == CAPABILITY_FILTER_AFTER_PRE_FILTER
                            || c == CAPABILITY_PERMIT_AFTER_RESERVE)
                })
                .collect(),
        })
    }
}

fn points(p: &dyn Plugin) -> Vec<i32> {
    use pb::ExtensionPoint as E;
    let mut v = Vec::new();
    let mut add = |has: bool, e: E| {
        if has {
            v.push(e as i32)
        }
    };
    add(p.as_pre_enqueue().is_some(), E::PreEnqueue);
    add(p.as_queue_sort().is_some(), E::QueueSort);
    add(p.as_pre_filter().is_some(), E::PreFilter);
    add(p.as_filter().is_some(), E::Filter);
    add(p.as_post_filter().is_some(), E::PostFilter);
    let label = p.as_label_score().is_some();
    add(p.as_pre_score().is_some() || label, E::PreScore);
    add(p.as_score().is_some() || label, E::Score);
    add(p.as_reserve().is_some(), E::Reserve);
    add(p.as_permit().is_some(), E::Permit);
    add(p.as_pre_bind().is_some(), E::PreBind);
    add(p.as_bind().is_some(), E::Bind);
    add(p.as_post_bind().is_some(), E::PostBind);
    v
}
