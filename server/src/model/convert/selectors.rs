//! Label and node selectors, affinity terms, topology spread constraints and tolerations, as pods and nodes carry them.

use super::*;

/// Checks a pod's node affinity terms as strictly as the scheduler reads them
/// (upstream `nodeaffinity.NewNodeSelector` / `NewPreferredSchedulingTerms`). The API
/// server lets through values no label selector can hold; upstream then fails every
/// attempt at PreScore (preferred terms) or matches no node (required terms), retrying
/// forever. A manifest has no API server in front of it, so the embedded cluster
/// refuses such a pod at load time, naming the field.
/// API-server validation of a label map (`ValidateLabels`): qualified-name keys and
/// valid label values, refused with upstream's words.
pub fn validate_labels(
    labels: Option<&std::collections::BTreeMap<String, String>>,
    field: &str,
) -> Result<()> {
    const NAME: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    for (k, v) in labels.into_iter().flatten() {
        if !crate::model::labels::is_qualified_name(k) {
            return Err(err(
                field,
                format!("Invalid value: {k:?}: {NAME}; a prefix, if any, must be a DNS subdomain of at most 253 characters and the name part at most 63"),
            ));
        }
        if !crate::model::labels::is_valid_label_value(v) {
            return Err(err(
                field,
                format!("Invalid value: {v:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?'), at most 63 characters"),
            ));
        }
    }
    Ok(())
}

/// Compiles a `metav1.LabelSelector`; `None` (a nil selector) matches nothing.
pub fn label_selector(sel: Option<&meta::LabelSelector>, field: &str) -> Result<LabelSelector> {
    let Some(sel) = sel else {
        return Ok(LabelSelector::Nothing);
    };
    Ok(LabelSelector::Requirements(
        selector_requirements(sel, field)?.into(),
    ))
}

pub(super) fn selector_requirements(
    sel: &meta::LabelSelector,
    field: &str,
) -> Result<Vec<Requirement>> {
    let mut reqs = Vec::new();
    for (k, v) in sel.match_labels.iter().flatten() {
        reqs.push(
            Requirement::new(k, Operator::In, vec![v.clone()])
                .map_err(|m| err(format!("{field}.matchLabels.{k}"), m))?,
        );
    }
    for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
        let f = format!("{field}.matchExpressions[{i}]");
        let op = match e.operator.as_str() {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            other => {
                return Err(err(
                    format!("{f}.operator"),
                    format!("{other:?} is not a valid label selector operator: use In, NotIn, Exists or DoesNotExist"),
                ))
            }
        };
        reqs.push(
            Requirement::new(&e.key, op, e.values.clone().unwrap_or_default())
                .map_err(|m| err(&f, m))?,
        );
    }
    Ok(reqs)
}

/// Converts a required node selector. Invalid terms are kept but never match, as
/// upstream's lazy-error node selector treats them.
pub fn node_selector_from_k8s(sel: &core::NodeSelector, _field: &str) -> NodeSelector {
    NodeSelector {
        terms: sel
            .node_selector_terms
            .iter()
            .map(node_selector_term_from_k8s)
            .collect(),
    }
}

pub fn node_selector_term_from_k8s(t: &core::NodeSelectorTerm) -> NodeSelectorTerm {
    let mut valid = true;
    let mut exprs = Vec::new();
    for e in t.match_expressions.iter().flatten() {
        match Operator::parse(&e.operator).ok_or(()).and_then(|op| {
            Requirement::new(&e.key, op, e.values.clone().unwrap_or_default()).map_err(|_| ())
        }) {
            Ok(r) => exprs.push(r),
            Err(()) => valid = false,
        }
    }
    let mut fields = Vec::new();
    let mut name_pins: Option<Vec<Box<str>>> = None;
    for f in t.match_fields.iter().flatten() {
        let values = f.values.as_deref().unwrap_or_default();
        let op = Operator::parse(&f.operator);
        if f.key == NODE_FIELD_NAME && op == Some(Operator::In) {
            let set: Vec<Box<str>> = values.iter().map(|v| v.as_str().into()).collect();
            name_pins = Some(match name_pins {
                None => set,
                Some(prev) => prev.into_iter().filter(|n| set.contains(n)).collect(),
            });
        }
        match op {
            Some(op @ (Operator::In | Operator::NotIn)) if values.len() == 1 => {
                fields.push(Requirement::field(&f.key, op, &values[0]));
            }
            _ => valid = false,
        }
    }
    NodeSelectorTerm {
        match_expressions: exprs.into(),
        match_fields: fields.into(),
        name_pins: name_pins.map(|mut v| {
            v.sort();
            v.dedup();
            v.into()
        }),
        valid,
    }
}

pub(super) fn affinity_term(
    t: &core::PodAffinityTerm,
    own_ns: &Arc<str>,
    pod_labels: &Labels,
    field: &str,
) -> Result<AffinityTerm> {
    if t.topology_key.is_empty() {
        return Err(err(
            format!("{field}.topologyKey"),
            "required: can not be empty",
        ));
    }
    let mut selector =
        label_selector(t.label_selector.as_ref(), &format!("{field}.labelSelector"))?;
    // The API server merges matchLabelKeys / mismatchLabelKeys into the selector at pod
    // creation; do the same for manifests (idempotent for API objects).
    if let LabelSelector::Requirements(reqs) = &mut selector {
        let mut v = reqs.to_vec();
        for (keys, op) in [
            (&t.match_label_keys, Operator::In),
            (&t.mismatch_label_keys, Operator::NotIn),
        ] {
            for k in keys.iter().flatten() {
                if let Some(val) = pod_labels.get(k) {
                    let r = Requirement::new(k, op, vec![val.to_string()])
                        .map_err(|m| err(format!("{field}.matchLabelKeys"), m))?;
                    if !v.contains(&r) {
                        v.push(r);
                    }
                }
            }
        }
        *reqs = v.into();
    }
    let namespace_selector = match &t.namespace_selector {
        Some(s) => Some(label_selector(
            Some(s),
            &format!("{field}.namespaceSelector"),
        )?),
        None => None,
    };
    let mut namespaces: Vec<Arc<str>> = t
        .namespaces
        .iter()
        .flatten()
        .map(|n| Arc::from(n.as_str()))
        .collect();
    if namespaces.is_empty() && namespace_selector.is_none() {
        namespaces.push(own_ns.clone());
    }
    Ok(AffinityTerm {
        namespaces: namespaces.into(),
        namespace_selector,
        selector,
        topology_key: t.topology_key.clone().into(),
    })
}

pub(super) fn weighted_term(
    w: &core::WeightedPodAffinityTerm,
    own_ns: &Arc<str>,
    pod_labels: &Labels,
    field: &str,
) -> Result<WeightedAffinityTerm> {
    if !(1..=100).contains(&w.weight) {
        return Err(err(
            format!("{field}.weight"),
            format!("{} must be in the range 1-100", w.weight),
        ));
    }
    Ok(WeightedAffinityTerm {
        weight: w.weight,
        term: affinity_term(
            &w.pod_affinity_term,
            own_ns,
            pod_labels,
            &format!("{field}.podAffinityTerm"),
        )?,
    })
}

pub(super) fn spread_constraint(
    c: &core::TopologySpreadConstraint,
    pod_labels: &Labels,
    field: &str,
) -> Result<TopologySpreadConstraint> {
    if c.max_skew <= 0 {
        return Err(err(
            format!("{field}.maxSkew"),
            format!("{} must be greater than zero", c.max_skew),
        ));
    }
    if c.topology_key.is_empty() {
        return Err(err(
            format!("{field}.topologyKey"),
            "required: can not be empty",
        ));
    }
    let when_unsatisfiable = match c.when_unsatisfiable.as_str() {
        "DoNotSchedule" => UnsatisfiableConstraintAction::DoNotSchedule,
        "ScheduleAnyway" => UnsatisfiableConstraintAction::ScheduleAnyway,
        other => {
            return Err(err(
                format!("{field}.whenUnsatisfiable"),
                format!("unsupported value {other:?}: must be DoNotSchedule or ScheduleAnyway"),
            ))
        }
    };
    if let Some(m) = c.min_domains {
        if m <= 0 {
            return Err(err(
                format!("{field}.minDomains"),
                format!("{m} must be greater than zero"),
            ));
        }
        if when_unsatisfiable != UnsatisfiableConstraintAction::DoNotSchedule {
            return Err(err(
                format!("{field}.minDomains"),
                "can only use minDomains if whenUnsatisfiable=DoNotSchedule",
            ));
        }
    }
    let policy = |v: &Option<String>, f: &str, default| -> Result<NodeInclusionPolicy> {
        match v.as_deref() {
            None => Ok(default),
            Some("Honor") => Ok(NodeInclusionPolicy::Honor),
            Some("Ignore") => Ok(NodeInclusionPolicy::Ignore),
            Some(o) => Err(err(
                format!("{field}.{f}"),
                format!("unsupported value {o:?}: must be Honor or Ignore"),
            )),
        }
    };
    let mut selector =
        label_selector(c.label_selector.as_ref(), &format!("{field}.labelSelector"))?;
    if let LabelSelector::Requirements(reqs) = &mut selector {
        let mut v = reqs.to_vec();
        for k in c.match_label_keys.iter().flatten() {
            if let Some(val) = pod_labels.get(k) {
                let r = Requirement::new(k, Operator::In, vec![val.to_string()])
                    .map_err(|m| err(format!("{field}.matchLabelKeys"), m))?;
                if !v.contains(&r) {
                    v.push(r);
                }
            }
        }
        *reqs = v.into();
    }
    Ok(TopologySpreadConstraint {
        max_skew: c.max_skew,
        topology_key: c.topology_key.clone().into(),
        when_unsatisfiable,
        selector,
        min_domains: c.min_domains,
        node_affinity_policy: policy(
            &c.node_affinity_policy,
            "nodeAffinityPolicy",
            NodeInclusionPolicy::Honor,
        )?,
        node_taints_policy: policy(
            &c.node_taints_policy,
            "nodeTaintsPolicy",
            NodeInclusionPolicy::Ignore,
        )?,
    })
}

pub fn toleration_from_k8s(t: &core::Toleration, field: &str) -> Result<Toleration> {
    let key = t.key.clone().unwrap_or_default();
    let operator = match t.operator.as_deref() {
        None | Some("") | Some("Equal") => TolerationOperator::Equal,
        Some("Exists") => TolerationOperator::Exists,
        Some(o) => {
            return Err(err(
                format!("{field}.operator"),
                format!("unsupported value {o:?}: must be Equal or Exists"),
            ))
        }
    };
    let value = t.value.clone().unwrap_or_default();
    if operator == TolerationOperator::Exists && !value.is_empty() {
        return Err(err(
            format!("{field}.value"),
            "must be empty when `operator` is 'Exists'",
        ));
    }
    if key.is_empty() && operator != TolerationOperator::Exists {
        return Err(err(
            format!("{field}.operator"),
            "must be 'Exists' when `key` is empty, which means \"match all values and all keys\"",
        ));
    }
    let effect = match t.effect.as_deref() {
        None | Some("") => None,
        Some(e) => Some(TaintEffect::parse(e).ok_or_else(|| {
            err(
                format!("{field}.effect"),
                format!(
                    "unsupported value {e:?}: must be NoSchedule, PreferNoSchedule or NoExecute"
                ),
            )
        })?),
    };
    Ok(Toleration {
        key: key.into(),
        operator,
        value: value.into(),
        effect,
        toleration_seconds: t.toleration_seconds,
    })
}
