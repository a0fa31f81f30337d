//! DRA's device side: DeviceClasses and ResourceSlices with their devices, validated
//! as the API server validates them (limits and helpers shared with claims in
//! [`super::dra`]).

use k8s_openapi::api::resource::v1 as resource;
use switchyard_cel::{AttributeValue as CelAttribute, Quantity as CelQuantity, Semver};

use super::dra::{
    compile_selectors, dns_label, dns_subdomain, opaque, qualified_name, required, taint_effect,
    too_many, ATTRIBUTES_AND_CAPACITIES_MAX, BINDING_CONDITIONS_MAX, DEVICE_CONFIG_MAX,
    DEVICE_TAINTS_MAX, RESOURCE_SLICE_MAX_DEVICES,
    RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_COUNTERS, SHARED_COUNTERS_MAX,
};
use super::*;
use crate::model::dra::{
    qualify, AttributeValue, CounterConsumption, CounterSet, Device, DeviceClass, DeviceTaint,
    NodeSelection, NodeSelectorRef, PoolRef, ResourceSlice,
};

/// A DeviceClass.
pub fn device_class_from_k8s(c: &resource::DeviceClass) -> Result<DeviceClass> {
    let name = super::storage::storage_name(&c.metadata, "DeviceClass")?;
    dns_subdomain("metadata.name", &name)?;
    let default_spec = resource::DeviceClassSpec::default();
    let spec = c.spec.as_ref().unwrap_or(&default_spec);
    let cfgs = spec.config.as_deref().unwrap_or_default();
    if cfgs.len() > DEVICE_CONFIG_MAX {
        return Err(too_many("spec.config", cfgs.len(), DEVICE_CONFIG_MAX));
    }
    let config = cfgs
        .iter()
        .enumerate()
        .map(|(i, c)| opaque(c.opaque.as_ref(), &format!("spec.config[{i}]")))
        .collect::<Result<_>>()?;
    // Upstream `validateDeviceClassSpec`: a qualified name that is an extended
    // resource name (a domain other than kubernetes.io, no `requests.` prefix).
    if let Some(n) = spec.extended_resource_name.as_deref() {
        if !crate::model::labels::is_qualified_name(n)
            || !crate::model::resource::is_extended_resource_name(n)
        {
            return Err(err(
                "spec.extendedResourceName",
                format!("Invalid value: {n:?}: must be a valid extended resource name (a qualified name with a domain other than kubernetes.io, such as example.com/gpu)"),
            ));
        }
    }
    Ok(DeviceClass {
        name,
        selectors: compile_selectors(spec.selectors.as_ref(), "spec.selectors")?,
        config,
        extended_resource_name: spec.extended_resource_name.as_deref().map(Arc::from),
        creation_timestamp: c.metadata.creation_timestamp.as_ref().map(parse_time),
        resource_version: c.metadata.resource_version.as_deref().map(Arc::from),
    })
}

fn node_selection(
    node_name: Option<&str>,
    selector: Option<&core::NodeSelector>,
    all_nodes: Option<bool>,
    per_device: Option<bool>,
    field: &str,
) -> Result<Option<NodeSelection>> {
    let mut set = Vec::new();
    if let Some(n) = node_name.filter(|n| !n.is_empty()) {
        set.push(NodeSelection::NodeName(n.into()));
    }
    if let Some(s) = selector {
        if s.node_selector_terms.len() != 1 {
            return Err(err(
                format!("{field}.nodeSelector.nodeSelectorTerms"),
                "Invalid value: must have exactly one node selector term",
            ));
        }
        set.push(NodeSelection::Selector(Arc::new(NodeSelectorRef {
            selector: node_selector_from_k8s(s, field),
            raw: serde_json::to_value(s).unwrap_or_default(),
        })));
    }
    if all_nodes == Some(true) {
        set.push(NodeSelection::AllNodes);
    }
    if per_device == Some(true) {
        set.push(NodeSelection::PerDevice);
    }
    match set.len() {
        0 => Ok(None),
        1 => Ok(set.pop()),
        _ => Err(err(field, "Invalid value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields are set")),
    }
}

fn counters(
    map: &BTreeMap<String, resource::Counter>,
    field: &str,
) -> Result<BTreeMap<Arc<str>, CelQuantity>> {
    map.iter()
        .map(|(k, v)| {
            dns_label(&format!("{field}[{k}]"), k)?;
            let q = CelQuantity::parse(&v.value.0).map_err(|e| {
                err(
                    format!("{field}[{k}].value"),
                    format!("Invalid value: {:?}: {e}", v.value.0),
                )
            })?;
            Ok((Arc::from(k.as_str()), q))
        })
        .collect()
}

fn device_from_k8s(
    d: &resource::Device,
    driver: &str,
    per_device: bool,
    field: &str,
) -> Result<Device> {
    dns_label(&format!("{field}.name"), &d.name)?;
    let attrs = d.attributes.as_ref();
    let caps = d.capacity.as_ref();
    let n = attrs.map_or(0, |a| a.len()) + caps.map_or(0, |c| c.len());
    if n > ATTRIBUTES_AND_CAPACITIES_MAX {
        return Err(err(
            field,
            format!("Invalid value: {n}: the total number of attributes and capacities must not exceed {ATTRIBUTES_AND_CAPACITIES_MAX}"),
        ));
    }
    let mut attributes = BTreeMap::new();
    let mut cel_attrs = Vec::new();
    for (k, a) in attrs.into_iter().flatten() {
        let f = format!("{field}.attributes[{k}]");
        qualified_name(&f, k)?;
        let set = [
            a.int.is_some(),
            a.bool.is_some(),
            a.string.is_some(),
            a.version.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count()
            + [
                a.ints.is_some(),
                a.bools.is_some(),
                a.strings.is_some(),
                a.versions.is_some(),
            ]
            .iter()
            .filter(|b| **b)
            .count();
        if set != 1 {
            return Err(err(
                &f,
                "Invalid value: exactly one value must be specified",
            ));
        }
        let (value, cel) = if let Some(i) = a.int {
            (AttributeValue::Int(i), CelAttribute::Int(i))
        } else if let Some(b) = a.bool {
            (AttributeValue::Bool(b), CelAttribute::Bool(b))
        } else if let Some(s) = &a.string {
            if s.len() > 64 {
                return Err(err(
                    format!("{f}.string"),
                    "Too long: may not be more than 64 bytes",
                ));
            }
            (
                AttributeValue::String(s.as_str().into()),
                CelAttribute::String(s.clone()),
            )
        } else if let Some(v) = &a.version {
            let parsed = Semver::parse(v)
                .map_err(|e| err(format!("{f}.version"), format!("Invalid value: {v:?}: must be a string compatible with semver.org spec 2.0.0: {e}")))?;
            let normal = v.split('+').next().unwrap_or(v);
            (
                AttributeValue::Version(normal.into()),
                CelAttribute::Version(parsed),
            )
        } else {
            return Err(err(
                &f,
                "not supported yet: list-typed attributes (DRAListTypeAttributes, alpha)",
            ));
        };
        let q = qualify(k, driver);
        cel_attrs.push((q.to_string(), cel));
        attributes.insert(q, value);
    }
    let mut capacity = BTreeMap::new();
    let mut capacity_info = BTreeMap::new();
    let mut cel_caps = Vec::new();
    let allow_multiple_allocations = d.allow_multiple_allocations.unwrap_or(false);
    for (k, c) in caps.into_iter().flatten() {
        let f = format!("{field}.capacity[{k}]");
        qualified_name(&f, k)?;
        let q = CelQuantity::parse(&c.value.0).map_err(|e| {
            err(
                format!("{f}.value"),
                format!("Invalid value: {:?}: {e}", c.value.0),
            )
        })?;
        let name = qualify(k, driver);
        let info = request_policy(
            c.request_policy.as_ref(),
            q.nanos(),
            allow_multiple_allocations,
            &f,
            k,
        )?;
        cel_caps.push((name.to_string(), q));
        capacity.insert(name.clone(), q);
        capacity_info.insert(name, info);
    }
    let taints_in = d.taints.as_deref().unwrap_or_default();
    if taints_in.len() > DEVICE_TAINTS_MAX {
        return Err(too_many(
            &format!("{field}.taints"),
            taints_in.len(),
            DEVICE_TAINTS_MAX,
        ));
    }
    let taints = taints_in
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let f = format!("{field}.taints[{i}]");
            if t.key.is_empty() {
                return Err(required(&format!("{f}.key")));
            }
            Ok(DeviceTaint {
                key: t.key.as_str().into(),
                value: t.value.as_deref().unwrap_or("").into(),
                effect: taint_effect(&t.effect, &format!("{f}.effect"), true)?,
            })
        })
        .collect::<Result<Box<[_]>>>()?;
    let consumes = d.consumes_counters.as_deref().unwrap_or_default();
    let consumes_counters = consumes
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let f = format!("{field}.consumesCounters[{i}]");
            dns_label(&format!("{f}.counterSet"), &c.counter_set)?;
            Ok(CounterConsumption {
                counter_set: c.counter_set.as_str().into(),
                counters: counters(&c.counters, &format!("{f}.counters"))?,
            })
        })
        .collect::<Result<Box<[_]>>>()?;
    let nodes = node_selection(
        d.node_name.as_deref(),
        d.node_selector.as_ref(),
        d.all_nodes,
        None,
        field,
    )?;
    match (per_device, &nodes) {
        (true, None) => {
            return Err(err(field, "Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes` is required when `perDeviceNodeSelection` is set to true in the ResourceSliceSpec"))
        }
        (false, Some(_)) => {
            return Err(err(field, "Invalid value: `nodeName`, `nodeSelector` and `allNodes` can only be set when `perDeviceNodeSelection` is set to true in the ResourceSliceSpec"))
        }
        _ => {}
    }
    let (binding_conditions, binding_failure_conditions) = binding_parameters(
        d.binding_conditions.as_ref(),
        d.binding_failure_conditions.as_ref(),
        field,
    )?;
    Ok(Device {
        name: d.name.as_str().into(),
        cel: Arc::new(switchyard_cel::DeviceValue::new(
            driver,
            cel_attrs,
            cel_caps,
            d.allow_multiple_allocations,
        )),
        attributes,
        capacity,
        capacity_info,
        consumes_counters,
        taints,
        nodes,
        binds_to_node: d.binds_to_node.unwrap_or(false),
        binding: crate::model::dra::BindingConditions::new(
            binding_conditions,
            binding_failure_conditions,
        ),
        allow_multiple_allocations,
        matches: Default::default(),
    })
}

/// A device's binding conditions and binding failure conditions.
type ConditionLists = (Box<[Arc<str>]>, Box<[Arc<str>]>);

/// A device's `bindingConditions` and `bindingFailureConditions` as the API server
/// validates them (upstream `validateDeviceBindingParameters`): at most 4 each, label
/// names, no duplicates, no condition in both, and one list only with the other.
fn binding_parameters(
    conditions: Option<&Vec<String>>,
    failure: Option<&Vec<String>>,
    field: &str,
) -> Result<ConditionLists> {
    let list = |v: Option<&Vec<String>>, f: &str| -> Result<Box<[Arc<str>]>> {
        let v = v.map(Vec::as_slice).unwrap_or_default();
        if v.len() > BINDING_CONDITIONS_MAX {
            return Err(too_many(f, v.len(), BINDING_CONDITIONS_MAX));
        }
        for (i, c) in v.iter().enumerate() {
            if !crate::model::labels::is_qualified_name(c) {
                return Err(err(
                    format!("{f}[{i}]"),
                    format!("Invalid value: {c:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"),
                ));
            }
            if v[..i].contains(c) {
                return Err(err(format!("{f}[{i}]"), format!("Duplicate value: {c:?}")));
            }
        }
        Ok(v.iter().map(|s| Arc::from(s.as_str())).collect())
    };
    let cf = format!("{field}.bindingConditions");
    let ff = format!("{field}.bindingFailureConditions");
    let c = list(conditions, &cf)?;
    let f = list(failure, &ff)?;
    if let Some(x) = f.iter().find(|x| c.contains(x)) {
        return Err(err(
            ff,
            format!("Invalid value: {x:?}: bindingFailureConditions must not overlap with bindingConditions"),
        ));
    }
    match (c.is_empty(), f.is_empty()) {
        (true, false) => Err(err(
            cf,
            "Required value: bindingConditions are required to use bindingFailureConditions",
        )),
        (false, true) => Err(err(
            ff,
            "Required value: bindingFailureConditions are required to use bindingConditions",
        )),
        _ => Ok((c, f)),
    }
}

/// A ResourceSlice.
pub fn resource_slice_from_k8s(s: &resource::ResourceSlice) -> Result<ResourceSlice> {
    let name = super::storage::storage_name(&s.metadata, "ResourceSlice")?;
    let spec = &s.spec;
    dns_subdomain("spec.driver", &spec.driver)?;
    if spec.pool.name.is_empty() {
        return Err(required("spec.pool.name"));
    }
    for seg in spec.pool.name.split('/') {
        dns_subdomain("spec.pool.name", seg)?;
    }
    if spec.pool.generation < 0 {
        return Err(err(
            "spec.pool.generation",
            "Invalid value: must be greater than or equal to 0",
        ));
    }
    if spec.pool.resource_slice_count <= 0 {
        return Err(err(
            "spec.pool.resourceSliceCount",
            "Invalid value: must be greater than zero",
        ));
    }
    let nodes = node_selection(
        spec.node_name.as_deref(),
        spec.node_selector.as_ref(),
        spec.all_nodes,
        spec.per_device_node_selection,
        "spec",
    )?
    .ok_or_else(|| err("spec", "Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"))?;
    let per_device = matches!(nodes, NodeSelection::PerDevice);
    let devs = spec.devices.as_deref().unwrap_or_default();
    let heavy = devs.iter().any(|d| {
        d.taints.as_ref().is_some_and(|t| !t.is_empty())
            || d.consumes_counters.as_ref().is_some_and(|c| !c.is_empty())
    });
    let max = if heavy {
        RESOURCE_SLICE_MAX_DEVICES_WITH_TAINTS_OR_COUNTERS
    } else {
        RESOURCE_SLICE_MAX_DEVICES
    };
    if devs.len() > max {
        return Err(too_many("spec.devices", devs.len(), max));
    }
    let mut devices: Vec<Device> = Vec::with_capacity(devs.len());
    for (i, d) in devs.iter().enumerate() {
        let f = format!("spec.devices[{i}]");
        let dev = device_from_k8s(d, &spec.driver, per_device, &f)?;
        if devices.iter().any(|o| o.name == dev.name) {
            return Err(err(
                format!("{f}.name"),
                format!("Duplicate value: {:?}", d.name),
            ));
        }
        devices.push(dev);
    }
    let sets = spec.shared_counters.as_deref().unwrap_or_default();
    if sets.len() > SHARED_COUNTERS_MAX {
        return Err(too_many(
            "spec.sharedCounters",
            sets.len(),
            SHARED_COUNTERS_MAX,
        ));
    }
    let shared_counters = sets
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let f = format!("spec.sharedCounters[{i}]");
            dns_label(&format!("{f}.name"), &c.name)?;
            Ok(CounterSet {
                name: c.name.as_str().into(),
                counters: counters(&c.counters, &format!("{f}.counters"))?,
            })
        })
        .collect::<Result<Box<[_]>>>()?;
    Ok(ResourceSlice {
        name,
        driver: spec.driver.as_str().into(),
        pool: PoolRef {
            name: spec.pool.name.as_str().into(),
            generation: spec.pool.generation,
            resource_slice_count: spec.pool.resource_slice_count,
        },
        nodes,
        devices: devices.into(),
        shared_counters,
        resource_version: s.metadata.resource_version.as_deref().map(Arc::from),
    })
}

/// A capacity's `requestPolicy`, validated as the API server does
/// (`validateRequestPolicy`): only on a device allowing multiple allocations; one of
/// `validValues` (ascending, distinct, at most 10, within the capacity, `default`
/// among them) and `validRange` (`min` within the capacity, `default` and `max`
/// between `min` and the capacity, on a `step`); `default` required with either.
fn request_policy(
    p: Option<&resource::CapacityRequestPolicy>,
    value: i128,
    multi: bool,
    field: &str,
    raw: &str,
) -> Result<crate::model::dra::CapacityInfo> {
    let mut info = crate::model::dra::CapacityInfo {
        raw_name: raw.into(),
        ..Default::default()
    };
    let Some(p) = p else {
        return Ok(info);
    };
    let f = format!("{field}.requestPolicy");
    if !multi {
        return Err(err(&f, "Forbidden: allowMultipleAllocations must be true"));
    }
    let q = |v: &K8sQuantity, f: &str| -> Result<i128> {
        CelQuantity::parse(&v.0)
            .map(|q| q.nanos())
            .map_err(|e| err(f, format!("Invalid value: {:?}: {e}", v.0)))
    };
    info.default = p
        .default
        .as_ref()
        .map(|d| q(d, &format!("{f}.default")))
        .transpose()?;
    let values = p.valid_values.as_deref().unwrap_or_default();
    if !values.is_empty() && p.valid_range.is_some() {
        return Err(err(
            &f,
            "Forbidden: only one of validValues or validRange may be set",
        ));
    }
    if (!values.is_empty() || p.valid_range.is_some()) && info.default.is_none() {
        return Err(err(
            format!("{f}.default"),
            "Required value: required when validValues or validRange is set",
        ));
    }
    if values.len() > 10 {
        return Err(too_many(&format!("{f}.validValues"), values.len(), 10));
    }
    let mut vs = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        let vf = format!("{f}.validValues[{i}]");
        let n = q(v, &vf)?;
        if n > value {
            return Err(err(
                &vf,
                format!(
                    "Invalid value: {:?}: must be less than or equal to the capacity value",
                    v.0
                ),
            ));
        }
        if vs.last().is_some_and(|l| *l >= n) {
            return Err(err(
                &vf,
                format!(
                    "Invalid value: {:?}: must be sorted in ascending order without duplicates",
                    v.0
                ),
            ));
        }
        vs.push(n);
    }
    if !vs.is_empty() && info.default.is_some_and(|d| !vs.contains(&d)) {
        return Err(err(
            format!("{f}.default"),
            "Invalid value: must be one of the validValues",
        ));
    }
    info.valid_values = vs.into();
    if let Some(r) = &p.valid_range {
        let rf = format!("{f}.validRange");
        let min = q(&r.min, &format!("{rf}.min"))?;
        if min > value {
            return Err(err(
                format!("{rf}.min"),
                "Invalid value: must be less than or equal to the capacity value",
            ));
        }
        let max = r
            .max
            .as_ref()
            .map(|m| q(m, &format!("{rf}.max")))
            .transpose()?;
        let step = r
            .step
            .as_ref()
            .map(|s| q(s, &format!("{rf}.step")))
            .transpose()?;
        if let Some(m) = max {
            if m < min || m > value {
                return Err(err(
                    format!("{rf}.max"),
                    "Invalid value: must be between min and the capacity value",
                ));
            }
        }
        if let Some(d) = info.default {
            if d < min || max.is_some_and(|m| d > m) {
                return Err(err(
                    format!("{f}.default"),
                    "Invalid value: must be within validRange",
                ));
            }
            if let Some(st) = step.filter(|s| *s > 0) {
                if (d - min) % st != 0 {
                    return Err(err(
                        format!("{f}.default"),
                        "Invalid value: must be min plus a multiple of step",
                    ));
                }
            }
        }
        if step.is_some_and(|s| s <= 0) {
            return Err(err(
                format!("{rf}.step"),
                "Invalid value: must be greater than zero",
            ));
        }
        info.valid_range = Some((min, max, step));
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(c: &[&str], f: &[&str]) -> std::result::Result<(), String> {
        let v = |x: &[&str]| (!x.is_empty()).then(|| x.iter().map(|s| s.to_string()).collect());
        binding_parameters(v(c).as_ref(), v(f).as_ref(), "spec.devices[0]")
            .map(|_| ())
            .map_err(|e| format!("{}: {}", e.field, e.message))
    }

    /// Upstream `validateDeviceBindingParameters`, rule by rule.
    #[test]
    fn binding_conditions_are_validated_as_the_api_server_does() {
        assert_eq!(check(&[], &[]), Ok(()));
        assert_eq!(check(&["Attached"], &["example.com/Failed"]), Ok(()));
        let e = check(&["Attached"], &[]).unwrap_err();
        assert!(
            e.starts_with("spec.devices[0].bindingFailureConditions: Required value"),
            "{e}"
        );
        let e = check(&[], &["Failed"]).unwrap_err();
        assert!(
            e.starts_with("spec.devices[0].bindingConditions: Required value"),
            "{e}"
        );
        let e = check(&["A", "A"], &["F"]).unwrap_err();
        assert_eq!(
            e,
            "spec.devices[0].bindingConditions[1]: Duplicate value: \"A\""
        );
        let e = check(&["A"], &["A"]).unwrap_err();
        assert!(e.contains("must not overlap with bindingConditions"), "{e}");
        let e = check(&["not a name"], &["F"]).unwrap_err();
        assert!(
            e.starts_with("spec.devices[0].bindingConditions[0]: Invalid value"),
            "{e}"
        );
        let e = check(&["A", "B", "C", "D", "E"], &["F"]).unwrap_err();
        assert!(
            e.starts_with("spec.devices[0].bindingConditions: Too many"),
            "{e}"
        );
    }
}
