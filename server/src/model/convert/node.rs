//! Nodes and namespaces.

use super::*;

/// Converts a Node. Allocatable falls back to capacity when absent, as the kubelet
/// reports it.
pub fn node_from_k8s(node: &core::Node, generated_uid: impl FnOnce() -> String) -> Result<Node> {
    let name = node
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| err("metadata.name", "required: every Node needs a name"))?;
    let status = node.status.as_ref();
    let allocatable = match status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref())) {
        Some(list) => resource_list(
            list,
            if status.and_then(|s| s.allocatable.as_ref()).is_some() {
                "status.allocatable"
            } else {
                "status.capacity"
            },
        )?,
        None => Resource::default(),
    };
    let mut taints = Vec::new();
    let spec = node.spec.as_ref();
    for (i, t) in spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let effect = TaintEffect::parse(&t.effect).ok_or_else(|| {
            err(
                format!("spec.taints[{i}].effect"),
                format!(
                    "unsupported value {:?}: must be NoSchedule, PreferNoSchedule or NoExecute",
                    t.effect
                ),
            )
        })?;
        if t.key.is_empty() {
            return Err(err(
                format!("spec.taints[{i}].key"),
                "required: taint key can not be empty",
            ));
        }
        taints.push(Taint {
            key: t.key.clone().into(),
            value: t.value.clone().unwrap_or_default().into(),
            effect,
        });
    }
    let mut images: Vec<NodeImage> = Vec::new();
    for img in status.and_then(|s| s.images.as_ref()).into_iter().flatten() {
        let size = img.size_bytes.unwrap_or(0);
        for n in img.names.iter().flatten() {
            images.push(NodeImage {
                name: n.as_str().into(),
                size,
            });
        }
    }
    images.sort_by(|a, b| a.name.cmp(&b.name));
    images.dedup_by(|a, b| a.name == b.name);
    Ok(Node {
        name: name.into(),
        uid: node
            .metadata
            .uid
            .clone()
            .unwrap_or_else(generated_uid)
            .into(),
        labels: labels_of(&node.metadata.labels),
        allocatable,
        taints: taints.into(),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        images: images.into(),
        declared_features: crate::model::features::FeatureSet::of_names(
            status
                .and_then(|s| s.declared_features.as_ref())
                .into_iter()
                .flatten()
                .map(String::as_str),
        ),
    })
}

pub fn namespace_from_k8s(ns: &core::Namespace) -> Result<Namespace> {
    let name = ns
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| err("metadata.name", "required: every Namespace needs a name"))?;
    Ok(Namespace {
        name: name.into(),
        labels: labels_of(&ns.metadata.labels),
    })
}
