//! Dynamic Resource Allocation (`resource.k8s.io/v1`): claims and claim templates,
//! validated as the API server validates them (the limits of `k8s.io/api/resource/v1`
//! and its CEL rules), a pod's claims, and the limits and helpers the device side
//! ([`super::dra_devices`]) shares.

use k8s_openapi::api::resource::v1 as resource;
use switchyard_cel::Program;

use crate::model::dra::{
    AllocatedConfig, Allocation, AllocationMode, AllocationNodes, ClaimConfig, ClaimSource,
    ClaimSpec, ConfigSource, ConstraintKind, ConsumerRef, DeviceConstraint, DeviceRequest,
    DeviceResult, DeviceToleration, ExactRequest, NodeSelectorRef, OpaqueConfig, PodClaimStatus,
    PodResourceClaim, RequestKind, ResourceClaim, ResourceClaimTemplate,
};

use super::*;

/// API limits of `resource.k8s.io/v1` (`k8s.io/api/resource/v1/types.go`).
pub const DEVICE_REQUESTS_MAX: usize = 32;
pub const DEVICE_SELECTORS_MAX: usize = 32;
pub const DEVICE_CONSTRAINTS_MAX: usize = 32;
pub const DEVICE_CONFIG_MAX: usize = 32;
pub const FIRST_AVAILABLE_MAX: usize = 8;
pub const DEVICE_TOLERATIONS_MAX: usize = 16;
pub const RESOURCE_SLICE_MAX_DEVICES: usize = 128;
/// Devices per slice when any uses taints or counters (`ResourceSliceMaxDevicesWithTaintsOrConsumesCounters`).
pub const RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_COUNTERS: usize = 64;
pub const ATTRIBUTES_AND_CAPACITIES_MAX: usize = 32;
pub const SHARED_COUNTERS_MAX: usize = 8;
pub const DEVICE_TAINTS_MAX: usize = 16;
pub const BINDING_CONDITIONS_MAX: usize = 4;
pub const OPAQUE_PARAMETERS_MAX_BYTES: usize = 10 * 1024;

pub(super) fn too_many(field: &str, n: usize, max: usize) -> FieldError {
    err(
        field,
        format!("Too many: {n}: must have at most {max} items"),
    )
}

pub(super) fn required(field: &str) -> FieldError {
    err(field, "Required value")
}

pub(super) fn dns_label(field: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(err(
            field,
            format!("Invalid value: {name:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"),
        ))
    }
}

/// A DNS subdomain (driver names, pool names' segments, attribute domains).
pub(super) fn dns_subdomain(field: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 253 || name.split('.').any(|l| dns_label(field, l).is_err())
    {
        return Err(err(
            field,
            format!("Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"),
        ));
    }
    Ok(())
}

/// An attribute or capacity name: `id` or `domain/id`, the id a C identifier of at
/// most 64 characters (upstream `validateQualifiedName`).
pub(super) fn qualified_name(field: &str, name: &str) -> Result<()> {
    let id = match name.split_once('/') {
        Some((domain, id)) => {
            dns_subdomain(field, domain)?;
            id
        }
        None => name,
    };
    let c_ident = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if c_ident {
        Ok(())
    } else {
        Err(err(
            field,
            format!("Invalid value: {name:?}: must be a C identifier (matching regex [A-Za-z_][A-Za-z0-9_]*) of at most 64 characters, optionally prefixed by a DNS subdomain and '/'"),
        ))
    }
}

pub(super) fn compile_selectors(
    sels: Option<&Vec<resource::DeviceSelector>>,
    field: &str,
) -> Result<Box<[Program]>> {
    let sels = sels.map(Vec::as_slice).unwrap_or_default();
    if sels.len() > DEVICE_SELECTORS_MAX {
        return Err(too_many(field, sels.len(), DEVICE_SELECTORS_MAX));
    }
    sels.iter()
        .enumerate()
        .map(|(i, s)| {
            let f = format!("{field}[{i}].cel");
            let Some(cel) = &s.cel else {
                return Err(required(&f));
            };
            Program::compile(&cel.expression)
                .map_err(|e| err(format!("{f}.expression"), format!("Invalid value: {e}")))
        })
        .collect()
}

pub(super) fn opaque(
    o: Option<&resource::OpaqueDeviceConfiguration>,
    field: &str,
) -> Result<OpaqueConfig> {
    let Some(o) = o else {
        return Err(required(&format!("{field}.opaque")));
    };
    dns_subdomain(&format!("{field}.opaque.driver"), &o.driver)?;
    let size = serde_json::to_string(&o.parameters.0)
        .map(|s| s.len())
        .unwrap_or(0);
    if size > OPAQUE_PARAMETERS_MAX_BYTES {
        return Err(err(
            format!("{field}.opaque.parameters"),
            format!("Too long: may not be more than {OPAQUE_PARAMETERS_MAX_BYTES} bytes"),
        ));
    }
    Ok(OpaqueConfig {
        driver: o.driver.as_str().into(),
        parameters: Arc::new(o.parameters.0.clone()),
    })
}

pub(super) fn taint_effect(
    effect: &str,
    field: &str,
    allow_none: bool,
) -> Result<Option<TaintEffect>> {
    match effect {
        "NoSchedule" => Ok(Some(TaintEffect::NoSchedule)),
        "NoExecute" => Ok(Some(TaintEffect::NoExecute)),
        "None" if allow_none => Ok(None),
        other => Err(err(
            field,
            format!(
                "Unsupported value: {other:?}: supported values: \"NoExecute\", \"NoSchedule\"{}",
                if allow_none { ", \"None\"" } else { "" }
            ),
        )),
    }
}

fn tolerations(
    t: Option<&Vec<resource::DeviceToleration>>,
    field: &str,
) -> Result<Box<[DeviceToleration]>> {
    let t = t.map(Vec::as_slice).unwrap_or_default();
    if t.len() > DEVICE_TOLERATIONS_MAX {
        return Err(too_many(field, t.len(), DEVICE_TOLERATIONS_MAX));
    }
    t.iter()
        .enumerate()
        .map(|(i, t)| {
            let f = format!("{field}[{i}]");
            let exists = match t.operator.as_deref().unwrap_or("Equal") {
                "Equal" => false,
                "Exists" => true,
                other => {
                    return Err(err(
                        format!("{f}.operator"),
                        format!(
                            "Unsupported value: {other:?}: supported values: \"Equal\", \"Exists\""
                        ),
                    ))
                }
            };
            if exists && t.value.as_deref().is_some_and(|v| !v.is_empty()) {
                return Err(err(
                    format!("{f}.value"),
                    "Invalid value: must be empty when `operator` is 'Exists'",
                ));
            }
            if t.key.as_deref().is_none_or(str::is_empty) && !exists {
                return Err(err(
                    format!("{f}.operator"),
                    "Invalid value: must be 'Exists' when `key` is empty",
                ));
            }
            let effect = match t.effect.as_deref() {
                None | Some("") => None,
                Some(e) => taint_effect(e, &format!("{f}.effect"), false)?,
            };
            Ok(DeviceToleration {
                key: t.key.as_deref().filter(|k| !k.is_empty()).map(Arc::from),
                exists,
                value: t.value.as_deref().unwrap_or("").into(),
                effect,
            })
        })
        .collect()
}

/// The fields a request and a subrequest share.
struct RequestFields<'a> {
    class: &'a str,
    selectors: Option<&'a Vec<resource::DeviceSelector>>,
    mode: Option<&'a str>,
    count: Option<i64>,
    admin_access: Option<bool>,
    tolerations: Option<&'a Vec<resource::DeviceToleration>>,
    capacity: Option<&'a resource::CapacityRequirements>,
}

fn exact_request(r: RequestFields<'_>, field: &str) -> Result<ExactRequest> {
    let RequestFields {
        class,
        selectors,
        mode,
        count,
        admin_access,
        tolerations: tols,
        capacity,
    } = r;
    if class.is_empty() {
        return Err(required(&format!("{field}.deviceClassName")));
    }
    dns_subdomain(&format!("{field}.deviceClassName"), class)?;
    let mode = match mode.unwrap_or("ExactCount") {
        "ExactCount" => {
            let n = count.unwrap_or(1);
            if n <= 0 {
                return Err(err(
                    format!("{field}.count"),
                    format!("Invalid value: {n}: must be greater than zero"),
                ));
            }
            if n as usize > crate::model::dra::ALLOCATION_RESULTS_MAX_SIZE {
                return Err(err(
                    format!("{field}.count"),
                    format!(
                        "Invalid value: {n}: must not exceed {}",
                        crate::model::dra::ALLOCATION_RESULTS_MAX_SIZE
                    ),
                ));
            }
            AllocationMode::ExactCount(n as u32)
        }
        "All" => {
            if count.is_some() {
                return Err(err(
                    format!("{field}.count"),
                    "Invalid value: must not be specified when allocationMode is 'All'",
                ));
            }
            AllocationMode::All
        }
        other => {
            return Err(err(
                format!("{field}.allocationMode"),
                format!("Unsupported value: {other:?}: supported values: \"All\", \"ExactCount\""),
            ))
        }
    };
    let mut capacity_requests = Vec::new();
    for (k, q) in capacity
        .and_then(|c| c.requests.as_ref())
        .into_iter()
        .flatten()
    {
        let f = format!("{field}.capacity.requests[{k}]");
        qualified_name(&f, k)?;
        let v = switchyard_cel::Quantity::parse(&q.0)
            .map_err(|e| err(&f, format!("Invalid value: {:?}: {e}", q.0)))?;
        if v.nanos() < 0 {
            return Err(err(
                &f,
                format!(
                    "Invalid value: {:?}: must be greater than or equal to 0",
                    q.0
                ),
            ));
        }
        capacity_requests.push((Arc::from(k.as_str()), v.nanos()));
    }
    Ok(ExactRequest {
        capacity_requests: capacity_requests.into(),
        device_class_name: class.into(),
        selectors: compile_selectors(selectors, &format!("{field}.selectors"))?,
        mode,
        admin_access: admin_access.unwrap_or(false),
        tolerations: tolerations(tols, &format!("{field}.tolerations"))?,
    })
}

/// A claim's or template's `spec` (`ResourceClaimSpec`).
pub fn claim_spec_from_k8s(spec: &resource::ResourceClaimSpec, field: &str) -> Result<ClaimSpec> {
    let raw = serde_json::to_value(spec).unwrap_or(serde_json::Value::Null);
    let Some(d) = &spec.devices else {
        return Ok(ClaimSpec {
            raw: Arc::new(raw),
            ..ClaimSpec::default()
        });
    };
    let field = format!("{field}.devices");
    let reqs = d.requests.as_deref().unwrap_or_default();
    if reqs.len() > DEVICE_REQUESTS_MAX {
        return Err(too_many(
            &format!("{field}.requests"),
            reqs.len(),
            DEVICE_REQUESTS_MAX,
        ));
    }
    let mut names: Vec<Arc<str>> = Vec::new();
    let mut requests = Vec::with_capacity(reqs.len());
    for (i, r) in reqs.iter().enumerate() {
        let f = format!("{field}.requests[{i}]");
        dns_label(&format!("{f}.name"), &r.name)?;
        if names.iter().any(|n| **n == *r.name) {
            return Err(err(
                format!("{f}.name"),
                format!("Duplicate value: {:?}", r.name),
            ));
        }
        names.push(r.name.as_str().into());
        let kind = match (&r.exactly, &r.first_available) {
            (Some(e), None) => RequestKind::Exactly(exact_request(
                RequestFields {
                    class: &e.device_class_name,
                    selectors: e.selectors.as_ref(),
                    mode: e.allocation_mode.as_deref(),
                    count: e.count,
                    admin_access: e.admin_access,
                    tolerations: e.tolerations.as_ref(),
                    capacity: e.capacity.as_ref(),
                },
                &format!("{f}.exactly"),
            )?),
            (None, Some(subs)) => {
                if subs.is_empty() {
                    return Err(required(&format!("{f}.firstAvailable")));
                }
                if subs.len() > FIRST_AVAILABLE_MAX {
                    return Err(too_many(&format!("{f}.firstAvailable"), subs.len(), FIRST_AVAILABLE_MAX));
                }
                let mut out: Vec<(Arc<str>, ExactRequest)> = Vec::with_capacity(subs.len());
                for (j, s) in subs.iter().enumerate() {
                    let sf = format!("{f}.firstAvailable[{j}]");
                    dns_label(&format!("{sf}.name"), &s.name)?;
                    if out.iter().any(|(n, _)| **n == *s.name) {
                        return Err(err(format!("{sf}.name"), format!("Duplicate value: {:?}", s.name)));
                    }
                    let req = exact_request(
                        RequestFields {
                            class: &s.device_class_name,
                            selectors: s.selectors.as_ref(),
                            mode: s.allocation_mode.as_deref(),
                            count: s.count,
                            admin_access: None,
                            tolerations: s.tolerations.as_ref(),
                            capacity: s.capacity.as_ref(),
                        },
                        &sf,
                    )?;
                    out.push((s.name.as_str().into(), req));
                }
                RequestKind::FirstAvailable(out.into())
            }
            (Some(_), Some(_)) => {
                return Err(err(&f, "Invalid value: exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set"))
            }
            (None, None) => {
                return Err(err(&f, "Required value: exactly one of `exactly` or `firstAvailable` is required"))
            }
        };
        requests.push(DeviceRequest {
            name: r.name.as_str().into(),
            kind,
        });
    }
    let known = |name: &str| -> bool {
        let (parent, sub) = match name.split_once('/') {
            Some((p, s)) => (p, Some(s)),
            None => (name, None),
        };
        requests.iter().any(|r| {
            *r.name == *parent
                && match (sub, &r.kind) {
                    (None, _) => true,
                    (Some(s), RequestKind::FirstAvailable(subs)) => {
                        subs.iter().any(|(n, _)| **n == *s)
                    }
                    (Some(_), RequestKind::Exactly(_)) => false,
                }
        })
    };
    let request_refs = |list: Option<&Vec<String>>, f: &str| -> Result<Box<[Arc<str>]>> {
        list.map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(k, n)| {
                if known(n) {
                    Ok(Arc::from(n.as_str()))
                } else {
                    Err(err(format!("{f}[{k}]"), format!("Invalid value: {n:?}: must be the name of a request in the claim or the name of a request and a subrequest separated by '/'")))
                }
            })
            .collect()
    };
    let cons = d.constraints.as_deref().unwrap_or_default();
    if cons.len() > DEVICE_CONSTRAINTS_MAX {
        return Err(too_many(
            &format!("{field}.constraints"),
            cons.len(),
            DEVICE_CONSTRAINTS_MAX,
        ));
    }
    let mut constraints = Vec::with_capacity(cons.len());
    for (i, c) in cons.iter().enumerate() {
        let f = format!("{field}.constraints[{i}]");
        let kind = match (&c.match_attribute, &c.distinct_attribute) {
            (Some(a), None) => {
                qualified_name(&format!("{f}.matchAttribute"), a)?;
                if !a.contains('/') {
                    return Err(err(format!("{f}.matchAttribute"), format!("Invalid value: {a:?}: a fully qualified name must be used (domain/id)")));
                }
                ConstraintKind::MatchAttribute(a.as_str().into())
            }
            (None, Some(a)) => {
                qualified_name(&format!("{f}.distinctAttribute"), a)?;
                if !a.contains('/') {
                    return Err(err(format!("{f}.distinctAttribute"), format!("Invalid value: {a:?}: a fully qualified name must be used (domain/id)")));
                }
                ConstraintKind::DistinctAttribute(a.as_str().into())
            }
            (Some(_), Some(_)) => return Err(err(&f, "Invalid value: exactly one of `matchAttribute` or `distinctAttribute` is required, but multiple fields are set")),
            (None, None) => return Err(err(&f, "Required value: exactly one of `matchAttribute` or `distinctAttribute` is required")),
        };
        constraints.push(DeviceConstraint {
            requests: request_refs(c.requests.as_ref(), &format!("{f}.requests"))?,
            kind,
        });
    }
    let cfgs = d.config.as_deref().unwrap_or_default();
    if cfgs.len() > DEVICE_CONFIG_MAX {
        return Err(too_many(
            &format!("{field}.config"),
            cfgs.len(),
            DEVICE_CONFIG_MAX,
        ));
    }
    let mut config = Vec::with_capacity(cfgs.len());
    for (i, c) in cfgs.iter().enumerate() {
        let f = format!("{field}.config[{i}]");
        config.push(ClaimConfig {
            requests: request_refs(c.requests.as_ref(), &format!("{f}.requests"))?,
            opaque: opaque(c.opaque.as_ref(), &f)?,
        });
    }
    Ok(ClaimSpec {
        requests: requests.into(),
        constraints: constraints.into(),
        config: config.into(),
        raw: Arc::new(raw),
    })
}

fn allocation_from_k8s(a: &resource::AllocationResult, field: &str) -> Result<Allocation> {
    let results = a
        .devices
        .as_ref()
        .and_then(|d| d.results.as_deref())
        .unwrap_or_default();
    let devices = results
        .iter()
        .map(|r| DeviceResult {
            request: r.request.as_str().into(),
            driver: r.driver.as_str().into(),
            pool: r.pool.as_str().into(),
            device: r.device.as_str().into(),
            admin_access: r.admin_access.unwrap_or(false),
            binding: binding_conditions(
                r.binding_conditions.as_ref(),
                r.binding_failure_conditions.as_ref(),
            ),
            share: r.share_id.as_ref().map(|id| {
                Arc::new(crate::model::dra::Share {
                    id: id.as_str().into(),
                    consumed: r
                        .consumed_capacity
                        .iter()
                        .flatten()
                        .map(|(k, q)| {
                            let n = switchyard_cel::Quantity::parse(&q.0)
                                .map(|q| q.nanos())
                                .unwrap_or(0);
                            (Arc::from(k.as_str()), n)
                        })
                        .collect(),
                })
            }),
        })
        .collect();
    let config = a
        .devices
        .as_ref()
        .and_then(|d| d.config.as_deref())
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let f = format!("{field}.devices.config[{i}]");
            Ok(AllocatedConfig {
                source: match c.source.as_str() {
                    "FromClass" => ConfigSource::FromClass,
                    _ => ConfigSource::FromClaim,
                },
                requests: c
                    .requests
                    .iter()
                    .flatten()
                    .map(|r| Arc::from(r.as_str()))
                    .collect(),
                opaque: opaque(c.opaque.as_ref(), &f)?,
            })
        })
        .collect::<Result<_>>()?;
    let node_selector = a.node_selector.as_ref().map(|s| {
        // A selector on `metadata.name` alone is the node-local form the scheduler writes.
        let single = s.node_selector_terms.as_slice();
        if let [t] = single {
            if t.match_expressions.as_ref().is_none_or(Vec::is_empty) {
                if let Some([f]) = t.match_fields.as_deref() {
                    if f.key == NODE_FIELD_NAME && f.operator == "In" {
                        if let Some([v]) = f.values.as_deref() {
                            return AllocationNodes::Node(v.as_str().into());
                        }
                    }
                }
            }
        }
        AllocationNodes::All(vec![Arc::new(NodeSelectorRef {
            selector: node_selector_from_k8s(s, field),
            raw: serde_json::to_value(s).unwrap_or_default(),
        })])
    });
    Ok(Allocation {
        devices,
        config,
        node_selector,
        timestamp: a.allocation_timestamp.as_ref().map(parse_time),
    })
}

/// A result's binding conditions (`None` without any: nothing to wait for).
fn binding_conditions(
    conditions: Option<&Vec<String>>,
    failure: Option<&Vec<String>>,
) -> Option<Arc<crate::model::dra::BindingConditions>> {
    let list = |v: Option<&Vec<String>>| -> Box<[Arc<str>]> {
        v.into_iter()
            .flatten()
            .map(|c| Arc::from(c.as_str()))
            .collect()
    };
    crate::model::dra::BindingConditions::new(list(conditions), list(failure))
}

/// `status.devices`: each entry kept as given (written back unchanged), its conditions
/// read.
fn device_statuses(
    devices: Option<&Vec<resource::AllocatedDeviceStatus>>,
) -> Vec<crate::model::dra::AllocatedDeviceStatus> {
    devices
        .into_iter()
        .flatten()
        .map(|d| crate::model::dra::AllocatedDeviceStatus {
            driver: d.driver.as_str().into(),
            pool: d.pool.as_str().into(),
            device: d.device.as_str().into(),
            share_id: d.share_id.as_deref().map(Arc::from),
            conditions: d
                .conditions
                .iter()
                .flatten()
                .map(|c| crate::model::dra::DeviceCondition {
                    type_: c.type_.as_str().into(),
                    status: c.status.as_str().into(),
                    reason: c.reason.as_str().into(),
                    message: c.message.as_str().into(),
                })
                .collect(),
            raw: Arc::new(serde_json::to_value(d).unwrap_or_default()),
        })
        .collect()
}

/// A ResourceClaim.
pub fn resource_claim_from_k8s(
    c: &resource::ResourceClaim,
    generated_uid: impl FnOnce() -> String,
) -> Result<ResourceClaim> {
    let (name, namespace) = meta_name_ns(&c.metadata, "ResourceClaim")?;
    let spec = claim_spec_from_k8s(&c.spec.clone().unwrap_or_default(), "spec")?;
    let status = c.status.as_ref();
    let allocation = status
        .and_then(|s| s.allocation.as_ref())
        .map(|a| allocation_from_k8s(a, "status.allocation"))
        .transpose()?
        .map(Arc::new);
    let reserved_for = status
        .and_then(|s| s.reserved_for.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|r| ConsumerRef {
            api_group: r.api_group.as_deref().unwrap_or("").into(),
            resource: r.resource.as_str().into(),
            name: r.name.as_str().into(),
            uid: r.uid.as_str().into(),
        })
        .collect::<Vec<_>>();
    if reserved_for.len() > crate::model::dra::RESERVED_FOR_MAX_SIZE {
        return Err(too_many(
            "status.reservedFor",
            reserved_for.len(),
            crate::model::dra::RESERVED_FOR_MAX_SIZE,
        ));
    }
    if !reserved_for.is_empty() && allocation.is_none() {
        return Err(err(
            "status.reservedFor",
            "Forbidden: may not be specified when `allocated` is not set",
        ));
    }
    let owner = c
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| crate::model::dra::ControllerRef {
            api_version: o.api_version.as_str().into(),
            kind: o.kind.as_str().into(),
            name: o.name.as_str().into(),
            uid: o.uid.as_str().into(),
        });
    Ok(ResourceClaim {
        namespace,
        name,
        uid: c.metadata.uid.clone().unwrap_or_else(generated_uid).into(),
        resource_version: c.metadata.resource_version.as_deref().map(Arc::from),
        deleting: c.metadata.deletion_timestamp.is_some(),
        finalizers: c
            .metadata
            .finalizers
            .iter()
            .flatten()
            .map(|f| Arc::from(f.as_str()))
            .collect(),
        annotations: labels_of(&c.metadata.annotations),
        owner,
        spec: Arc::new(spec),
        allocation,
        reserved_for,
        devices: device_statuses(status.and_then(|s| s.devices.as_ref())),
    })
}

/// A ResourceClaimTemplate.
pub fn resource_claim_template_from_k8s(
    t: &resource::ResourceClaimTemplate,
) -> Result<ResourceClaimTemplate> {
    let (name, namespace) = meta_name_ns(&t.metadata, "ResourceClaimTemplate")?;
    let Some(tspec) = &t.spec else {
        return Err(required("spec"));
    };
    let spec = claim_spec_from_k8s(&tspec.spec.clone().unwrap_or_default(), "spec.spec")?;
    let meta = tspec.metadata.as_ref();
    Ok(ResourceClaimTemplate {
        namespace,
        name,
        labels: labels_of(&meta.and_then(|m| m.labels.clone())),
        annotations: labels_of(&meta.and_then(|m| m.annotations.clone())),
        spec: Arc::new(spec),
    })
}

/// A pod's claim entries and the claim statuses written for them.
pub(super) type PodClaims = (Box<[PodResourceClaim]>, Box<[PodClaimStatus]>);

/// A pod's `spec.resourceClaims`, checked as the API server checks them, and
/// `status.resourceClaimStatuses` (claim names generated for template entries; a
/// `None` name: no claim needed).
pub(super) fn pod_resource_claims(
    spec: &core::PodSpec,
    status: Option<&core::PodStatus>,
) -> Result<PodClaims> {
    let mut claims: Vec<PodResourceClaim> = Vec::new();
    for (i, c) in spec.resource_claims.iter().flatten().enumerate() {
        let f = format!("spec.resourceClaims[{i}]");
        dns_label(&format!("{f}.name"), &c.name)?;
        if claims.iter().any(|o| *o.name == *c.name) {
            return Err(err(
                format!("{f}.name"),
                format!("Duplicate value: {:?}", c.name),
            ));
        }
        let source = match (
            c.resource_claim_name.as_deref().filter(|s| !s.is_empty()),
            c.resource_claim_template_name.as_deref().filter(|s| !s.is_empty()),
        ) {
            (Some(n), None) => ClaimSource::Claim(n.into()),
            (None, Some(t)) => ClaimSource::Template(t.into()),
            (Some(_), Some(_)) => return Err(err(&f, "Invalid value: at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified")),
            (None, None) => return Err(err(&f, "Invalid value: must specify one of: `resourceClaimName`, `resourceClaimTemplateName`")),
        };
        claims.push(PodResourceClaim {
            name: c.name.as_str().into(),
            source,
        });
    }
    for (ci, ctr) in spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .enumerate()
    {
        for (k, rc) in ctr
            .resources
            .as_ref()
            .and_then(|r| r.claims.as_deref())
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            if !claims.iter().any(|c| *c.name == *rc.name) {
                return Err(err(
                    format!("containers[{ci}].resources.claims[{k}].name"),
                    format!(
                        "Not found: {:?}: must match the name of an entry in `spec.resourceClaims`",
                        rc.name
                    ),
                ));
            }
        }
    }
    let statuses = status
        .and_then(|s| s.resource_claim_statuses.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|s| PodClaimStatus {
            name: s.name.as_str().into(),
            claim: s.resource_claim_name.as_deref().map(Arc::from),
        })
        .collect();
    Ok((claims.into(), statuses))
}
