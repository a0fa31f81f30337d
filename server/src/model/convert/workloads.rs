//! The selectors of Services and controllers (PodTopologySpread's system default constraints spread the pods they select).

use super::*;

/// A Service's selector, for default topology spreading.
pub fn service_selector(svc: &core::Service) -> Result<WorkloadSelector> {
    let (name, namespace) = meta_name_ns(&svc.metadata, "Service")?;
    Ok(WorkloadSelector {
        kind: WorkloadKind::Service,
        namespace,
        name,
        match_labels: svc
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .map(|m| labels_of(&Some(m.clone()))),
        selector: LabelSelector::Nothing,
    })
}

pub fn replication_controller_selector(
    rc: &core::ReplicationController,
) -> Result<WorkloadSelector> {
    let (name, namespace) = meta_name_ns(&rc.metadata, "ReplicationController")?;
    Ok(WorkloadSelector {
        kind: WorkloadKind::ReplicationController,
        namespace,
        name,
        match_labels: rc
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .map(|m| labels_of(&Some(m.clone()))),
        selector: LabelSelector::Nothing,
    })
}

pub fn replica_set_selector(
    rs: &k8s_openapi::api::apps::v1::ReplicaSet,
) -> Result<WorkloadSelector> {
    let (name, namespace) = meta_name_ns(&rs.metadata, "ReplicaSet")?;
    Ok(WorkloadSelector {
        kind: WorkloadKind::ReplicaSet,
        namespace,
        name,
        match_labels: None,
        selector: label_selector(Some(&rs.spec.selector), "spec.selector")?,
    })
}

pub fn stateful_set_selector(
    ss: &k8s_openapi::api::apps::v1::StatefulSet,
) -> Result<WorkloadSelector> {
    let (name, namespace) = meta_name_ns(&ss.metadata, "StatefulSet")?;
    Ok(WorkloadSelector {
        kind: WorkloadKind::StatefulSet,
        namespace,
        name,
        match_labels: None,
        selector: label_selector(Some(&ss.spec.selector), "spec.selector")?,
    })
}
