//! What a v1.36 API server refuses of the objects a scheduler writes, so that the
//! double answers 422 where a real server would (a double that took an invalid
//! event name once hid 422s from a real server). Read from upstream:
//! `staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go` (names,
//! generateName), `pkg/apis/core/validation/events.go` (`ValidateEventCreate` for
//! `events.k8s.io/v1`, `validateV1EventSeries`) and
//! `pkg/apis/coordination/validation/validation.go` (Leases).

use serde_json::Value;

use super::{Kind, EVENTS, LEASES};

/// A refused object: the fields and upstream's words, as a 422 `Invalid` Status
/// carries them.
#[derive(Debug)]
pub struct Invalid(pub Vec<String>);

/// Upstream `IsDNS1123Subdomain`: lowercase alphanumerics, `-` and `.`, starting
/// and ending alphanumeric, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// Upstream `names.SimpleNameGenerator`: the prefix (cut to leave room) and five
/// characters from a consonant-and-digit alphabet.
pub fn generate_name(prefix: &str, seed: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let keep = prefix.len().min(63 - 5);
    let mut out = prefix[..keep].to_string();
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for _ in 0..5 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(ALPHABET[(x % ALPHABET.len() as u64) as usize] as char);
    }
    out
}

fn str_len(v: &Value) -> usize {
    v.as_str().map_or(0, str::len)
}

/// The v1.36 checks of a created object of `kind` (after any generateName).
pub fn validate_create(kind: Kind, o: &Value) -> Result<(), Invalid> {
    let mut errs = Vec::new();
    let name = o["metadata"]["name"].as_str().unwrap_or("");
    if name.is_empty() {
        errs.push("metadata.name: Required value: name or generateName is required".into());
    } else if !is_dns_subdomain(name) {
        errs.push(format!("metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"));
    }
    if kind == EVENTS {
        validate_event(o, &mut errs);
    }
    if kind == LEASES {
        if let Some(d) = o["spec"]["leaseDurationSeconds"].as_i64() {
            if d <= 0 {
                errs.push(format!(
                    "spec.leaseDurationSeconds: Invalid value: {d}: must be greater than 0"
                ));
            }
        }
        if let Some(t) = o["spec"]["leaseTransitions"].as_i64() {
            if t < 0 {
                errs.push(format!(
                    "spec.leaseTransitions: Invalid value: {t}: must be greater than or equal to 0"
                ));
            }
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(Invalid(errs))
    }
}

/// `ValidateEventCreate` for `events.k8s.io/v1`, and `validateV1EventSeries`.
fn validate_event(o: &Value, errs: &mut Vec<String>) {
    if o["eventTime"].as_str().is_none_or(str::is_empty) {
        errs.push("eventTime: Required value".into());
    }
    match o["type"].as_str() {
        Some("Normal") | Some("Warning") => {}
        other => errs.push(format!(
            "type: Invalid value: {:?}: has invalid value: {}",
            other.unwrap_or(""),
            other.unwrap_or("")
        )),
    }
    for deprecated in ["deprecatedFirstTimestamp", "deprecatedLastTimestamp"] {
        if !o[deprecated].is_null() {
            errs.push(format!("{deprecated}: Invalid value: needs to be unset"));
        }
    }
    if o["deprecatedCount"].as_i64().is_some_and(|c| c != 0) {
        errs.push("deprecatedCount: Invalid value: needs to be unset".into());
    }
    if !o["deprecatedSource"]["component"].is_null() || !o["deprecatedSource"]["host"].is_null() {
        errs.push("deprecatedSource: Invalid value: needs to be unset".into());
    }
    let controller = o["reportingController"].as_str().unwrap_or("");
    if controller.is_empty() {
        errs.push("reportingController: Required value".into());
    }
    for (field, limit) in [("reportingInstance", 128), ("action", 128), ("reason", 128)] {
        let n = str_len(&o[field]);
        if n == 0 {
            errs.push(format!("{field}: Required value"));
        } else if n > limit {
            errs.push(format!(
                "{field}: Too long: may not be more than {limit} bytes"
            ));
        }
    }
    if str_len(&o["note"]) > 1024 {
        errs.push("note: Too long: may not be more than 1024 bytes".into());
    }
    if o["regarding"].is_null() {
        errs.push("regarding: Required value".into());
    }
    let series = &o["series"];
    if !series.is_null() {
        if series["count"].as_i64().unwrap_or(0) < 2 {
            errs.push(format!(
                "series.count: Invalid value: {}: should be at least 2",
                series["count"]
            ));
        }
        if series["lastObservedTime"]
            .as_str()
            .is_none_or(str::is_empty)
        {
            errs.push("series.lastObservedTime: Required value".into());
        }
    }
}

/// `ValidateResourceClaimStatusUpdate` (k8s.io/kubernetes pkg/apis/resource/validation),
/// the rules a scheduler's claim writes meet: reservedFor needs an allocation, holds
/// each consumer once and at most 256; an allocation cannot change once set (only be
/// removed); a claim being deleted gets no new allocation; at most 32 results.
pub fn validate_claim_status(old: &Value, new: &Value) -> Result<(), Invalid> {
    let mut errs = Vec::new();
    let alloc_old = &old["status"]["allocation"];
    let alloc_new = &new["status"]["allocation"];
    let reserved = new["status"]["reservedFor"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !reserved.is_empty() && alloc_new.is_null() {
        errs.push(
            "status.reservedFor: Forbidden: may not be specified when `allocated` is not set"
                .to_string(),
        );
    }
    if reserved.len() > 256 {
        errs.push(format!(
            "status.reservedFor: Too many: {}: must have at most 256 items",
            reserved.len()
        ));
    }
    let mut uids = std::collections::HashSet::new();
    for (i, r) in reserved.iter().enumerate() {
        let uid = r["uid"].as_str().unwrap_or("");
        if !uids.insert(uid.to_string()) {
            errs.push(format!(
                "status.reservedFor[{i}].uid: Duplicate value: {uid:?}"
            ));
        }
        if r["resource"].as_str().is_none_or(str::is_empty) {
            errs.push(format!("status.reservedFor[{i}].resource: Required value"));
        }
    }
    if !alloc_old.is_null() && !alloc_new.is_null() && alloc_old != alloc_new {
        errs.push("status.allocation: Invalid value: field is immutable".to_string());
    }
    if alloc_old.is_null()
        && !alloc_new.is_null()
        && !old["metadata"]["deletionTimestamp"].is_null()
    {
        errs.push(
            "status.allocation: Forbidden: new allocation while ResourceClaim is being deleted"
                .to_string(),
        );
    }
    let results = alloc_new["devices"]["results"]
        .as_array()
        .map_or(0, Vec::len);
    if results > 32 {
        errs.push(format!(
            "status.allocation.devices.results: Too many: {results}: must have at most 32 items"
        ));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(Invalid(errs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event() -> Value {
        json!({"metadata": {"name": "p.18ebe120a33eb997", "namespace": "default"},
               "eventTime": "2026-11-27T10:00:00.000000Z", "type": "Warning",
               "reportingController": "switchyard", "reportingInstance": "switchyard-host",
               "action": "Scheduling", "reason": "FailedScheduling", "note": "0/1 nodes",
               "regarding": {"kind": "Pod", "name": "p", "namespace": "default"}})
    }

    #[test]
    fn refuses_what_a_careless_client_sends() {
        assert!(validate_create(EVENTS, &event()).is_ok());
        for (change, field) in [
            (json!({"metadata": {"name": "p.1776EFAB"}}), "metadata.name"),
            (json!({"metadata": {"name": "p."}}), "metadata.name"),
            (json!({"eventTime": null}), "eventTime"),
            (json!({"type": "Error"}), "type"),
            (
                json!({"reportingInstance": "x".repeat(129)}),
                "reportingInstance",
            ),
            (json!({"note": "x".repeat(1025)}), "note"),
            (
                json!({"series": {"count": 1, "lastObservedTime": "2026-11-27T10:00:00Z"}}),
                "series.count",
            ),
            (json!({"deprecatedCount": 3}), "deprecatedCount"),
        ] {
            let mut e = event();
            super::super::handler::merge(&mut e, &change);
            let errs = validate_create(EVENTS, &e).unwrap_err().0;
            assert!(
                errs.iter().any(|m| m.starts_with(field)),
                "{change}: {errs:?}"
            );
        }
        let lease =
            json!({"metadata": {"name": "switchyard"}, "spec": {"leaseDurationSeconds": 0}});
        assert!(validate_create(LEASES, &lease).is_err());
    }

    #[test]
    fn generated_names_are_valid_and_distinct() {
        let a = generate_name("pod-", 1);
        let b = generate_name("pod-", 2);
        assert!(
            a.starts_with("pod-") && a.len() == 9 && is_dns_subdomain(&a),
            "{a}"
        );
        assert_ne!(a, b);
        assert_eq!(generate_name(&"x".repeat(80), 3).len(), 63);
    }
}
