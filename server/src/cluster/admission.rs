//! What the API server's admission does to a pod before any scheduler sees it, for
//! the embedded cluster (a real API server does it itself): the RuntimeClass plugin
//! (upstream `plugin/pkg/admission/runtimeclass`) copies the RuntimeClass's
//! `overhead.podFixed` into `spec.overhead` and merges its `scheduling` node selector
//! and tolerations into the pod, refusing a pod whose class does not exist or whose
//! own values conflict.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::node::v1 as node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use crate::model::convert::{resource_list, toleration_from_k8s, validate_labels, FieldError};
use crate::model::quantity::Quantity;

fn err(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}

/// API-server validation of a RuntimeClass (upstream `ValidateRuntimeClass`): a name,
/// a handler that is a DNS label, valid overhead quantities, and a scheduling node
/// selector and tolerations a pod could carry.
pub fn validate_runtime_class(rc: &node::RuntimeClass) -> Result<(), FieldError> {
    if rc.metadata.name.as_deref().is_none_or(str::is_empty) {
        return Err(err(
            "metadata.name",
            "Required value: name or generateName is required",
        ));
    }
    let h = rc.handler.as_str();
    let label_ok = !h.is_empty()
        && h.len() <= 63
        && h.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !h.starts_with('-')
        && !h.ends_with('-');
    if !label_ok {
        return Err(err(
            "handler",
            format!("Invalid value: {h:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"),
        ));
    }
    if let Some(fixed) = rc.overhead.as_ref().and_then(|o| o.pod_fixed.as_ref()) {
        resource_list(fixed, "overhead.podFixed")?;
    }
    if let Some(s) = &rc.scheduling {
        validate_labels(s.node_selector.as_ref(), "scheduling.nodeSelector")?;
        for (i, t) in s.tolerations.iter().flatten().enumerate() {
            toleration_from_k8s(t, &format!("scheduling.tolerations[{i}]"))?;
        }
    }
    Ok(())
}

/// Quantities compared by value, as `apiequality.Semantic.DeepEqual` compares them
/// (`1` equals `1000m`).
fn same_quantities(a: &BTreeMap<String, K8sQuantity>, b: &BTreeMap<String, K8sQuantity>) -> bool {
    a.len() == b.len()
        && a.iter().all(|(k, v)| {
            b.get(k)
                .is_some_and(|w| match (Quantity::parse(&v.0), Quantity::parse(&w.0)) {
                    (Ok(x), Ok(y)) => x == y,
                    _ => v.0 == w.0,
                })
        })
}

/// Upstream `isSuperset`: whether toleration `ss` tolerates everything `t` does.
fn is_superset(ss: &core::Toleration, t: &core::Toleration) -> bool {
    if ss == t {
        return true;
    }
    let op = |x: &core::Toleration| x.operator.clone().unwrap_or_default();
    let key = |x: &core::Toleration| x.key.clone().unwrap_or_default();
    let effect = |x: &core::Toleration| x.effect.clone().unwrap_or_default();
    if key(t) != key(ss) && !(key(ss).is_empty() && op(ss) == "Exists") {
        return false;
    }
    if effect(t) != effect(ss) && !effect(ss).is_empty() {
        return false;
    }
    if effect(ss) == "NoExecute" {
        if let Some(s) = ss.toleration_seconds {
            if t.toleration_seconds.is_none_or(|ts| ts > s) {
                return false;
            }
        }
    }
    match op(ss).as_str() {
        "Equal" | "" => {
            matches!(op(t).as_str(), "Equal" | "")
                && t.value.clone().unwrap_or_default() == ss.value.clone().unwrap_or_default()
        }
        "Exists" => true,
        _ => false,
    }
}

/// Upstream `tolerations.MergeTolerations`: both lists, keeping only one of equal
/// tolerations and dropping any that another one covers.
fn merge_tolerations(
    first: &[core::Toleration],
    second: &[core::Toleration],
) -> Vec<core::Toleration> {
    let all: Vec<&core::Toleration> = first.iter().chain(second).collect();
    let mut merged: Vec<core::Toleration> = Vec::new();
    'next: for (i, t) in all.iter().enumerate() {
        if merged.iter().any(|m| is_superset(m, t)) {
            continue;
        }
        for t2 in &all[i + 1..] {
            if t != t2 && is_superset(t2, t) {
                continue 'next;
            }
        }
        merged.push((*t).clone());
    }
    merged
}

/// The RuntimeClass admission plugin on a pod being created (`Admit`, then
/// `Validate`), with upstream's messages. `classes` are the RuntimeClasses by name.
pub fn admit_runtime_class(
    pod: &mut core::Pod,
    classes: &BTreeMap<String, node::RuntimeClass>,
) -> Result<(), FieldError> {
    let Some(spec) = pod.spec.as_mut() else {
        return Ok(());
    };
    let Some(name) = spec.runtime_class_name.clone() else {
        // A pod that names no class keeps an overhead written into it: a cluster's
        // export carries the overhead admission set (see docs/differences.md).
        return Ok(());
    };
    let Some(rc) = classes.get(&name) else {
        return Err(err(
            "spec.runtimeClassName",
            format!("pod rejected: RuntimeClass {name:?} not found (add the RuntimeClass to the manifests)"),
        ));
    };
    match rc.overhead.as_ref().and_then(|o| o.pod_fixed.as_ref()) {
        Some(fixed) => {
            if spec
                .overhead
                .as_ref()
                .is_some_and(|o| !same_quantities(o, fixed))
            {
                return Err(err(
                    "spec.overhead",
                    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
                ));
            }
            spec.overhead = Some(fixed.clone());
        }
        None if spec.overhead.is_some() => {
            return Err(err(
                "spec.overhead",
                "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead",
            ));
        }
        None => {}
    }
    if let Some(s) = &rc.scheduling {
        if let Some(rc_selector) = &s.node_selector {
            let selector = spec.node_selector.get_or_insert_with(BTreeMap::new);
            for (k, v) in rc_selector {
                if let Some(pv) = selector.get(k).filter(|pv| *pv != v) {
                    return Err(err(
                        format!("spec.nodeSelector.{k}"),
                        format!("conflict: runtimeClass.scheduling.nodeSelector[{k}] = {v}; pod.spec.nodeSelector[{k}] = {pv}"),
                    ));
                }
                selector.insert(k.clone(), v.clone());
            }
        }
        let merged = merge_tolerations(
            spec.tolerations.as_deref().unwrap_or_default(),
            s.tolerations.as_deref().unwrap_or_default(),
        );
        spec.tolerations = (!merged.is_empty()).then_some(merged);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes() -> BTreeMap<String, node::RuntimeClass> {
        let rc: node::RuntimeClass = crate::yaml::from_str(
            "metadata: {name: kata}
handler: kata
overhead: {podFixed: {cpu: 250m, memory: 120Mi}}
scheduling:
  nodeSelector: {runtime: kata}
  tolerations: [{key: kata, operator: Exists, effect: NoSchedule}]",
        )
        .unwrap();
        validate_runtime_class(&rc).unwrap();
        BTreeMap::from([("kata".to_string(), rc)])
    }

    fn pod(yaml: &str) -> core::Pod {
        crate::yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn copies_overhead_and_merges_scheduling() {
        let mut p = pod("metadata: {name: p}
spec:
  runtimeClassName: kata
  nodeSelector: {zone: a}
  tolerations: [{key: kata, operator: Exists}, {key: other, operator: Equal, value: x}]
  containers: [{name: c}]");
        admit_runtime_class(&mut p, &classes()).unwrap();
        let s = p.spec.unwrap();
        assert_eq!(s.overhead.unwrap()["cpu"].0, "250m");
        let sel = s.node_selector.unwrap();
        assert_eq!(sel["runtime"], "kata");
        assert_eq!(sel["zone"], "a");
        // The pod's `kata Exists` (any effect) covers the class's NoSchedule one.
        let keys: Vec<_> = s
            .tolerations
            .unwrap()
            .iter()
            .map(|t| t.key.clone().unwrap())
            .collect();
        assert_eq!(keys, ["kata", "other"]);
    }

    #[test]
    fn refuses_as_the_api_server_does() {
        let rcs = classes();
        let cases = [
            ("runtimeClassName: gvisor", "spec.runtimeClassName", "RuntimeClass \"gvisor\" not found"),
            ("runtimeClassName: kata\n  overhead: {cpu: 100m}", "spec.overhead", "doesn't match"),
            ("runtimeClassName: kata\n  nodeSelector: {runtime: runc}", "spec.nodeSelector.runtime", "conflict: runtimeClass.scheduling.nodeSelector[runtime] = kata; pod.spec.nodeSelector[runtime] = runc"),
        ];
        for (spec, field, message) in cases {
            let mut p = pod(&format!(
                "metadata: {{name: p}}\nspec:\n  {spec}\n  containers: [{{name: c}}]"
            ));
            let e = admit_runtime_class(&mut p, &rcs).unwrap_err();
            assert_eq!(e.field, field, "{spec}");
            assert!(e.message.contains(message), "{spec}: {}", e.message);
        }
        // The same overhead written differently is the same overhead.
        let mut p = pod("metadata: {name: p}\nspec:\n  runtimeClassName: kata\n  overhead: {cpu: '0.25', memory: 120Mi}\n  containers: [{name: c}]");
        admit_runtime_class(&mut p, &rcs).unwrap();
    }

    #[test]
    fn validates_the_runtime_class() {
        for (yaml, field) in [
            ("metadata: {name: x}\nhandler: Bad_Handler", "handler"),
            ("metadata: {name: x}\nhandler: h\noverhead: {podFixed: {cpu: lots}}", "overhead.podFixed.cpu"),
            ("metadata: {name: x}\nhandler: h\nscheduling: {tolerations: [{key: k, operator: Exists, value: v}]}", "scheduling.tolerations[0]"),
        ] {
            let rc: node::RuntimeClass = crate::yaml::from_str(yaml).unwrap();
            let e = validate_runtime_class(&rc).unwrap_err();
            assert!(e.field.starts_with(field), "{yaml}: {e:?}");
        }
    }
}
