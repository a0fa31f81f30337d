//! Server-side field validation (KEP-2885, GA in v1.27): a write with fields the
//! API does not have is stored without them and answered with one `Warning: 299`
//! header per field under `fieldValidation=Warn` (the default), refused with 400
//! under `Strict`, and passed silently under `Ignore`
//! (`apiserver/pkg/endpoints/handlers/create.go`, `patch.go`; the warning text from
//! `k8s.io/apimachinery/pkg/runtime/serializer/json`). What the API has is taken
//! from the typed API in `k8s-openapi`: a round trip through its structs drops
//! exactly the fields the schema lacks.

use serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;

use super::Kind;

/// `fieldValidation` as the request asked for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn from_query(v: Option<&str>) -> Result<FieldValidation, String> {
        match v {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(format!(
                "fieldValidation parameter unsupported: {other:?}; valid values are \"Ignore\", \"Warn\", \"Strict\""
            )),
        }
    }
}

fn round_trip<T: DeserializeOwned + Serialize>(v: &Value) -> Option<Value> {
    serde_json::from_value::<T>(v.clone())
        .ok()
        .and_then(|t| serde_json::to_value(t).ok())
}

/// `object` through the typed API of `kind` (or of a subresource's type).
fn typed(kind: Kind, sub: Option<&str>, object: &Value) -> Option<Value> {
    use k8s_openapi::api::{
        apps::v1 as apps, coordination::v1 as coordination, core::v1 as core, events::v1 as events,
        policy::v1 as policy, scheduling::v1 as scheduling, storage::v1 as storage,
    };
    if sub == Some("binding") {
        return round_trip::<core::Binding>(object);
    }
    match kind.kind {
        "Pod" => round_trip::<core::Pod>(object),
        "Node" => round_trip::<core::Node>(object),
        "Namespace" => round_trip::<core::Namespace>(object),
        "Service" => round_trip::<core::Service>(object),
        "ReplicationController" => round_trip::<core::ReplicationController>(object),
        "PersistentVolumeClaim" => round_trip::<core::PersistentVolumeClaim>(object),
        "PersistentVolume" => round_trip::<core::PersistentVolume>(object),
        "Event" => round_trip::<events::Event>(object),
        "Lease" => round_trip::<coordination::Lease>(object),
        "ReplicaSet" => round_trip::<apps::ReplicaSet>(object),
        "StatefulSet" => round_trip::<apps::StatefulSet>(object),
        "PodDisruptionBudget" => round_trip::<policy::PodDisruptionBudget>(object),
        "PriorityClass" => round_trip::<scheduling::PriorityClass>(object),
        "StorageClass" => round_trip::<storage::StorageClass>(object),
        "CSINode" => round_trip::<storage::CSINode>(object),
        "CSIDriver" => round_trip::<storage::CSIDriver>(object),
        "CSIStorageCapacity" => round_trip::<storage::CSIStorageCapacity>(object),
        "DeviceClass" => round_trip::<k8s_openapi::api::resource::v1::DeviceClass>(object),
        "ResourceSlice" => round_trip::<k8s_openapi::api::resource::v1::ResourceSlice>(object),
        "ResourceClaim" => round_trip::<k8s_openapi::api::resource::v1::ResourceClaim>(object),
        "ResourceClaimTemplate" => {
            round_trip::<k8s_openapi::api::resource::v1::ResourceClaimTemplate>(object)
        }
        _ => None,
    }
}

/// The paths of `input` the round trip dropped, as the server names them
/// (`spec.containers[0].foo`). Nulls and patch directives (`$...`) are not fields.
fn dropped(input: &Value, output: &Value, path: &str, out: &mut Vec<String>) {
    match (input, output) {
        (Value::Object(i), Value::Object(o)) => {
            for (k, v) in i {
                if v.is_null() || k.starts_with('$') {
                    continue;
                }
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match o.get(k) {
                    None => out.push(p),
                    Some(ov) => dropped(v, ov, &p, out),
                }
            }
        }
        (Value::Array(i), Value::Array(o)) => {
            for (n, (iv, ov)) in i.iter().zip(o).enumerate() {
                dropped(iv, ov, &format!("{path}[{n}]"), out);
            }
        }
        _ => {}
    }
}

/// Whether the written body (a whole object or a patch) names `path`.
fn names(body: &Value, path: &str) -> bool {
    let mut v = body;
    for part in path.split('.') {
        let (key, index) = match part.split_once('[') {
            Some((k, i)) => (k, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        v = &v[key];
        if let Some(i) = index {
            v = &v[i];
        }
        if v.is_null() {
            return false;
        }
    }
    true
}

/// The fields of a write the API does not have. `result` is the object the write
/// produces (for a patch: the current object with the patch applied); only fields
/// the written `body` names count.
pub fn unknown_fields(kind: Kind, sub: Option<&str>, body: &Value, result: &Value) -> Vec<String> {
    let mut object = result.clone();
    if sub != Some("binding") && object.is_object() {
        object["apiVersion"] = Value::String(kind.group_version.to_string());
        object["kind"] = Value::String(kind.kind.to_string());
    }
    let Some(out) = typed(kind, sub, &object) else {
        return Vec::new();
    };
    let mut unknown = Vec::new();
    dropped(&object, &out, "", &mut unknown);
    unknown.retain(|p| names(body, p));
    unknown
}

/// Removes the field at `path` from a written body: the server stores the object
/// without it.
pub fn strip(body: &mut Value, path: &str) {
    let mut parts: Vec<&str> = path.split('.').collect();
    let Some(last) = parts.pop() else {
        return;
    };
    let mut v = body;
    for part in parts {
        let (key, index) = match part.split_once('[') {
            Some((k, i)) => (k, i.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        v = &mut v[key];
        if let Some(i) = index {
            let Some(item) = v.get_mut(i) else {
                return;
            };
            v = item;
        }
    }
    let (key, index) = match last.split_once('[') {
        Some((k, i)) => (k, i.trim_end_matches(']').parse::<usize>().ok()),
        None => (last, None),
    };
    match index {
        None => {
            if let Some(o) = v.as_object_mut() {
                o.remove(key);
            }
        }
        Some(i) => {
            if let Some(a) = v[key].as_array_mut() {
                if i < a.len() {
                    a.remove(i);
                }
            }
        }
    }
}

/// The `Warning` header value for an unknown field.
pub fn header(field: &str) -> String {
    format!("299 - \"unknown field \\\"{field}\\\"\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::{EVENTS, PODS};
    use serde_json::json;

    #[test]
    fn fields_the_api_lacks_are_named_as_the_server_names_them() {
        let pod = json!({"metadata": {"name": "p", "colour": "red"},
                         "spec": {"containers": [{"name": "c", "image": "x", "cpu": 1}]},
                         "status": {"phase": "Pending", "nominatedNodeName": "n"}});
        assert_eq!(
            unknown_fields(PODS, None, &pod, &pod),
            ["metadata.colour", "spec.containers[0].cpu"]
        );
        // A status patch: only what the patch wrote counts.
        let patch = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False", "why": "x"}],
                                      "$setElementOrder/conditions": [{"type": "PodScheduled"}]}});
        let mut result = pod.clone();
        result["status"]["conditions"] = patch["status"]["conditions"].clone();
        assert_eq!(
            unknown_fields(PODS, Some("status"), &patch, &result),
            ["status.conditions[0].why"]
        );
        let binding = json!({"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n", "node": "n"}});
        assert_eq!(
            unknown_fields(PODS, Some("binding"), &binding, &binding),
            ["target.node"]
        );
        let event = json!({"metadata": {"name": "e"}, "eventTime": "2026-11-27T10:00:00.000000Z",
                           "note": "x", "message": "y"});
        assert_eq!(unknown_fields(EVENTS, None, &event, &event), ["message"]);
        assert_eq!(header("message"), r#"299 - "unknown field \"message\"""#);
    }
}
