//! Device binding conditions (KEP-5007, `DRADeviceBindingConditions`, beta and on in
//! v1.36): a device may name conditions its driver sets in the claim's
//! `status.devices` once it is attached. PreBind writes the allocation with its
//! `allocationTimestamp`, then waits until every allocated device's binding conditions
//! are `True` (the pod binds), one of its failure conditions is `True`, or
//! `bindingTimeout` passes since the allocation (PreBind fails; Unreserve takes the
//! pod out of `reservedFor`; the next attempt's Filter finds the claim unavailable and
//! PostFilter deallocates it). Upstream `isPodReadyForBinding`,
//! `isClaimReadyForBinding`, `isClaimTimeout`.

use std::time::Duration;

use super::{DynamicResources, StateData};
use crate::framework::Status;
use crate::model::dra::{Allocation, ResourceClaim};

/// Upstream `DynamicResourcesBindingTimeoutDefault`.
pub const DEFAULT_BINDING_TIMEOUT: Duration = Duration::from_secs(600);

/// How often PreBind looks at the claims while it waits (upstream polls every 5 s; a
/// change of any claim wakes it sooner).
const POLL: Duration = Duration::from_secs(5);

/// Upstream `ErrDeviceBindingFailed`'s and `ErrDeviceBindingTimeout`'s texts.
const FAILED: &str = "device binding failed";
const TIMEOUT: &str = "device binding timeout";

/// Whether some allocated device of `a` has binding conditions to wait for.
pub fn has_binding_conditions(a: &Allocation) -> bool {
    a.devices
        .iter()
        .any(|d| d.binding.as_ref().is_some_and(|b| !b.conditions.is_empty()))
}

/// Upstream `isClaimReadyForBinding`: `Ok(true)` when every device with binding
/// conditions has them all `True`, `Ok(false)` while one has not (or has no status
/// yet), `Err` naming the failure condition that is `True`.
pub fn claim_ready(claim: &ResourceClaim) -> Result<bool, String> {
    let Some(a) = &claim.allocation else {
        return Ok(false);
    };
    for d in &a.devices {
        let Some(b) = d.binding.as_ref().filter(|b| !b.conditions.is_empty()) else {
            continue;
        };
        // Matched on driver, pool and device (upstream `getAllocatedDeviceStatus`).
        let Some(st) = claim
            .devices
            .iter()
            .find(|s| s.driver == d.driver && s.pool == d.pool && s.device == d.device)
        else {
            return Ok(false);
        };
        let condition = |t: &str| st.conditions.iter().find(|c| &*c.type_ == t);
        for f in b.failure.iter() {
            if let Some(c) = condition(f).filter(|c| &*c.status == "True") {
                return Err(format!(
                    "{FAILED}: claim={}, reason={}, message={:?}",
                    claim.name, c.reason, c.message
                ));
            }
        }
        if !b
            .conditions
            .iter()
            .all(|t| condition(t).is_some_and(|c| &*c.status == "True"))
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Upstream `isClaimTimeout`: the claim's allocation has binding conditions and was
/// made more than `timeout` before `now_us` (microseconds since the epoch).
pub fn claim_timed_out(claim: &ResourceClaim, timeout: Duration, now_us: i64) -> bool {
    let Some(a) = &claim.allocation else {
        return false;
    };
    let Some(at) = a.timestamp else {
        return false;
    };
    has_binding_conditions(a)
        && at.saturating_add(i64::try_from(timeout.as_micros()).unwrap_or(i64::MAX)) < now_us
}

/// `a` with an `allocationTimestamp` (now) if it has none: PreBind sets it on every
/// allocation it writes (upstream `bindClaim`).
pub fn stamped(a: Option<&Allocation>) -> Option<Allocation> {
    a.map(|a| {
        let mut a = a.clone();
        a.timestamp.get_or_insert_with(allocation_timestamp);
        a
    })
}

/// Now, in microseconds since the epoch.
pub fn now_us() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_microsecond()
}

/// Now rounded to the second, as `metav1.Time` keeps it: an `allocationTimestamp`.
pub fn allocation_timestamp() -> i64 {
    now_us() / 1_000_000 * 1_000_000
}

impl DynamicResources {
    /// PreBind's wait for the pod's claims to be ready for binding (upstream
    /// `PollUntilContextTimeout(5s, bindingTimeout, immediate)` over
    /// `isPodReadyForBinding`). Claims are read from the claim tracker, as upstream
    /// reads its cache.
    pub(super) async fn wait_for_binding_conditions(&self, s: &StateData) -> Status {
        let deadline = tokio::time::Instant::now() + self.binding_timeout;
        loop {
            let changed = self.dra.claims_changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.pod_ready_for_binding(s) {
                Ok(true) => return Status::success(),
                Ok(false) => {}
                Err(e) => return Status::error(e),
            }
            let poll = (tokio::time::Instant::now() + POLL).min(deadline);
            tokio::select! {
                _ = &mut changed => {}
                _ = tokio::time::sleep_until(poll) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return Status::error(format!("{TIMEOUT}: context deadline exceeded"));
            }
        }
    }

    /// Upstream `isPodReadyForBinding`: every claim of the pod ready; the first that
    /// failed, or is not ready past its timeout, ends the wait with its error.
    fn pod_ready_for_binding(&self, s: &StateData) -> Result<bool, String> {
        let now = now_us();
        let st = self.dra.read();
        let mut ready = true;
        let claims = s.claims.iter().map(|pc| pc.claim.clone());
        let created = super::lock(&s.created).clone();
        for c in claims.chain(created) {
            let Some(cur) = st.claim(&c.namespace, &c.name) else {
                continue;
            };
            if !claim_ready(cur)? {
                if claim_timed_out(cur, self.binding_timeout, now) {
                    return Err(format!("{TIMEOUT}: claim={}", cur.name));
                }
                ready = false;
            }
        }
        Ok(ready)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::dra::{
        AllocatedDeviceStatus, BindingConditions, ClaimSpec, DeviceCondition, DeviceResult,
    };

    fn claim(conditions: &[(&str, &str)], timestamp: Option<i64>) -> ResourceClaim {
        ResourceClaim {
            namespace: "ns".into(),
            name: "c".into(),
            uid: "u".into(),
            resource_version: None,
            deleting: false,
            finalizers: Box::new([]),
            annotations: Default::default(),
            owner: None,
            spec: Arc::new(ClaimSpec::default()),
            allocation: Some(Arc::new(Allocation {
                devices: vec![DeviceResult {
                    request: "r".into(),
                    driver: "d".into(),
                    pool: "p".into(),
                    device: "gpu-0".into(),
                    admin_access: false,
                    share: None,
                    binding: Some(Arc::new(BindingConditions {
                        conditions: Box::new(["Attached".into(), "Ready".into()]),
                        failure: Box::new(["Failed".into()]),
                    })),
                }],
                config: vec![],
                node_selector: None,
                timestamp,
            })),
            reserved_for: vec![],
            devices: (!conditions.is_empty())
                .then(|| AllocatedDeviceStatus {
                    driver: "d".into(),
                    pool: "p".into(),
                    device: "gpu-0".into(),
                    share_id: None,
                    conditions: conditions
                        .iter()
                        .map(|(t, s)| DeviceCondition {
                            type_: (*t).into(),
                            status: (*s).into(),
                            reason: "Why".into(),
                            message: "what".into(),
                        })
                        .collect(),
                    raw: Arc::new(serde_json::Value::Null),
                })
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn a_claim_is_ready_when_every_binding_condition_is_true() {
        assert_eq!(claim_ready(&claim(&[], None)), Ok(false));
        assert_eq!(
            claim_ready(&claim(&[("Attached", "True")], None)),
            Ok(false)
        );
        assert_eq!(
            claim_ready(&claim(&[("Attached", "True"), ("Ready", "False")], None)),
            Ok(false)
        );
        assert_eq!(
            claim_ready(&claim(&[("Attached", "True"), ("Ready", "True")], None)),
            Ok(true)
        );
        // A failure condition that is True wins over binding conditions that are.
        assert_eq!(
            claim_ready(&claim(
                &[("Attached", "True"), ("Ready", "True"), ("Failed", "True")],
                None
            )),
            Err("device binding failed: claim=c, reason=Why, message=\"what\"".into())
        );
        assert_eq!(
            claim_ready(&claim(
                &[("Failed", "False"), ("Attached", "True"), ("Ready", "True")],
                None
            )),
            Ok(true)
        );
    }

    #[test]
    fn a_claim_times_out_only_past_its_allocation_timestamp() {
        let t = Duration::from_secs(600);
        assert!(!claim_timed_out(&claim(&[], None), t, i64::MAX));
        let at = 1_000_000_000_000;
        assert!(!claim_timed_out(&claim(&[], Some(at)), t, at + 600_000_000));
        assert!(claim_timed_out(&claim(&[], Some(at)), t, at + 600_000_001));
    }
}
