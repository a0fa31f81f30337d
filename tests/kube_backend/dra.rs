//! Dynamic Resource Allocation through the API-server double: claims from templates,
//! extended resources, consumable capacity and device binding conditions.

use super::*;

/// A DRA cluster in the double: the default namespace, `node`, a DeviceClass named
/// after `driver` selecting its devices (with `class_spec` merged into its spec), and
/// one complete pool of `devices` on the node.
fn dra_cluster(api: &ApiServer, node_name: &str, driver: &str, class_spec: Value, devices: Value) {
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}));
    api.apply(node(node_name, "8"));
    let mut spec =
        json!({"selectors": [{"cel": {"expression": format!("device.driver == \"{driver}\"")}}]});
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), class_spec.as_object()) {
        s.extend(extra.clone());
    }
    api.apply(
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": driver}, "spec": spec}),
    );
    api.apply(
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": format!("{node_name}-devices")},
        "spec": {"driver": driver, "nodeName": node_name,
                 "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices}}),
    );
}

/// The template `one-gpu` in `default`: one device of the class `gpu.example.com`.
fn one_gpu_template(api: &ApiServer) {
    api.apply(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}}));
}

/// A pod whose container uses a claim made from `one-gpu`.
fn gpu_pod(name: &str) -> Value {
    let mut p = pod(name, "switchyard", "100m", None);
    p["spec"]["resourceClaims"] = json!([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]);
    p["spec"]["containers"][0]["resources"]["claims"] = json!([{"name": "gpu"}]);
    p
}

/// The claim whose controlling owner is `pod`.
fn owned_claim(api: &ApiServer, pod: &str) -> Option<Value> {
    api.list(switchyard_e2e::apiserver::RESOURCE_CLAIMS)
        .into_iter()
        .find(|c| c["metadata"]["ownerReferences"][0]["name"] == pod)
}

/// Waits until `pod`'s PodScheduled condition says it is unschedulable with a message
/// starting `prefix`.
fn wait_unschedulable(api: &ApiServer, pod: &str, prefix: &str) {
    wait_for(
        &format!("{pod} unschedulable"),
        Duration::from_secs(20),
        || {
            api.get(PODS, "default", pod).is_some_and(|p| {
                p["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c["type"] == "PodScheduled"
                            && c["message"].as_str().is_some_and(|m| m.starts_with(prefix))
                    })
                })
            })
        },
    );
}

/// DRA through the API server (upstream dynamicresources.go PreBind, and the
/// resourceclaim controller the double plays): pods' claims come from their templates,
/// two pods get the node's two GPUs, each claim ends allocated, reserved for its pod
/// and finalized; the third pod stays pending with upstream's message; deleting a bound
/// pod deletes its claim, which frees its GPU for the third. Each new allocation costs
/// two claim writes (finalizer, status), as upstream's.
#[test]
fn dra_claims_are_allocated_reserved_and_freed_through_the_api_server() {
    let api = ApiServer::start();
    dra_cluster(
        &api,
        "gpu-node",
        "gpu.example.com",
        json!({}),
        json!([{"name": "gpu-0"}, {"name": "gpu-1"}]),
    );
    one_gpu_template(&api);
    api.apply(gpu_pod("g-0"));
    api.apply(gpu_pod("g-1"));
    let _s = start(&api);
    wait_for("two GPU pods bound", Duration::from_secs(20), || {
        api.node_of("g-0").is_some() && api.node_of("g-1").is_some()
    });
    let claim_of = |pod: &str| owned_claim(&api, pod);
    let mut devices = Vec::new();
    for p in ["g-0", "g-1"] {
        // Named as the resourceclaim controller names them.
        let c = claim_of(p).unwrap_or_else(|| panic!("no claim for {p}"));
        let uid = api.get(PODS, "default", p).unwrap()["metadata"]["uid"].clone();
        assert_eq!(
            c["status"]["reservedFor"],
            json!([{"resource": "pods", "name": p, "uid": uid}]),
            "{c}"
        );
        assert_eq!(
            c["metadata"]["finalizers"],
            json!(["resource.kubernetes.io/delete-protection"]),
            "{c}"
        );
        assert_eq!(
            c["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
                ["values"],
            json!(["gpu-node"]),
            "{c}"
        );
        devices.push(c["status"]["allocation"]["devices"]["results"][0]["device"].clone());
    }
    devices.sort_by_key(|d| d.to_string());
    assert_eq!(devices, vec![json!("gpu-0"), json!("gpu-1")]);
    let claim_writes = api
        .calls()
        .iter()
        .filter(|c| c.method != "GET" && c.path.contains("/resourceclaims/"))
        .count();
    assert_eq!(
        claim_writes,
        4,
        "two writes per new allocation: {:#?}",
        api.calls()
    );

    // All GPUs taken: the third pod waits with upstream's message.
    api.apply(gpu_pod("g-2"));
    wait_unschedulable(
        &api,
        "g-2",
        "0/1 nodes are available: 1 cannot allocate all claims.",
    );
    assert_eq!(api.node_of("g-2"), None);

    // Deleting a bound pod deletes its claim; its GPU goes to the waiting pod.
    assert!(api.delete(PODS, "default", "g-0"));
    wait_for("g-2 bound after g-0 went", Duration::from_secs(30), || {
        api.node_of("g-2").is_some()
    });
    let c = claim_of("g-2").expect("g-2's claim");
    assert!(claim_of("g-0").is_none(), "g-0's claim deleted with it");
    let other = claim_of("g-1").expect("g-1's claim");
    assert_ne!(
        c["status"]["allocation"]["devices"]["results"][0]["device"],
        other["status"]["allocation"]["devices"]["results"][0]["device"],
        "{c}"
    );
    api.assert_a_careful_client();
}

/// Extended resources backed by DRA through the API server (upstream
/// extendeddynamicresources.go): a pod asking `example.com/gpu: 1` on a node with no
/// such allocatable gets a claim the scheduler creates — owned by the pod, annotated,
/// finalized, allocated and reserved for it — and its `status.extendedResourceClaimStatus`
/// names the claim and the container's request. Two claim writes (create with the
/// finalizer, status; upstream adds the finalizer in a third) and the pod's status.
/// Deleting the pod deletes the claim
/// and frees the GPU for the next pod.
#[test]
fn dra_extended_resources_get_a_claim_the_scheduler_creates() {
    let api = ApiServer::start();
    dra_cluster(
        &api,
        "gpu-node",
        "gpu.example.com",
        json!({"extendedResourceName": "example.com/gpu"}),
        json!([{"name": "gpu-0"}]),
    );
    let gpu_pod = |name: &str| {
        let mut p = pod(name, "switchyard", "100m", None);
        p["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu"] = json!("1");
        p["spec"]["containers"][0]["resources"]["limits"] = json!({"example.com/gpu": "1"});
        p
    };
    api.apply(gpu_pod("e-0"));
    let _s = start(&api);
    wait_for("e-0 bound", Duration::from_secs(20), || {
        api.node_of("e-0").is_some()
    });
    let claim_of = |pod: &str| owned_claim(&api, pod);
    let c = claim_of("e-0").expect("a claim for e-0");
    let p = api.get(PODS, "default", "e-0").unwrap();
    let name = c["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("e-0-extended-resources-"), "{c}");
    assert_eq!(
        c["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"],
        "true"
    );
    assert_eq!(
        c["metadata"]["ownerReferences"][0]["uid"],
        p["metadata"]["uid"]
    );
    assert_eq!(c["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        c["metadata"]["finalizers"],
        json!(["resource.kubernetes.io/delete-protection"])
    );
    assert_eq!(
        c["spec"]["devices"]["requests"],
        json!([{"name": "container-0-request-1", "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "ExactCount", "count": 1}}]),
        "{c}"
    );
    assert_eq!(
        c["status"]["allocation"]["devices"]["results"][0]["device"],
        "gpu-0"
    );
    assert_eq!(
        c["status"]["reservedFor"],
        json!([{"resource": "pods", "name": "e-0", "uid": p["metadata"]["uid"]}])
    );
    assert_eq!(
        p["status"]["extendedResourceClaimStatus"],
        json!({"resourceClaimName": name, "requestMappings": [
            {"containerName": p["spec"]["containers"][0]["name"], "resourceName": "example.com/gpu", "requestName": "container-0-request-1"}]})
    );
    let writes: Vec<String> = api
        .calls()
        .iter()
        .filter(|c| {
            c.method != "GET"
                && (c.path.contains("/resourceclaims") || c.path.contains("/pods/e-0/status"))
        })
        .map(|c| format!("{} {}", c.method, c.path))
        .collect();
    let events: Vec<String> = api
        .list(EVENTS)
        .iter()
        .map(|e| format!("{} {}", e["reason"], e["note"]))
        .collect();
    // The nomination before PreBind (KEP-5278, as upstream), the claim's create and
    // status, the pod's extendedResourceClaimStatus.
    assert_eq!(writes.len(), 4, "{writes:#?} {events:#?}");
    assert_eq!(
        writes
            .iter()
            .filter(|w| w.contains("/resourceclaims"))
            .count(),
        2,
        "{writes:#?}"
    );

    // The only GPU is taken: the next pod waits, and gets it once e-0 is gone.
    api.apply(gpu_pod("e-1"));
    wait_unschedulable(
        &api,
        "e-1",
        "0/1 nodes are available: 1 cannot allocate all claims.",
    );
    assert!(api.delete(PODS, "default", "e-0"));
    wait_for("e-1 bound after e-0 went", Duration::from_secs(30), || {
        api.node_of("e-1").is_some()
    });
    assert!(claim_of("e-0").is_none(), "e-0's claim deleted with it");
    let c = claim_of("e-1").expect("e-1's claim");
    assert_eq!(
        c["status"]["allocation"]["devices"]["results"][0]["device"],
        "gpu-0"
    );
    api.assert_a_careful_client();
}

/// Consumable capacity through the API server (upstream structured allocator's shares):
/// two pods share one NIC that allows multiple allocations; each claim's result carries
/// a shareID (a lowercase UUID) and its consumedCapacity, rounded up to the policy's
/// step; a third pod whose share would exceed the capacity stays pending.
#[test]
fn dra_shares_of_a_device_are_written_with_share_ids_and_consumed_capacity() {
    let api = ApiServer::start();
    dra_cluster(
        &api,
        "nic-node",
        "nic.example.com",
        json!({}),
        json!([{"name": "nic-0", "allowMultipleAllocations": true,
            "capacity": {"bandwidth": {"value": "10Gi",
                "requestPolicy": {"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}}}}]),
    );
    api.apply(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "bw", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "nic", "exactly": {
            "deviceClassName": "nic.example.com", "capacity": {"requests": {"bandwidth": "3500Mi"}}}}]}}}}));
    let nic_pod = |name: &str| {
        let mut p = pod(name, "switchyard", "100m", None);
        p["spec"]["resourceClaims"] = json!([{"name": "nic", "resourceClaimTemplateName": "bw"}]);
        p["spec"]["containers"][0]["resources"]["claims"] = json!([{"name": "nic"}]);
        p
    };
    api.apply(nic_pod("s-0"));
    api.apply(nic_pod("s-1"));
    let _s = start(&api);
    wait_for("both sharing pods bound", Duration::from_secs(20), || {
        api.node_of("s-0").is_some() && api.node_of("s-1").is_some()
    });
    let mut ids = Vec::new();
    for p in ["s-0", "s-1"] {
        let c = owned_claim(&api, p).unwrap_or_else(|| panic!("no claim for {p}"));
        let r = &c["status"]["allocation"]["devices"]["results"][0];
        assert_eq!(r["device"], "nic-0", "{c}");
        let id = r["shareID"].as_str().unwrap_or_default().to_string();
        assert_eq!(id.len(), 36, "{c}");
        assert_eq!(id, id.to_lowercase());
        // 3500Mi rounded up to the policy's 1Gi steps: 4Gi.
        assert!(
            matches!(r["consumedCapacity"]["bandwidth"].as_str(), Some("4Gi")),
            "{c}"
        );
        ids.push(id);
    }
    assert_ne!(ids[0], ids[1]);
    // 8Gi of 10Gi shared: a third 4Gi share does not fit.
    api.apply(nic_pod("s-2"));
    wait_unschedulable(
        &api,
        "s-2",
        "0/1 nodes are available: 1 cannot allocate all claims.",
    );
    api.assert_a_careful_client();
}

/// Sets `conditions` (type, status) on every allocated device of `claim` in its
/// `status.devices`, as a driver reports an attachment.
fn report_device_conditions(api: &ApiServer, mut claim: Value, conditions: &[(&str, &str)]) {
    let conds: Vec<Value> = conditions
        .iter()
        .map(|(t, s)| {
            json!({"type": t, "status": s, "reason": "Test", "message": "attach",
                             "lastTransitionTime": "2026-11-28T00:00:00Z"})
        })
        .collect();
    let devices: Vec<Value> = claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            json!({"driver": r["driver"], "pool": r["pool"], "device": r["device"],
                        "conditions": conds})
        })
        .collect();
    claim["status"]["devices"] = json!(devices);
    api.apply(claim);
}

/// Device binding conditions (KEP-5007, on in v1.36; upstream PreBind
/// `isPodReadyForBinding`, Filter's unavailable claims, PostFilter's deallocation):
/// the allocation carries the device's conditions, an `allocationTimestamp` and, for a
/// `bindsToNode` device of an all-nodes pool, a selector naming the node; the pod
/// binds only once the driver reports the conditions `True`. A failure condition, or
/// no report within `bindingTimeout`, fails PreBind: the claim is deallocated and
/// allocated again, and the pod binds once the new allocation is reported attached.
#[test]
fn dra_pods_wait_for_device_binding_conditions() {
    let api = ApiServer::start();
    dra_cluster(&api, "gpu-node", "gpu.example.com", json!({}), json!([]));
    let device = |name: &str| {
        json!({"name": name, "bindsToNode": true, "bindingConditions": ["Attached"],
               "bindingFailureConditions": ["AttachFailed"]})
    };
    api.apply(
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "gpu-node-devices"},
        "spec": {"driver": "gpu.example.com", "allNodes": true,
                 "pool": {"name": "fabric", "generation": 1, "resourceSliceCount": 1},
                 "devices": [device("gpu-0"), device("gpu-1"), device("gpu-2")]}}),
    );
    one_gpu_template(&api);
    let _s = start_with(
        &api,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: switchyard\n  pluginConfig:\n  - name: DynamicResources\n    args: {bindingTimeout: 2s}\n",
        &in_tree_registry(),
    );
    let allocated =
        |pod: &str| owned_claim(&api, pod).filter(|c| c["status"]["allocation"].is_object());

    // Attached: the pod binds.
    api.apply(gpu_pod("g-0"));
    wait_for("g-0's claim allocated", Duration::from_secs(20), || {
        allocated("g-0").is_some()
    });
    let c = allocated("g-0").unwrap();
    let a = &c["status"]["allocation"];
    assert_eq!(
        a["devices"]["results"][0]["bindingConditions"],
        json!(["Attached"]),
        "{c}"
    );
    assert_eq!(
        a["devices"]["results"][0]["bindingFailureConditions"],
        json!(["AttachFailed"]),
        "{c}"
    );
    assert!(a["allocationTimestamp"].is_string(), "{c}");
    assert_eq!(
        a["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"],
        json!(["gpu-node"]),
        "bindsToNode pins the allocation to the node: {c}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        api.node_of("g-0"),
        None,
        "bound before its device was attached"
    );
    report_device_conditions(&api, c, &[("Attached", "True")]);
    wait_for("g-0 bound once attached", Duration::from_secs(20), || {
        api.node_of("g-0").is_some()
    });

    // A failure condition: deallocated, allocated again (no device status any more).
    api.apply(gpu_pod("g-1"));
    wait_for("g-1's claim allocated", Duration::from_secs(20), || {
        allocated("g-1").is_some()
    });
    report_device_conditions(&api, allocated("g-1").unwrap(), &[("AttachFailed", "True")]);
    wait_for(
        "g-1's claim deallocated and allocated again",
        Duration::from_secs(30),
        || allocated("g-1").is_some_and(|c| c["status"]["devices"].is_null()),
    );
    assert_eq!(api.node_of("g-1"), None);
    report_device_conditions(&api, allocated("g-1").unwrap(), &[("Attached", "True")]);
    wait_for("g-1 bound once attached", Duration::from_secs(20), || {
        api.node_of("g-1").is_some()
    });

    // No report within bindingTimeout (2s): allocated again, later.
    api.apply(gpu_pod("g-2"));
    wait_for("g-2's claim allocated", Duration::from_secs(20), || {
        allocated("g-2").is_some()
    });
    let first = allocated("g-2").unwrap()["status"]["allocation"]["allocationTimestamp"].clone();
    wait_for(
        "g-2's claim allocated again after the timeout",
        Duration::from_secs(30),
        || {
            allocated("g-2")
                .is_some_and(|c| c["status"]["allocation"]["allocationTimestamp"] != first)
        },
    );
    assert_eq!(api.node_of("g-2"), None);
    report_device_conditions(&api, allocated("g-2").unwrap(), &[("Attached", "True")]);
    wait_for("g-2 bound once attached", Duration::from_secs(20), || {
        api.node_of("g-2").is_some()
    });
    let failures: Vec<String> = api
        .list(EVENTS)
        .iter()
        .filter_map(|e| e["note"].as_str().map(str::to_string))
        .filter(|m| m.contains("device binding"))
        .collect();
    assert!(
        failures
            .iter()
            .any(|m| m.contains("device binding failed: claim=") && m.contains("reason=Test"))
            && failures
                .iter()
                .any(|m| m.contains("device binding timeout")),
        "PreBind's failures reported: {failures:#?}"
    );
    // Each wait is announced on the pod first, as upstream's PreBind does.
    let pending: Vec<serde_json::Value> = api
        .list(EVENTS)
        .into_iter()
        .filter(|e| e["reason"] == "BindingConditionsPending")
        .collect();
    for pod in ["g-0", "g-1", "g-2"] {
        assert!(
            pending.iter().any(|e| e["regarding"]["name"] == pod
                && e["type"] == "Normal"
                && e["note"].as_str().is_some_and(
                    |m| m.starts_with("waiting for binding conditions for device on node ")
                )),
            "{pod}: {pending:#?}"
        );
    }
    api.assert_a_careful_client();
}
