//! Helpers shared by plugins.

use crate::framework::interface::MAX_NODE_SCORE;
use crate::framework::Status;

/// Upstream `helper.DefaultNormalizeScore`: scales scores so the highest becomes
/// `max_priority` (integer, truncating); with `reverse` the lowest wins. All zeros stay
/// zero, or become `max_priority` when reversed.
pub fn default_normalize_score(max_priority: i64, reverse: bool, scores: &mut [i64]) {
    let max = scores.iter().copied().fold(0, i64::max);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = max_priority);
        }
        return;
    }
    for s in scores.iter_mut() {
        let mut v = max_priority * *s / max;
        if reverse {
            v = max_priority - v;
        }
        *s = v;
    }
}

/// Decodes a plugin's args strictly (unknown fields are errors), naming the field that
/// failed; absent args decode as the type's default.
pub fn decode_args<T: serde::de::DeserializeOwned + Default>(
    args: Option<&serde_json::Value>,
) -> Result<T, String> {
    match args {
        None => Ok(T::default()),
        Some(v) => serde_path_to_error::deserialize(v).map_err(|e| {
            let path = e.path().to_string();
            if path == "." {
                e.inner().to_string()
            } else {
                format!("{path}: {}", e.inner())
            }
        }),
    }
}

/// The status for a plugin's state missing from the cycle state.
pub fn missing_state(key: &str) -> Status {
    Status::error(format!("error reading {key:?} from cycleState: not found"))
}

pub const MAX_SCORE: i64 = MAX_NODE_SCORE;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_like_upstream() {
        let mut s = [0, 1, 3];
        default_normalize_score(100, true, &mut s);
        assert_eq!(s, [100, 67, 0]);
        let mut s = [2, 4, 0];
        default_normalize_score(100, false, &mut s);
        assert_eq!(s, [50, 100, 0]);
        let mut s = [0, 0];
        default_normalize_score(100, true, &mut s);
        assert_eq!(s, [100, 100]);
        let mut s = [0, 0];
        default_normalize_score(100, false, &mut s);
        assert_eq!(s, [0, 0]);
    }
}

/// Storage look-ups the volume plugins share, with upstream's messages.
pub mod volumes {
    use std::sync::Arc;

    use crate::cache::volumes::VolumeState;
    use crate::framework::Status;
    use crate::model::storage::{PersistentVolumeClaim, StorageClass};
    use crate::model::Pod;

    /// The client-go NotFound text for a claim.
    pub fn pvc_not_found(name: &str) -> String {
        format!("persistentvolumeclaim \"{name}\" not found")
    }

    /// A pod's claim, or UnschedulableAndUnresolvable with the lister's NotFound text.
    pub fn get_pvc(
        st: &VolumeState,
        pod: &Pod,
        claim: &str,
    ) -> Result<Arc<PersistentVolumeClaim>, Status> {
        st.pvc(&pod.namespace, claim)
            .cloned()
            .ok_or_else(|| Status::unresolvable(pvc_not_found(claim)))
    }

    /// Upstream `ephemeral.VolumeIsForPod`: a generic ephemeral volume's claim must be
    /// controlled by the pod, else it is someone else's claim of the same name.
    pub fn ephemeral_claim_is_for_pod(
        pod: &Pod,
        pvc: &PersistentVolumeClaim,
    ) -> Result<(), String> {
        if pvc.controller_uid.as_deref() != Some(&*pod.uid) {
            return Err(format!(
                "PVC {}/{} was not created for pod {}/{} (pod is not owner)",
                pvc.namespace, pvc.name, pod.namespace, pod.name
            ));
        }
        Ok(())
    }

    /// The queueing hint for a claim added or updated: only pods that mount it
    /// (through a `persistentVolumeClaim` volume, and with `ephemeral` through a
    /// generic ephemeral volume too) may be helped.
    pub fn claim_event_hint(
        pod: &Pod,
        new: Option<&crate::framework::events::EventObject>,
        ephemeral: bool,
    ) -> crate::framework::events::QueueingHint {
        use crate::framework::events::QueueingHint;
        use crate::model::storage::{PodVolume, StorageObject};
        let Some(StorageObject::Pvc(c)) = new.and_then(|n| n.as_storage()) else {
            return QueueingHint::Queue;
        };
        let mounts = c.namespace == pod.namespace
            && pod.spec.volumes.iter().any(|v| match v {
                PodVolume::Claim {
                    claim,
                    ephemeral: e,
                    ..
                } => *claim == c.name && (ephemeral || !*e),
                _ => false,
            });
        if mounts {
            QueueingHint::Queue
        } else {
            QueueingHint::QueueSkip
        }
    }

    /// A claim's class, or the lister's NotFound text.
    pub fn get_class(st: &VolumeState, name: &str) -> Result<Arc<StorageClass>, String> {
        st.storage_class(name)
            .cloned()
            .ok_or_else(|| format!("storageclass.storage.k8s.io \"{name}\" not found"))
    }
}
