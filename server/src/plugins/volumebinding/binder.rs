//! The volume binder (upstream `binder.go`): sorting a pod's claims, matching
//! delayed claims to static PVs or checking provisioning on a node, and checking
//! that assumed bindings completed.

use super::*;

/// Upstream `GetLocalPersistentVolumeNodeNames`: the hostnames a local PV pins.
pub(super) fn local_pv_node_names(pv: &PersistentVolume) -> Vec<Box<str>> {
    let Some(affinity) = &pv.node_affinity else {
        return Vec::new();
    };
    let mut out: Vec<Box<str>> = Vec::new();
    for term in affinity.terms.iter() {
        let mut nodes: Option<Vec<Box<str>>> = None;
        for r in term.match_expressions.iter() {
            if &*r.key == LABEL_HOSTNAME && r.op == Operator::In {
                let values: Vec<Box<str>> = r.values.to_vec();
                nodes = Some(match nodes {
                    None => values,
                    Some(prev) => prev.into_iter().filter(|v| values.contains(v)).collect(),
                });
            }
        }
        for n in nodes.into_iter().flatten() {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

impl VolumeBinding {
    /// Upstream `podHasPVCs` then `GetPodVolumeClaims`.
    pub(super) fn pod_volume_claims(&self, pod: &Pod) -> Result<Option<PodVolumeClaims>, Status> {
        let st = self.volumes.read();
        let mut has_pvc = false;
        let mut pvcs = Vec::new();
        for v in pod.spec.volumes.iter() {
            let PodVolume::Claim {
                claim, ephemeral, ..
            } = v
            else {
                continue;
            };
            has_pvc = true;
            let Some(pvc) = st.pvc(&pod.namespace, claim) else {
                let msg = if *ephemeral {
                    format!("waiting for ephemeral volume controller to create the persistentvolumeclaim \"{claim}\"")
                } else {
                    pvc_not_found(claim)
                };
                return Err(Status::unresolvable(msg));
            };
            if pvc.phase == PvcPhase::Lost {
                return Err(Status::unresolvable(format!(
                    "persistentvolumeclaim \"{}\" bound to non-existent persistentvolume \"{}\"",
                    pvc.name,
                    pvc.volume_name.as_deref().unwrap_or("")
                )));
            }
            if pvc.deleting {
                return Err(Status::unresolvable(format!(
                    "persistentvolumeclaim \"{}\" is being deleted",
                    pvc.name
                )));
            }
            if *ephemeral {
                ephemeral_claim_is_for_pod(pod, pvc).map_err(Status::unresolvable)?;
            }
            pvcs.push(pvc.clone());
        }
        if !has_pvc {
            return Ok(None);
        }
        let mut claims = PodVolumeClaims {
            bound: Vec::new(),
            delayed: Vec::new(),
            pvs_by_class: FxHashMap::default(),
        };
        let mut unbound_immediate = false;
        for pvc in pvcs {
            if pvc.is_fully_bound() {
                let pv = pvc.volume_name.as_ref().and_then(|n| st.pv(n)).cloned();
                claims.bound.push((pvc, pv));
                continue;
            }
            // Upstream `IsDelayBindingMode`: no class, or an unknown one, is immediate.
            let delayed = !pvc.storage_class.is_empty()
                && st
                    .storage_class(&pvc.storage_class)
                    .is_some_and(|c| c.wait_for_first_consumer());
            if delayed && pvc.volume_name.is_none() {
                if !claims.pvs_by_class.contains_key(&pvc.storage_class) {
                    claims.pvs_by_class.insert(
                        pvc.storage_class.clone(),
                        st.pvs_of_class(&pvc.storage_class),
                    );
                }
                claims.delayed.push(pvc);
            } else {
                // Pre-bound claims are treated as unbound immediate ones.
                unbound_immediate = true;
            }
        }
        if unbound_immediate {
            return Err(Status::unresolvable(ERR_REASON_UNBOUND_IMMEDIATE));
        }
        // Upstream sorts by request inside `findMatchingVolumes` (stable sort).
        claims.delayed.sort_by_key(|c| c.request);
        Ok(Some(claims))
    }

    /// Upstream `FindPodVolumes`: the reasons the node cannot take the pod's claims,
    /// or what binding them there takes.
    pub(super) fn find_pod_volumes(
        &self,
        claims: &PodVolumeClaims,
        node: &NodeInfo,
    ) -> Result<(PodVolumes, Vec<&'static str>), Status> {
        let n = node.node();
        let labels = &n.labels;
        let mut volumes = PodVolumes {
            node: node
                .node_arc()
                .cloned()
                .unwrap_or_else(|| Arc::new(n.clone())),
            static_bindings: Vec::new(),
            provisions: Vec::new(),
        };
        let mut bound_ok = true;
        let mut unbound_ok = true;
        let mut storage_ok = true;
        let mut pvs_found = true;
        for (_, pv) in &claims.bound {
            match pv {
                None => {
                    pvs_found = false;
                    break;
                }
                Some(pv) if !pv.fits_node("", labels) => {
                    bound_ok = false;
                    break;
                }
                Some(_) => {}
            }
        }
        // Upstream goes on to the delayed claims whatever the bound ones found, so a
        // node can carry several reasons.
        if !claims.delayed.is_empty() {
            let mut to_match = Vec::new();
            let mut to_provision = Vec::new();
            for c in &claims.delayed {
                match c.selected_node() {
                    Some(sel) if sel != n.name.as_ref() => {
                        unbound_ok = false;
                        break;
                    }
                    Some(_) => to_provision.push(c.clone()),
                    None => to_match.push(c.clone()),
                }
            }
            if unbound_ok {
                let mut chosen: Vec<Arc<str>> = Vec::new();
                for c in to_match {
                    let pvs = claims
                        .pvs_by_class
                        .get(&c.storage_class)
                        .map_or(&[][..], |v| &v[..]);
                    match find_matching_volume(&c, pvs, Some(labels), &chosen, true) {
                        Some(pv) => {
                            chosen.push(pv.name.clone());
                            volumes.static_bindings.push((pv, c));
                        }
                        None => {
                            unbound_ok = false;
                            to_provision.push(c);
                        }
                    }
                }
                if !to_provision.is_empty() {
                    let (provision_ok, enough) = self.check_volume_provisions(&to_provision, n)?;
                    unbound_ok = provision_ok;
                    storage_ok = enough;
                    if provision_ok && enough {
                        volumes.provisions = to_provision;
                    }
                }
            }
        }
        let mut reasons = Vec::new();
        if !bound_ok {
            reasons.push(ERR_REASON_NODE_CONFLICT);
        }
        if !unbound_ok {
            reasons.push(ERR_REASON_BIND_CONFLICT);
        }
        if !storage_ok {
            reasons.push(ERR_REASON_NOT_ENOUGH_SPACE);
        }
        if !pvs_found {
            reasons.push(ERR_REASON_PV_NOT_EXIST);
        }
        Ok((volumes, reasons))
    }

    /// Upstream `checkVolumeProvisions`: (provisioning possible, enough capacity).
    pub(super) fn check_volume_provisions(
        &self,
        claims: &[Arc<PersistentVolumeClaim>],
        node: &Node,
    ) -> Result<(bool, bool), Status> {
        let st = self.volumes.read();
        for c in claims {
            if c.storage_class.is_empty() {
                return Err(Status::error(format!("no class for claim \"{}\"", c.key())));
            }
            let Some(class) = st.storage_class(&c.storage_class) else {
                return Err(Status::error(format!(
                    "failed to find storage class \"{}\"",
                    c.storage_class
                )));
            };
            if class.provisioner.is_empty() || *class.provisioner == *NO_PROVISIONER {
                return Ok((false, true));
            }
            // Topology terms match labels only.
            if !class.allows_node("", &node.labels) {
                return Ok((false, true));
            }
            if !has_enough_capacity(&st, c, &class.name, &class.provisioner, &node.labels) {
                return Ok((true, false));
            }
        }
        Ok((true, true))
    }

    /// Upstream `checkBindings`: true when every claim is bound as planned.
    pub(super) fn check_bindings(&self, pod: &Pod, volumes: &PodVolumes) -> Result<bool, String> {
        if let Some(services) = self.handle.services() {
            if services.pod(&pod.uid).is_none() {
                return Err(format!(
                    "pod does not exist any more: pods \"{}\" not found",
                    pod.name
                ));
            }
        }
        let labels = &volumes.node.labels;
        let node = &volumes.node.name;
        for (planned, claim) in &volumes.static_bindings {
            let pv = self.volumes.api_pv(&planned.name).ok_or_else(|| {
                format!(
                    "failed to check binding: persistentvolume \"{}\" not found",
                    planned.name
                )
            })?;
            let pvc = self
                .volumes
                .api_pvc(&claim.namespace, &claim.name)
                .ok_or_else(|| {
                    format!("failed to check binding: {}", pvc_not_found(&claim.name))
                })?;
            if pv.claim_ref.as_ref().is_none_or(|r| r.uid.is_empty()) {
                // Not written back yet, or the PV controller reset it.
                if pv.resource_version == planned.resource_version {
                    return Ok(false);
                }
                return Err(format!("ClaimRef got reset for pv \"{}\"", pv.name));
            }
            if !pv.fits_node("", labels) {
                return Err(format!(
                    "pv \"{}\" node affinity doesn't match node \"{node}\": no matching NodeSelectorTerms",
                    pv.name
                ));
            }
            if !pvc.is_fully_bound() {
                return Ok(false);
            }
        }
        for claim in &volumes.provisions {
            let pvc = self
                .volumes
                .api_pvc(&claim.namespace, &claim.name)
                .ok_or_else(|| {
                    format!(
                        "failed to check provisioning pvc: {}",
                        pvc_not_found(&claim.name)
                    )
                })?;
            match pvc.selected_node() {
                Some(n) if n == &**node => {}
                // Not written yet: the API object predates our update.
                None if pvc.resource_version == claim.resource_version => return Ok(false),
                None => {
                    return Err(format!(
                        "selectedNode annotation reset for PVC \"{}\"",
                        pvc.name
                    ))
                }
                Some(_) => return Err(format!("provisioning failed for PVC \"{}\"", pvc.name)),
            }
            if let Some(pv_name) = &pvc.volume_name {
                let Some(pv) = self.volumes.api_pv(pv_name) else {
                    return Ok(false);
                };
                if !pv.fits_node("", labels) {
                    return Err(format!(
                        "pv \"{}\" node affinity doesn't match node \"{node}\": no matching NodeSelectorTerms",
                        pv.name
                    ));
                }
            }
            if !pvc.is_fully_bound() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Upstream `BindPodVolumes`: the API writes, then the wait.
    pub(super) async fn bind_pod_volumes(
        &self,
        pod: &Pod,
        volumes: &PodVolumes,
    ) -> Result<(), String> {
        for (pv, _) in &volumes.static_bindings {
            self.handle
                .client
                .bind_volume(pv)
                .await
                .map_err(|e| format!("binding volumes: {e}"))?;
        }
        for pvc in &volumes.provisions {
            self.handle
                .client
                .select_node_for_claim(pvc, &volumes.node.name)
                .await
                .map_err(|e| format!("binding volumes: {e}"))?;
        }
        let deadline = tokio::time::Instant::now() + self.bind_timeout;
        loop {
            let changed = self.volumes.changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self
                .check_bindings(pod, volumes)
                .map_err(|e| format!("binding volumes: {e}"))?
            {
                return Ok(());
            }
            // Upstream polls every second; a change wakes us sooner, the poll still
            // covers the pod's own deletion.
            let poll = (tokio::time::Instant::now() + Duration::from_secs(1)).min(deadline);
            tokio::select! {
                _ = &mut changed => {}
                _ = tokio::time::sleep_until(poll) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return Err("binding volumes: context deadline exceeded".into());
            }
        }
    }
}

/// Upstream `hasEnoughCapacity`: only CSI drivers that opt in are checked, against a
/// CSIStorageCapacity of the class reachable from the node that is big enough.
pub(super) fn has_enough_capacity(
    st: &VolumeState,
    claim: &PersistentVolumeClaim,
    class: &str,
    provisioner: &str,
    node_labels: &Labels,
) -> bool {
    if claim.request == 0 {
        return true;
    }
    if !st
        .csi_driver(provisioner)
        .is_some_and(|d| d.storage_capacity)
    {
        return true;
    }
    st.capacities().any(|c| {
        *c.storage_class == *class
            && c.maximum_volume_size
                .or(c.capacity)
                .is_some_and(|l| l >= claim.request)
            && c.node_topology
                .as_ref()
                .is_some_and(|s| s.matches(node_labels))
    })
}

/// Upstream `GetBindVolumeToClaim`: the PV with its claimRef set to the claim.
pub(super) fn bind_volume_to_claim(
    pv: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> PersistentVolume {
    let mut out = pv.clone();
    if pv.claim_ref.is_none() {
        let mut pairs: Vec<(String, String)> = out
            .annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        pairs.push((ANN_BOUND_BY_CONTROLLER.into(), "yes".into()));
        out.annotations = Labels::new(pairs);
    }
    out.claim_ref = Some(ClaimRef {
        namespace: claim.namespace.clone(),
        name: claim.name.clone(),
        uid: claim.uid.clone(),
    });
    out
}

pub(super) fn with_annotation(
    pvc: &PersistentVolumeClaim,
    key: &str,
    value: &str,
) -> PersistentVolumeClaim {
    let mut out = pvc.clone();
    let mut pairs: Vec<(String, String)> = pvc
        .annotations
        .iter()
        .filter(|(k, _)| *k != key)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    pairs.push((key.into(), value.into()));
    out.annotations = Labels::new(pairs);
    out
}
