//! Alike pods (KEP-5598 signatures): the pod's signature for plugins that declared
//! which fields they read, memoised per pod, and what a reply needs to be kept for
//! alike pods.

use super::*;

/// A pod's signature, memoised.
pub(super) struct SignedPod {
    pub(super) epoch: u64,
    pub(super) spec: Arc<PodSpec>,
    pub(super) namespace: Arc<str>,
    pub(super) name: Arc<str>,
    pub(super) signature: Arc<[u8]>,
}

/// How many pods' signatures are memoised: the attempt's and its lookaheads'.
pub(super) const SIGNATURES_KEPT: usize = 8;

/// What a reply that may be reused for alike pods needs to be kept: the connection,
/// the pod's signature, and the batch's nodes (id, object, generation) in order.
pub(super) struct Fill {
    pub(super) epoch: u64,
    pub(super) signature: Arc<[u8]>,
    pub(super) nodes: Vec<NodeKey>,
}

impl Fill {
    pub(super) fn new<'a>(
        epoch: u64,
        signature: Arc<[u8]>,
        nodes: impl Iterator<Item = &'a NodeInfo>,
    ) -> Option<Fill> {
        let nodes = nodes
            .map(|n| n.node_arc().map(|a| (n.id, a.clone(), n.generation)))
            .collect::<Option<Vec<_>>>()?;
        Some(Fill {
            epoch,
            signature,
            nodes,
        })
    }
}

impl RemotePlugin {
    /// The attempt's connection and the pod's signature, when this plugin's answers
    /// may be reused for alike pods on that connection (it declared pod signatures
    /// in its handshake, and the endpoint allows it).
    pub(super) fn alike(&self, state: &CycleState, pod: &Pod) -> Option<(u64, Arc<[u8]>)> {
        if !self.ep().config().reuse_alike_pods {
            return None;
        }
        let epoch = RemoteCycles::of(state, self.ep().config().index)?.epoch;
        let fields = {
            let mut a = self.meta.alike.lock().ok()?;
            a.on_epoch(epoch, || {
                Declared::of(self.ep().plugin_info(&self.meta.name).as_ref(), true)
            });
            if !a.declared.filter {
                return None;
            }
            (a.declared.fields.clone(), a.declared.label_keys.clone())
        };
        let mut memo = self.meta.signatures.lock().ok()?;
        if let Some(m) = memo.iter().rev().find(|m| {
            m.epoch == epoch
                && Arc::ptr_eq(&m.spec, &pod.spec)
                && m.name == pod.name
                && m.namespace == pod.namespace
        }) {
            return Some((epoch, m.signature.clone()));
        }
        let signature: Arc<[u8]> = alike::signature(pod, &fields.0, &fields.1).into();
        if memo.len() == SIGNATURES_KEPT {
            memo.remove(0);
        }
        memo.push(SignedPod {
            epoch,
            spec: pod.spec.clone(),
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            signature: signature.clone(),
        });
        Some((epoch, signature))
    }

    pub(super) fn declared(&self) -> Declared {
        self.meta
            .alike
            .lock()
            .map(|a| a.declared.clone())
            .unwrap_or_default()
    }
}
