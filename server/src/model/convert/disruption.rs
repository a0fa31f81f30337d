//! PodDisruptionBudgets.

use super::*;

pub(super) fn int_or_percent(v: &IntOrString, field: &str) -> Result<IntOrPercent> {
    match v {
        IntOrString::Int(i) => Ok(IntOrPercent::Int(*i)),
        IntOrString::String(s) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<i32>().ok())
            .map(IntOrPercent::Percent)
            .ok_or_else(|| {
                err(
                    field,
                    format!("{s:?} is neither an integer nor a percentage like \"50%\""),
                )
            }),
    }
}

pub fn pdb_from_k8s(pdb: &policy::PodDisruptionBudget) -> Result<PodDisruptionBudget> {
    let name = pdb
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            err(
                "metadata.name",
                "required: every PodDisruptionBudget needs a name",
            )
        })?;
    let spec = pdb.spec.as_ref();
    let min_available = spec
        .and_then(|s| s.min_available.as_ref())
        .map(|v| int_or_percent(v, "spec.minAvailable"))
        .transpose()?;
    let max_unavailable = spec
        .and_then(|s| s.max_unavailable.as_ref())
        .map(|v| int_or_percent(v, "spec.maxUnavailable"))
        .transpose()?;
    if min_available.is_some() && max_unavailable.is_some() {
        return Err(err(
            "spec",
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    // A PDB's nil selector selects no pods; an empty one selects all in its namespace.
    let selector = match spec.and_then(|s| s.selector.as_ref()) {
        Some(s) => label_selector(Some(s), "spec.selector")?,
        None => LabelSelector::Nothing,
    };
    Ok(PodDisruptionBudget {
        namespace: pdb
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default")
            .into(),
        name: name.into(),
        selector,
        min_available,
        max_unavailable,
        disruptions_allowed: pdb.status.as_ref().and_then(|s| s.disruptions_allowed),
        status_given: pdb
            .status
            .as_ref()
            .and_then(|s| s.disruptions_allowed)
            .is_some(),
        disrupted_pods: pdb
            .status
            .as_ref()
            .and_then(|s| s.disrupted_pods.as_ref())
            .map(|m| m.keys().map(|k| k.as_str().into()).collect())
            .unwrap_or_default(),
    })
}
