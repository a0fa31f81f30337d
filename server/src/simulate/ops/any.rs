//! The ops that create or change objects beyond nodes and pods: `createAny` (any
//! kind Switchyard reads), `updateAny` (full-object updates of pods and nodes,
//! paced), and what createPods adds around its pods (a bound PV and PVC per pod,
//! a nomination written before the scheduling gates go).

use super::*;
use crate::cluster::manifest::{Object, Skipped, Source};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use workload::{PodVolumes, Template};

/// `count` objects from the template, each created as the API server would.
pub(super) fn create_any(
    cluster: &EmbeddedCluster,
    count: usize,
    namespace: Option<&str>,
    template: &Template<serde_json::Value>,
    progress: &mut Progress,
) -> Result<(), String> {
    for n in 0..count {
        let mut v = template.instantiate(n, count)?;
        if let Some(ns) = namespace {
            v["metadata"]["namespace"] = serde_json::Value::String(ns.to_string());
        }
        // The API server names an object from its generateName.
        if v["metadata"]["name"].as_str().is_none_or(str::is_empty) {
            if let Some(prefix) = v["metadata"]["generateName"].as_str() {
                let name = format!(
                    "{prefix}{}",
                    crate::cluster::embedded::name_suffix(n as u64 + 1)
                );
                v["metadata"]["name"] = serde_json::Value::String(name);
            }
        }
        let source = Source {
            file: "createAny".into(),
            document: n + 1,
            item: None,
        };
        let mut out = Vec::new();
        let mut skipped = Skipped::default();
        manifest::parse_value(v, source, &mut out, &mut skipped).map_err(|e| e.to_string())?;
        if let Some((_, kind)) = skipped.0.first() {
            return Err(format!("object {n}: {kind} is not a kind Switchyard reads"));
        }
        for o in &out {
            if matches!(o.object, Object::Pod(_)) {
                progress.total += 1;
            }
            cluster
                .create_object(&o.object)
                .map_err(|e| format!("object {n}: {e}"))?;
        }
    }
    Ok(())
}

/// Full-object updates of the pods or nodes the template names, `per_second` of
/// them a second (0: at once), as upstream's updateAny paces them.
pub(super) fn update_any(
    cluster: &EmbeddedCluster,
    count: usize,
    namespace: Option<&str>,
    template: &Template<serde_json::Value>,
    per_second: f64,
    deadline: Instant,
) -> Result<(), String> {
    let started = Instant::now();
    for n in 0..count {
        if per_second > 0.0 {
            let due = started + Duration::from_secs_f64((n + 1) as f64 / per_second);
            let now = Instant::now();
            if due > deadline {
                return Err(format!(
                    "update {n} of {count} at {per_second}/s runs past the time-out"
                ));
            }
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        let v = template.instantiate(n, count)?;
        let kind = v["kind"].as_str().unwrap_or_default().to_string();
        match kind.as_str() {
            "Pod" => {
                let mut p: core::Pod =
                    serde_json::from_value(v).map_err(|e| format!("update {n}: {e}"))?;
                if let Some(ns) = namespace {
                    p.metadata.namespace = Some(ns.to_string());
                }
                cluster
                    .replace_pod(&p)
                    .map_err(|e| format!("update {n}: {e}"))?;
            }
            "Node" => {
                let node: core::Node =
                    serde_json::from_value(v).map_err(|e| format!("update {n}: {e}"))?;
                cluster
                    .replace_node(&node)
                    .map_err(|e| format!("update {n}: {e}"))?;
            }
            other => return Err(format!("update {n}: {other} objects are not updated")),
        }
    }
    Ok(())
}

/// Upstream's `CreatePodWithPersistentVolume`: claim `pvc-<n>` (bound to volume
/// `<namespace>-vol-<n>` when there is a volume template), the volume pre-bound to
/// it, and the pod's volumes replaced by that one claim.
pub(super) fn create_pod_volumes(
    cluster: &EmbeddedCluster,
    v: &PodVolumes,
    namespace: &str,
    n: usize,
    pod: &mut core::Pod,
) -> Result<(), String> {
    let claim_name = format!("pvc-{n}");
    let volume_name = format!("{namespace}-vol-{n}");
    let mut claim = v.claim.clone();
    claim.metadata = ObjectMeta {
        name: Some(claim_name.clone()),
        namespace: Some(namespace.to_string()),
        ..claim.metadata
    };
    if v.volume.is_some() {
        claim.spec.get_or_insert_with(Default::default).volume_name = Some(volume_name.clone());
        claim.status.get_or_insert_with(Default::default).phase = Some("Bound".into());
    }
    cluster
        .create_storage(&Object::PersistentVolumeClaim(Box::new(claim)))
        .map_err(|e| format!("claim {claim_name}: {e}"))?;
    if let Some(t) = &v.volume {
        let mut pv = t.clone();
        pv.metadata.name = Some(volume_name.clone());
        let spec = pv.spec.get_or_insert_with(Default::default);
        spec.claim_ref = Some(core::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            namespace: Some(namespace.to_string()),
            name: Some(claim_name.clone()),
            ..Default::default()
        });
        if let Some(csi) = spec.csi.as_mut() {
            csi.volume_handle = volume_name.clone();
        }
        if let Some(ebs) = spec.aws_elastic_block_store.as_mut() {
            ebs.volume_id = format!("vol-{n}");
        }
        pv.status.get_or_insert_with(Default::default).phase = Some("Bound".into());
        cluster
            .create_storage(&Object::PersistentVolume(Box::new(pv)))
            .map_err(|e| format!("volume {volume_name}: {e}"))?;
    }
    pod.spec.get_or_insert_with(Default::default).volumes = Some(vec![core::Volume {
        name: "vol".into(),
        persistent_volume_claim: Some(core::PersistentVolumeClaimVolumeSource {
            claim_name,
            read_only: None,
        }),
        ..Default::default()
    }]);
    Ok(())
}

/// scheduler_perf's `nominatedNodeName`: every created pod's status names `node`,
/// then their scheduling gates are removed, so each is tried with a nomination
/// another component wrote.
pub(super) fn nominate_and_ungate(cluster: &EmbeddedCluster, keys: &[String], node: &str) {
    for k in keys {
        if let Some((ns, name)) = k.split_once('/') {
            cluster.nominate(ns, name, node);
        }
    }
    for k in keys {
        if let Some((ns, name)) = k.split_once('/') {
            cluster.clear_scheduling_gates(ns, name);
        }
    }
}

/// `createResourceDriver` (upstream scheduler_perf `dra.go`): for each node whose name
/// matches the glob, a ResourceSlice named after it, its own pool, with `devices`
/// devices `instance-<i>` (model A100, family GPU, driverVersion 1.2.3,
/// dra.example.com/numa i, memory 1Gi).
pub(super) fn create_resource_driver(
    cluster: &EmbeddedCluster,
    driver: &str,
    nodes: &str,
    devices: usize,
) -> Result<(), String> {
    for node in cluster.nodes() {
        if !glob_match(nodes, &node.name) {
            continue;
        }
        let devs: Vec<serde_json::Value> = (0..devices)
            .map(|i| {
                serde_json::json!({
                    "name": format!("instance-{i}"),
                    "attributes": {
                        "model": {"string": "A100"},
                        "family": {"string": "GPU"},
                        "driverVersion": {"version": "1.2.3"},
                        "dra.example.com/numa": {"int": i},
                    },
                    "capacity": {"memory": {"value": "1Gi"}},
                })
            })
            .collect();
        let slice = serde_json::json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": &*node.name},
            "spec": {
                "driver": driver,
                "nodeName": &*node.name,
                "pool": {"name": &*node.name, "generation": 0, "resourceSliceCount": 1},
                "devices": devs,
            },
        });
        let slice: k8s_openapi::api::resource::v1::ResourceSlice =
            serde_json::from_value(slice).map_err(|e| e.to_string())?;
        cluster
            .create_dra(&Object::ResourceSlice(Box::new(slice)))
            .map_err(|e| format!("ResourceSlice for node {}: {e}", node.name))?;
    }
    Ok(())
}

/// Go's `filepath.Match` for names without separators: `*`, `?`, `[...]` classes
/// (with ranges and `^` negation) and `\` escapes.
pub(super) fn glob_match(pattern: &str, name: &str) -> bool {
    fn class(p: &[char], c: char) -> Option<(bool, usize)> {
        // p starts after '['; returns (matched, chars consumed including ']').
        let mut i = 0;
        let negate = p.first() == Some(&'^');
        if negate {
            i += 1;
        }
        let mut matched = false;
        let mut first = true;
        while i < p.len() {
            if p[i] == ']' && !first {
                return Some((matched != negate, i + 1));
            }
            first = false;
            let lo = p[i];
            if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
                if lo <= c && c <= p[i + 2] {
                    matched = true;
                }
                i += 3;
            } else {
                if lo == c {
                    matched = true;
                }
                i += 1;
            }
        }
        None
    }
    // One pattern element at `p[i]` against `c`: (matches, pattern chars used).
    fn one(p: &[char], i: usize, c: char) -> (bool, usize) {
        match p[i] {
            '?' => (true, 1),
            '[' => match class(&p[i + 1..], c) {
                Some((m, used)) => (m, 1 + used),
                None => (false, p.len() - i),
            },
            '\\' if i + 1 < p.len() => (p[i + 1] == c, 2),
            x => (x == c, 1),
        }
    }
    // The two-pointer wildcard match: back up only to the last `*`, so the work is
    // bounded by pattern length times name length whatever the pattern.
    fn go(p: &[char], n: &[char]) -> bool {
        let (mut pi, mut ni) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while ni < n.len() {
            if pi < p.len() && p[pi] == '*' {
                star = Some((pi, ni));
                pi += 1;
                continue;
            }
            if pi < p.len() {
                let (m, used) = one(p, pi, n[ni]);
                if m {
                    pi += used;
                    ni += 1;
                    continue;
                }
            }
            match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            }
        }
        p[pi..].iter().all(|c| *c == '*')
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    go(&p, &n)
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs_match_as_go_filepath_match() {
        assert!(glob_match("scheduler-perf-dra-*", "scheduler-perf-dra-12"));
        assert!(!glob_match("scheduler-perf-dra-*", "scheduler-perf-12"));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("n?", "n1"));
        assert!(glob_match("n[0-3]", "n2") && !glob_match("n[0-3]", "n7"));
        assert!(glob_match("n[^0-3]", "n7"));
        assert!(glob_match("a\\*", "a*") && !glob_match("a\\*", "ab"));
    }
}
