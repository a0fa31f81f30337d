//! Pod priority: PriorityClasses and how a pod's priority is resolved.

use super::*;

/// What pod conversion needs from the rest of the cluster: priority classes (pods
/// created through the API server already carry a resolved `spec.priority`; manifests
/// loaded into the embedded cluster may not).
pub trait PriorityResolver {
    fn priority_class(&self, name: &str) -> Option<PriorityClass>;
    fn global_default(&self) -> Option<PriorityClass>;
}

/// A resolver that knows only the two system classes.
pub struct SystemPriorities;

impl PriorityResolver for SystemPriorities {
    fn priority_class(&self, name: &str) -> Option<PriorityClass> {
        system_priority_class(name)
    }
    fn global_default(&self) -> Option<PriorityClass> {
        None
    }
}

/// The built-in `system-cluster-critical` and `system-node-critical` classes.
pub fn system_priority_class(name: &str) -> Option<PriorityClass> {
    let value = match name {
        "system-cluster-critical" => 2_000_000_000,
        "system-node-critical" => 2_000_001_000,
        _ => return None,
    };
    Some(PriorityClass {
        name: name.into(),
        value,
        global_default: false,
        preemption_policy: None,
    })
}

pub(super) fn resolve_priority(
    spec: &core::PodSpec,
    resolver: &dyn PriorityResolver,
) -> Result<(i32, PreemptionPolicy, Option<Arc<str>>)> {
    let class_name = spec
        .priority_class_name
        .as_deref()
        .filter(|n| !n.is_empty());
    let class = match class_name {
        Some(n) => Some(
            resolver
                .priority_class(n)
                .or_else(|| system_priority_class(n))
                .ok_or_else(|| {
                    err(
                        "spec.priorityClassName",
                        format!("no PriorityClass with name {n} was found: add a PriorityClass manifest or fix the name"),
                    )
                })?,
        ),
        None => resolver.global_default(),
    };
    let priority = spec
        .priority
        .or_else(|| class.as_ref().map(|c| c.value))
        .unwrap_or(0);
    let policy = match spec.preemption_policy.as_deref() {
        Some("Never") => PreemptionPolicy::Never,
        Some("PreemptLowerPriority") => PreemptionPolicy::PreemptLowerPriority,
        Some(other) => {
            return Err(err(
                "spec.preemptionPolicy",
                format!("unsupported value {other:?}: must be PreemptLowerPriority or Never"),
            ))
        }
        None => class
            .as_ref()
            .and_then(|c| c.preemption_policy)
            .unwrap_or_default(),
    };
    Ok((priority, policy, class_name.map(Into::into)))
}

pub fn priority_class_from_k8s(pc: &scheduling::PriorityClass) -> Result<PriorityClass> {
    let name = pc
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            err(
                "metadata.name",
                "required: every PriorityClass needs a name",
            )
        })?;
    let preemption_policy = match pc.preemption_policy.as_deref() {
        None => None,
        Some("Never") => Some(PreemptionPolicy::Never),
        Some("PreemptLowerPriority") => Some(PreemptionPolicy::PreemptLowerPriority),
        Some(o) => {
            return Err(err(
                "preemptionPolicy",
                format!("unsupported value {o:?}: must be PreemptLowerPriority or Never"),
            ))
        }
    };
    Ok(PriorityClass {
        name: name.into(),
        value: pc.value.unwrap_or(0),
        global_default: pc.global_default.unwrap_or(false),
        preemption_policy,
    })
}
