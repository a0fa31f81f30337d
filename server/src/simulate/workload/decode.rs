//! Each op of a test case's `workloadTemplate` decoded into the workload's model,
//! with its `$params` resolved and its templates read.

use super::*;

/// The ops of `case` for workload `w` (its params marked in `used` as they are read).
pub(super) fn decode_ops(
    case: &TestCaseFile,
    ci: usize,
    w: &WorkloadFile,
    files: &Files,
    used: &mut Vec<String>,
) -> Result<Vec<Op>, WorkloadError> {
    let mut ops = Vec::new();
    for (i, raw) in case.workload_template.iter().enumerate() {
        let field = format!("[{ci}].workloadTemplate[{i}]");
        let opcode = raw
            .get("opcode")
            .and_then(|o| o.as_str())
            .ok_or_else(|| werr(files.file, format!("{field}.opcode"), "Required value"))?;
        let op = match opcode {
            "createNodes" => {
                let f: CreateNodesFile = decode_op(raw, files.file, &field)?;
                let count = param_usize(
                    f.count,
                    f.count_param.as_ref(),
                    &w.params,
                    used,
                    files.file,
                    &field,
                )?;
                let params = resolve_template_params(
                    &f.template_params,
                    &w.params,
                    used,
                    files.file,
                    &format!("{field}.templateParams"),
                )?;
                let template = match &f.node_template_path {
                    Some(t) => files.template(
                        t,
                        params,
                        &format!("{field}.nodeTemplatePath"),
                    )?,
                    None => Template::Fixed(Box::new(base_node(i))),
                };
                let labels = match (
                    &f.label_node_prepare_strategy,
                    &f.unique_node_label_strategy,
                ) {
                    (Some(l), _) => {
                        if l.label_values.is_empty() {
                            return Err(werr(
                                files.file,
                                format!("{field}.labelNodePrepareStrategy.labelValues"),
                                "Required value",
                            ));
                        }
                        Some(NodeLabels::RoundRobin {
                            key: l.label_key.clone(),
                            values: l.label_values.clone(),
                        })
                    }
                    (None, Some(u)) => Some(NodeLabels::Unique {
                        key: u.label_key.clone(),
                    }),
                    (None, None) => None,
                };
                let mut allocatable = BTreeMap::new();
                if let Some(a) = &f.node_allocatable_strategy {
                    for (k, v) in &a.node_allocatable {
                        let s = match v {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        allocatable.insert(k.clone(), s);
                    }
                }
                Op::CreateNodes {
                    count,
                    template,
                    labels,
                    allocatable,
                }
            }
            "createNamespaces" => {
                let f: CreateNamespacesFile = decode_op(raw, files.file, &field)?;
                let count = param_usize(
                    f.count,
                    f.count_param.as_ref(),
                    &w.params,
                    used,
                    files.file,
                    &field,
                )?;
                let template = match &f.namespace_template_path {
                    Some(t) => match files.template::<core::Namespace>(t, BTreeMap::new(), &field)? {
                        Template::Fixed(ns) => Some(ns),
                        Template::PerIndex { .. } => {
                            return Err(werr(
                                files.file,
                                format!("{field}.namespaceTemplatePath"),
                                "namespace templates are not rendered; remove template actions",
                            ))
                        }
                    },
                    None => None,
                };
                Op::CreateNamespaces {
                    prefix: f.prefix,
                    count,
                    template,
                }
            }
            "createPods" => {
                let f: CreatePodsFile = decode_op(raw, files.file, &field)?;
                let namespace = f.namespace.clone().unwrap_or_else(|| format!("namespace-{}", ops.len()));
                create_pods_op(f, namespace, case, w, files, used, &field)?
            }
            "createPodSets" => {
                let f: CreatePodSetsFile = decode_op(raw, files.file, &field)?;
                let count =
                    param_usize(f.count, f.count_param.as_ref(), &w.params, used, files.file, &field)?;
                // Unrolled before the run, as upstream does: `count` createPods ops,
                // the i-th in namespace `<namespacePrefix>-<i>`.
                for k in 0..count {
                    let inner = format!("{field}.createPodsOp");
                    let p: CreatePodsFile = decode_op(&f.create_pods_op, files.file, &inner)?;
                    let ns = format!("{}-{k}", f.namespace_prefix);
                    ops.push(create_pods_op(p, ns, case, w, files, used, &inner)?);
                }
                continue;
            }
            "createAny" => {
                let f: CreateAnyFile = decode_op(raw, files.file, &field)?;
                let count = param_usize(
                    f.count.or(Some(1)),
                    f.count_param.as_ref(),
                    &w.params,
                    used,
                    files.file,
                    &field,
                )?;
                let params = resolve_template_params(&f.template_params, &w.params, used, files.file, &format!("{field}.templateParams"))?;
                let tfield = format!("{field}.templatePath");
                kind_before_rendering(files, &f.template_path, &tfield)?;
                let template: Template<Value> = files.template(&f.template_path, params, &tfield)?;
                let kind = any_kind(&template, files.file, &tfield)?;
                check_namespace(&kind, f.namespace.as_deref(), files.file, &field)?;
                Op::CreateAny {
                    count,
                    namespace: f.namespace,
                    template,
                }
            }
            "updateAny" => {
                let f: UpdateAnyFile = decode_op(raw, files.file, &field)?;
                let count = param_usize(
                    f.count.or(Some(1)),
                    f.count_param.as_ref(),
                    &w.params,
                    used,
                    files.file,
                    &field,
                )?;
                let tfield = format!("{field}.templatePath");
                let template: Template<Value> = files.template(&f.template_path, BTreeMap::new(), &tfield)?;
                let kind = any_kind(&template, files.file, &tfield)?;
                if kind != "Pod" && kind != "Node" {
                    return Err(werr(files.file, &tfield, format!("updateAny of {kind} objects is not supported; Switchyard updates Pods and Nodes")));
                }
                check_namespace(&kind, f.namespace.as_deref(), files.file, &field)?;
                for (j, sub) in f.subresources.iter().enumerate() {
                    match (kind.as_str(), sub.as_str()) {
                        ("Pod", "resize") | (_, "status") => {}
                        _ => return Err(werr(files.file, format!("{field}.subresources[{j}]"), format!("{sub:?} is not a subresource of {kind} that updateAny can write (Pod: resize, status)"))),
                    }
                }
                let per_second = f.update_per_second.unwrap_or(0.0);
                if !per_second.is_finite() || per_second < 0.0 {
                    return Err(werr(files.file, format!("{field}.updatePerSecond"), format!("{per_second} must be 0 (no pacing) or more")));
                }
                Op::UpdateAny {
                    count,
                    namespace: f.namespace,
                    template,
                    per_second,
                }
            }
            "createResourceDriver" => {
                let f: CreateResourceDriverFile = decode_op(raw, files.file, &field)?;
                let devices = param_usize(
                    f.max_claims_per_node,
                    f.max_claims_per_node_param.as_ref(),
                    &w.params,
                    used,
                    files.file,
                    &format!("{field}.maxClaimsPerNode"),
                )?;
                if devices == 0 || devices > crate::model::convert::RESOURCE_SLICE_MAX_DEVICES {
                    return Err(werr(files.file, format!("{field}.maxClaimsPerNode"), format!("{devices} must be between 1 and {} (the devices of one ResourceSlice)", crate::model::convert::RESOURCE_SLICE_MAX_DEVICES)));
                }
                Op::CreateResourceDriver {
                    driver: f.driver_name,
                    nodes: f.nodes,
                    devices,
                }
            }
            "allocResourceClaims" => {
                let f: AllocResourceClaimsFile = decode_op(raw, files.file, &field)?;
                Op::AllocResourceClaims {
                    namespace: f.namespace,
                }
            }
            op @ "updateDeviceConditions" => {
                return Err(werr(
                    files.file,
                    format!("{field}.opcode"),
                    format!("{op} is not supported yet by Switchyard's Dynamic Resource Allocation (device binding conditions)"),
                ))
            }
            op @ ("createPodGroups" | "createCompositePodGroups" | "waitForPodGroups") => {
                return Err(werr(
                    files.file,
                    format!("{field}.opcode"),
                    format!("{op} needs the Workload API's pod groups (gang scheduling, alpha in v1.36), which Switchyard does not have"),
                ))
            }
            "barrier" => {
                let _: BarrierFile = decode_op(raw, files.file, &field)?;
                Op::Barrier
            }
            "sleep" => {
                let f: SleepFile = decode_op(raw, files.file, &field)?;
                Op::Sleep(duration_of(
                    f.duration.as_deref(),
                    f.duration_param.as_deref(),
                    w,
                    used,
                    files,
                    &field,
                )?)
            }
            "deletePods" => {
                let f: DeletePodsFile = decode_op(raw, files.file, &field)?;
                if f.delete_pods_per_second == Some(0) {
                    return Err(werr(
                        files.file,
                        format!("{field}.deletePodsPerSecond"),
                        "must be greater than 0 (leave it out to delete at once)",
                    ));
                }
                Op::DeletePods {
                    namespace: f.namespace,
                    selector: f.label_selector,
                    per_second: f.delete_pods_per_second,
                    skip_wait: f.skip_wait_to_completion,
                }
            }
            "churn" => {
                let f: ChurnFile = decode_op(raw, files.file, &field)?;
                let mode = match f.mode.as_str() {
                    "create" => ChurnMode::Create,
                    "recreate" => ChurnMode::Recreate,
                    other => {
                        return Err(werr(
                            files.file,
                            format!("{field}.mode"),
                            format!("{other:?} is not a churn mode; use create or recreate"),
                        ))
                    }
                };
                if f.number > MAX_OBJECTS_PER_OP {
                    return Err(werr(
                        files.file,
                        format!("{field}.number"),
                        format!(
                            "{} is over the limit of {MAX_OBJECTS_PER_OP} objects per op",
                            f.number
                        ),
                    ));
                }
                if mode == ChurnMode::Recreate && f.number == 0 {
                    return Err(werr(
                        files.file,
                        format!("{field}.number"),
                        "must be greater than 0 in recreate mode",
                    ));
                }
                if f.template_paths.is_empty() {
                    return Err(werr(
                        files.file,
                        format!("{field}.templatePaths"),
                        "Required value",
                    ));
                }
                let mut templates = Vec::with_capacity(f.template_paths.len());
                for (j, t) in f.template_paths.iter().enumerate() {
                    let tfield = format!("{field}.templatePaths[{j}]");
                    templates.push(files.churn_object(Path::new(t), &tfield)?);
                }
                Op::Churn {
                    mode,
                    number: f.number,
                    interval: Duration::from_millis(f.interval_milliseconds.unwrap_or(500).max(1)),
                    namespace: f.namespace.unwrap_or_else(|| format!("namespace-{}", ops.len())),
                    templates,
                }
            }
            "startCollectingMetrics" => {
                let f: MetricsFile = decode_op(raw, files.file, &field)?;
                Op::StartCollectingMetrics {
                    namespaces: f.namespaces,
                    labels: f.label_selector.unwrap_or_default(),
                }
            }
            "stopCollectingMetrics" => {
                let _: MetricsFile = decode_op(raw, files.file, &field)?;
                Op::StopCollectingMetrics
            }
            other => {
                return Err(werr(
                    files.file,
                    format!("{field}.opcode"),
                    format!(
                        "{other:?} is not supported by switchyard simulate; supported: {}",
                        SUPPORTED_OPS.join(", ")
                    ),
                ))
            }
        };
        ops.push(op);
    }
    Ok(ops)
}

/// A createPods op (also each copy a createPodSets unrolls).
fn create_pods_op(
    f: CreatePodsFile,
    namespace: String,
    case: &TestCaseFile,
    w: &WorkloadFile,
    files: &Files,
    used: &mut Vec<String>,
    field: &str,
) -> Result<Op, WorkloadError> {
    let steady_on = match &f.steady_state_param {
        Some(p) => {
            let key = p.trim_start_matches('$');
            used.push(key.to_string());
            w.params.get(key).and_then(|v| v.as_bool()).ok_or_else(|| {
                werr(
                    files.file,
                    format!("{field}.steadyStateParam"),
                    format!("parameter {key} must be true or false"),
                )
            })?
        }
        None => f.steady_state,
    };
    let steady = if steady_on {
        Some(duration_of(
            f.duration.as_deref(),
            f.duration_param.as_deref(),
            w,
            used,
            files,
            field,
        )?)
    } else if f.duration.is_some() || f.duration_param.is_some() {
        // Upstream reads the duration only in steady state; a parameter may turn it off.
        if let Some(p) = &f.duration_param {
            used.push(p.trim_start_matches('$').to_string());
        }
        None
    } else {
        None
    };
    if steady.is_some()
        && (f.skip_wait_to_completion || f.persistent_volume_template_path.is_some())
    {
        return Err(werr(
            files.file,
            format!("{field}.steadyState"),
            "steadyState cannot be used with skipWaitToCompletion or volume templates",
        ));
    }
    let count = param_usize(
        f.count,
        f.count_param.as_ref(),
        &w.params,
        used,
        files.file,
        field,
    )?;
    if f.collect_metrics && f.skip_wait_to_completion {
        return Err(werr(
            files.file,
            field,
            "collectMetrics and skipWaitToCompletion cannot be used together",
        ));
    }
    if f.nominated_node_name.is_some() && f.skip_wait_to_completion {
        return Err(werr(
            files.file,
            field,
            "nominatedNodeName and skipWaitToCompletion cannot be used together",
        ));
    }
    let template_path = f
        .pod_template_path
        .as_ref()
        .or(case.default_pod_template_path.as_ref());
    let params = resolve_template_params(
        &f.template_params,
        &w.params,
        used,
        files.file,
        &format!("{field}.templateParams"),
    )?;
    let template = match template_path {
        Some(t) => files.template(t, params, &format!("{field}.podTemplatePath"))?,
        None => Template::Fixed(Box::new(base_pod())),
    };
    // Upstream labels pods from a template only (the built-in pod is left alone).
    let batch = match (&f.signature_batch_size_param, f.signature_batch_size) {
        (Some(_), _) => param_usize(
            None,
            f.signature_batch_size_param.as_ref(),
            &w.params,
            used,
            files.file,
            &format!("{field}.signatureBatchSize"),
        )?,
        (None, n) => n.unwrap_or(1),
    };
    let signature_batch = template_path.is_some().then_some(batch.max(1));
    let volumes = match (
        &f.persistent_volume_claim_template_path,
        &f.persistent_volume_template_path,
    ) {
        (Some(c), pv) => Some(Box::new(PodVolumes {
            claim: files.object(c, &format!("{field}.persistentVolumeClaimTemplatePath"))?,
            volume: match pv {
                Some(v) => Some(files.object(v, &format!("{field}.persistentVolumeTemplatePath"))?),
                None => None,
            },
        })),
        (None, Some(_)) => {
            return Err(werr(
                files.file,
                format!("{field}.persistentVolumeClaimTemplatePath"),
                "Required value: a persistentVolumeTemplatePath needs a claim template",
            ))
        }
        (None, None) => None,
    };
    Ok(Op::CreatePods {
        count,
        namespace,
        template,
        skip_wait: f.skip_wait_to_completion,
        collect_metrics: f.collect_metrics,
        signature_batch,
        volumes,
        nominated_node_name: f.nominated_node_name,
        steady,
    })
}

/// The kind a createAny/updateAny template renders (index 0), refused when
/// Switchyard has no such kind, naming the feature it belongs to.
fn any_kind(t: &Template<Value>, file: &Path, field: &str) -> Result<String, WorkloadError> {
    let v = t.instantiate(0, 1).map_err(|m| werr(file, field, m))?;
    let kind = v["kind"].as_str().unwrap_or_default().to_string();
    let kind = known_kind(kind, file, field)?;
    if crate::cluster::manifest::DRA_KINDS.contains(&kind.as_str()) {
        let version = v["apiVersion"].as_str().unwrap_or_default();
        if version != "resource.k8s.io/v1" && version != "resource.k8s.io/v1beta2" {
            return Err(werr(file, field, format!("{kind} in {version:?}: Switchyard's Dynamic Resource Allocation reads resource.k8s.io/v1 (and v1beta2, the same schema)")));
        }
    }
    unsupported_dra_feature(&kind, &v, file, field)?;
    Ok(kind)
}

/// A DRA object using a feature Switchyard's DRA lacks (consumable capacity,
/// binding conditions, ...) is refused when the workload loads, naming it, rather
/// than midway through the run.
fn unsupported_dra_feature(
    kind: &str,
    v: &Value,
    file: &Path,
    field: &str,
) -> Result<(), WorkloadError> {
    use crate::model::convert as c;
    // v1beta2 is read as v1 (the same schema).
    let mut v = v.clone();
    v["apiVersion"] = Value::String("resource.k8s.io/v1".into());
    let v = &v;
    let err = match kind {
        "DeviceClass" => serde_json::from_value(v.clone())
            .ok()
            .and_then(|o| c::device_class_from_k8s(&o).err()),
        "ResourceSlice" => serde_json::from_value(v.clone()).ok().and_then(|o| {
            c::resource_slice_from_k8s(&o)
                .and_then(|s| crate::cluster::embedded_dra::refuse_unattended(&s))
                .err()
        }),
        "ResourceClaim" => serde_json::from_value(v.clone())
            .ok()
            .and_then(|o| c::resource_claim_from_k8s(&o, String::new).err()),
        "ResourceClaimTemplate" => serde_json::from_value(v.clone())
            .ok()
            .and_then(|o| c::resource_claim_template_from_k8s(&o).err()),
        _ => None,
    };
    match err {
        Some(e) if e.message.contains("not supported yet") => Err(werr(
            file,
            field,
            format!("{kind}: {e} (Dynamic Resource Allocation in Switchyard: docs/dra.md)"),
        )),
        _ => Ok(()),
    }
}

/// The kind a template's text names on a top-level `kind:` line, checked before
/// the template is rendered: a kind Switchyard lacks is named as such even when
/// its template uses actions Switchyard does not render.
fn kind_before_rendering(files: &Files, rel: &str, field: &str) -> Result<(), WorkloadError> {
    let Ok(path) = files.confined(Path::new(rel), field) else {
        return Ok(()); // reported by the template read that follows
    };
    let Ok(text) = read_template_text(&path, files.file, field, files.max_bytes) else {
        return Ok(());
    };
    let kind = text
        .lines()
        .find_map(|l| l.strip_prefix("kind:"))
        .map(|k| k.trim().trim_matches(['"', '\'']).to_string());
    match kind {
        Some(k) if !k.contains("{{") => known_kind(k, files.file, field).map(|_| ()),
        _ => Ok(()),
    }
}

fn known_kind(kind: String, file: &Path, field: &str) -> Result<String, WorkloadError> {
    match kind.as_str() {
        "" => Err(werr(file, field, "Required value: the template must name its kind")),
        "DeviceTaintRule" => Err(werr(
            file,
            field,
            format!("{kind} objects (Dynamic Resource Allocation's DRADeviceTaintRules, beta and off by default in v1.36) are not supported by Switchyard"),
        )),
        "PodGroup" | "Workload" | "CompositePodGroup" => Err(werr(
            file,
            field,
            format!("{kind} objects belong to the Workload API (gang scheduling, alpha in v1.36), which Switchyard does not have"),
        )),
        k if crate::cluster::manifest::KINDS.contains(&k) => Ok(kind),
        _ => Err(werr(
            file,
            field,
            format!("{kind} is not a kind Switchyard reads; it reads {}", crate::cluster::manifest::KINDS.join(", ")),
        )),
    }
}

/// Namespaced kinds need a namespace, cluster-scoped ones must have none (as
/// upstream's createAny insists).
fn check_namespace(
    kind: &str,
    ns: Option<&str>,
    file: &Path,
    field: &str,
) -> Result<(), WorkloadError> {
    let namespaced = crate::cluster::manifest::NAMESPACED_KINDS.contains(&kind);
    match (namespaced, ns) {
        (true, None) => Err(werr(
            file,
            format!("{field}.namespace"),
            format!("Required value: {kind} objects are namespaced"),
        )),
        (false, Some(_)) => Err(werr(
            file,
            format!("{field}.namespace"),
            format!("{kind} objects are cluster-scoped: remove the namespace"),
        )),
        _ => Ok(()),
    }
}

/// A `duration` or `durationParam` (Go's duration syntax).
fn duration_of(
    duration: Option<&str>,
    param: Option<&str>,
    w: &WorkloadFile,
    used: &mut Vec<String>,
    files: &Files,
    field: &str,
) -> Result<std::time::Duration, WorkloadError> {
    let text = match (duration, param) {
        (_, Some(p)) => {
            let key = p.trim_start_matches('$');
            used.push(key.to_string());
            w.params
                .get(key)
                .and_then(|v| v.as_str().map(str::to_string))
                .ok_or_else(|| {
                    werr(
                        files.file,
                        format!("{field}.durationParam"),
                        format!("parameter {key} must be a duration string"),
                    )
                })?
        }
        (Some(d), None) => d.to_string(),
        (None, None) => {
            return Err(werr(
                files.file,
                format!("{field}.duration"),
                "Required value",
            ))
        }
    };
    crate::config::parse_go_duration(&text).ok_or_else(|| {
        werr(
            files.file,
            format!("{field}.duration"),
            format!("{text:?} is not a duration such as \"5s\""),
        )
    })
}
