//! A claim's `status.allocation` as PreBind writes it to the API: results (with
//! consumable-capacity shares), configs and node selector.

use crate::model::dra::{Allocation, AllocationNodes, ConfigSource};

/// `status.allocation` as the API has it (what PreBind writes): results, configs in
/// order, and the node selector (one node's name, or the slices' selectors merged into
/// one term, requirements deduplicated, as upstream's `createNodeSelector`).
pub fn allocation_to_json(a: &Allocation) -> serde_json::Value {
    use serde_json::json;
    let results: Vec<serde_json::Value> = a
        .devices
        .iter()
        .map(|d| {
            let mut r = json!({
                "request": &*d.request,
                "driver": &*d.driver,
                "pool": &*d.pool,
                "device": &*d.device,
            });
            if d.admin_access {
                r["adminAccess"] = json!(true);
            }
            if let Some(b) = &d.binding {
                let names =
                    |v: &[std::sync::Arc<str>]| v.iter().map(|c| c.to_string()).collect::<Vec<_>>();
                r["bindingConditions"] = json!(names(&b.conditions));
                r["bindingFailureConditions"] = json!(names(&b.failure));
            }
            if let Some(sh) = &d.share {
                r["shareID"] = json!(&*sh.id);
                if !sh.consumed.is_empty() {
                    let m: serde_json::Map<String, serde_json::Value> = sh
                        .consumed
                        .iter()
                        .map(|(k, n)| (k.to_string(), json!(binary_si(*n))))
                        .collect();
                    r["consumedCapacity"] = serde_json::Value::Object(m);
                }
            }
            r
        })
        .collect();
    let config: Vec<serde_json::Value> = a
        .config
        .iter()
        .map(|c| {
            let mut v = json!({
                "source": match c.source {
                    ConfigSource::FromClass => "FromClass",
                    ConfigSource::FromClaim => "FromClaim",
                },
                "opaque": {"driver": &*c.opaque.driver, "parameters": &*c.opaque.parameters},
            });
            if !c.requests.is_empty() {
                v["requests"] = json!(c.requests.iter().map(|r| &**r).collect::<Vec<_>>());
            }
            v
        })
        .collect();
    let mut devices = json!({"results": results});
    if !config.is_empty() {
        devices["config"] = json!(config);
    }
    let mut out = json!({"devices": devices});
    if let Some(t) = a
        .timestamp
        .and_then(|us| k8s_openapi::jiff::Timestamp::from_microsecond(us).ok())
    {
        out["allocationTimestamp"] = json!(t.to_string());
    }
    match &a.node_selector {
        Some(AllocationNodes::Node(n)) => {
            out["nodeSelector"] = json!({"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [&**n]}
            ]}]});
        }
        Some(AllocationNodes::All(sels)) => {
            let mut fields: Vec<serde_json::Value> = Vec::new();
            let mut exprs: Vec<serde_json::Value> = Vec::new();
            for s in sels {
                let Some(term) = s.raw["nodeSelectorTerms"].get(0) else {
                    continue;
                };
                for (list, key) in [
                    (&mut fields, "matchFields"),
                    (&mut exprs, "matchExpressions"),
                ] {
                    for r in term[key].as_array().into_iter().flatten() {
                        if !list.contains(r) {
                            list.push(r.clone());
                        }
                    }
                }
            }
            let mut term = json!({});
            if !fields.is_empty() {
                term["matchFields"] = json!(fields);
            }
            if !exprs.is_empty() {
                term["matchExpressions"] = json!(exprs);
            }
            out["nodeSelector"] = json!({"nodeSelectorTerms": [term]});
        }
        None => {}
    }
    out
}

/// A quantity as apimachinery writes a `BinarySI` one (what the allocator's rounding
/// produces): the largest power-of-1024 suffix that divides it, else plain decimal.
fn binary_si(nanos: i128) -> String {
    const NANO: i128 = 1_000_000_000;
    if nanos > 0 && nanos % NANO == 0 {
        let mut v = nanos / NANO;
        let mut i = 0;
        const SUFFIX: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
        while i < 6 && v % 1024 == 0 {
            v /= 1024;
            i += 1;
        }
        return format!("{v}{}", SUFFIX[i]);
    }
    switchyard_cel::Quantity::from_nanos(nanos).to_string()
}

#[cfg(test)]
mod binary_si_tests {
    #[test]
    fn writes_binary_suffixes() {
        assert_eq!(super::binary_si(4 * (1 << 30) * 1_000_000_000), "4Gi");
        assert_eq!(super::binary_si(1536 * 1_000_000_000), "1536");
        assert_eq!(super::binary_si(3072 * 1_000_000_000), "3Ki");
        assert_eq!(super::binary_si(1000 * 1_000_000_000), "1000");
        assert_eq!(super::binary_si(500_000_000), "0.5");
    }
}
