//! Workloads in the format of kube-scheduler's `scheduler_perf` benchmark: a list of
//! test cases, each a template of ordered ops (create nodes from a template, create
//! pods from a template, barriers, ...) and named workloads giving the `$params`.

mod file;
mod gotemplate;
mod templates;

use file::*;
pub use templates::render_template;
use templates::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1 as core;
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
#[error("{file}: {field}: {message}")]
pub struct WorkloadError {
    pub file: String,
    pub field: String,
    pub message: String,
}

fn werr(file: &Path, field: impl Into<String>, message: impl Into<String>) -> WorkloadError {
    WorkloadError {
        file: file.display().to_string(),
        field: field.into(),
        message: message.into(),
    }
}

/// How to label the nodes an op creates.
#[derive(Clone, Debug)]
pub enum NodeLabels {
    /// `labelValues[i % len]` on the i-th node (upstream assigns them round-robin).
    RoundRobin { key: String, values: Vec<String> },
    /// A distinct value per node.
    Unique { key: String },
}

/// A pod or node template: parsed once when it has no template actions, otherwise
/// rendered per index.
#[derive(Clone, Debug)]
pub enum Template<T> {
    Fixed(Box<T>),
    PerIndex {
        text: String,
        params: BTreeMap<String, Value>,
        file: PathBuf,
    },
}

/// How a `churn` op cycles its objects (upstream `churnOp.Mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChurnMode {
    /// One object per template on every tick, `number` ticks (0: until the workload ends).
    Create,
    /// A ring of `number` slots per template: each tick empties a filled slot (deletes
    /// its object) or fills an empty one.
    Recreate,
}

/// An object a `churn` op creates; upstream allows any kind, the scheduler reads these.
#[derive(Clone, Debug)]
pub enum ChurnObject {
    Pod(Box<core::Pod>),
    Node(Box<core::Node>),
    Service(Box<core::Service>),
}

#[derive(Clone, Debug)]
pub enum Op {
    CreateNodes {
        count: usize,
        template: Template<core::Node>,
        labels: Option<NodeLabels>,
        allocatable: BTreeMap<String, String>,
    },
    CreateNamespaces {
        prefix: String,
        count: usize,
        template: Option<Box<core::Namespace>>,
    },
    CreatePods {
        count: usize,
        namespace: String,
        template: Template<core::Pod>,
        skip_wait: bool,
        collect_metrics: bool,
    },
    Barrier,
    Sleep(Duration),
    DeletePods {
        namespace: String,
        selector: BTreeMap<String, String>,
    },
    /// Runs in the background, from this op until the workload's last op is done.
    Churn {
        mode: ChurnMode,
        number: usize,
        interval: Duration,
        namespace: String,
        templates: Vec<ChurnObject>,
    },
    /// Measure pods bound in these namespaces (empty: all) until the stop op.
    StartCollectingMetrics {
        namespaces: Vec<String>,
    },
    StopCollectingMetrics,
}

#[derive(Clone, Debug)]
pub struct Workload {
    /// `Case/Workload`.
    pub name: String,
    pub ops: Vec<Op>,
    /// A KubeSchedulerConfiguration the case asks for.
    pub scheduler_config: Option<PathBuf>,
    /// Upstream's minimum pods/s for this workload, if it sets one.
    pub threshold: Option<f64>,
}

pub const SUPPORTED_OPS: &[&str] = &[
    "createNodes",
    "createNamespaces",
    "createPods",
    "barrier",
    "sleep",
    "deletePods",
    "churn",
    "startCollectingMetrics",
    "stopCollectingMetrics",
];

/// The most objects one op may create (count, countParam, churn number): ten times
/// upstream scheduler_perf's largest workload, and far below what would exhaust memory
/// (each pod costs about 2 KB).
pub const MAX_OBJECTS_PER_OP: usize = 1_000_000;

/// Names of `Case/Workload` pairs in a file.
pub fn list_workloads(path: &Path, max_bytes: u64) -> Result<Vec<String>, WorkloadError> {
    let cases = read_cases(path, max_bytes)?;
    Ok(cases
        .iter()
        .flat_map(|c| {
            c.workloads
                .iter()
                .map(move |w| format!("{}/{}", c.name, w.name))
        })
        .collect())
}

fn read_cases(path: &Path, max_bytes: u64) -> Result<Vec<TestCaseFile>, WorkloadError> {
    // The same size limit as manifests (--max-input-bytes).
    let text = crate::model::input::read_input(path, max_bytes)
        .map_err(|e| werr(path, "<file>", format!("cannot read: {}", e.message)))?;
    let v: Value = crate::yaml::from_str(&text).map_err(|e| werr(path, "<file>", e.to_string()))?;
    let cases: Vec<TestCaseFile> = serde_path_to_error::deserialize(v)
        .map_err(|e| werr(path, e.path().to_string(), e.inner().to_string()))?;
    if cases.is_empty() {
        return Err(werr(path, "<file>", "no test cases"));
    }
    Ok(cases)
}

/// Loads one workload. `selector` is `Case/Workload` or `Workload`; it may be omitted
/// when the file holds exactly one.
/// `max_bytes` bounds the file and every template it names (`--max-input-bytes`).
pub fn load(
    path: &Path,
    selector: Option<&str>,
    max_bytes: u64,
) -> Result<Workload, WorkloadError> {
    let cases = read_cases(path, max_bytes)?;
    let all: Vec<String> = cases
        .iter()
        .flat_map(|c| {
            c.workloads
                .iter()
                .map(move |w| format!("{}/{}", c.name, w.name))
        })
        .collect();
    let found = cases.iter().enumerate().find_map(|(ci, c)| {
        c.workloads.iter().enumerate().find_map(|(wi, w)| {
            let full = format!("{}/{}", c.name, w.name);
            let hit = match selector {
                None => all.len() == 1,
                Some(s) => {
                    s == full
                        || (s == w.name && c.workloads.iter().filter(|x| x.name == s).count() == 1)
                }
            };
            hit.then_some((ci, wi))
        })
    });
    let Some((ci, wi)) = found else {
        let msg = match selector {
            None => format!(
                "the file has {} workloads; choose one with --workload-name: {}",
                all.len(),
                all.join(", ")
            ),
            Some(s) => format!("no workload {s:?}; the file has: {}", all.join(", ")),
        };
        return Err(werr(path, "workloads", msg));
    };
    let case = &cases[ci];
    let w = &case.workloads[wi];
    let base = path.parent().unwrap_or(Path::new("."));
    let mut used: Vec<String> = Vec::new();
    let mut ops = Vec::new();
    for (i, raw) in case.workload_template.iter().enumerate() {
        let field = format!("[{ci}].workloadTemplate[{i}]");
        let opcode = raw
            .get("opcode")
            .and_then(|o| o.as_str())
            .ok_or_else(|| werr(path, format!("{field}.opcode"), "Required value"))?;
        let op = match opcode {
            "createNodes" => {
                let f: CreateNodesFile = decode_op(raw, path, &field)?;
                let count = param_usize(
                    f.count,
                    f.count_param.as_ref(),
                    &w.params,
                    &mut used,
                    path,
                    &field,
                )?;
                let template = match &f.node_template_path {
                    Some(t) => read_template(
                        base,
                        t,
                        f.template_params.clone(),
                        path,
                        &format!("{field}.nodeTemplatePath"),
                        max_bytes,
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
                                path,
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
                let f: CreateNamespacesFile = decode_op(raw, path, &field)?;
                let count = param_usize(
                    f.count,
                    f.count_param.as_ref(),
                    &w.params,
                    &mut used,
                    path,
                    &field,
                )?;
                let template = match &f.namespace_template_path {
                    Some(t) => match read_template::<core::Namespace>(
                        base,
                        t,
                        BTreeMap::new(),
                        path,
                        &field,
                        max_bytes,
                    )? {
                        Template::Fixed(ns) => Some(ns),
                        Template::PerIndex { .. } => {
                            return Err(werr(
                                path,
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
                let f: CreatePodsFile = decode_op(raw, path, &field)?;
                let count = param_usize(
                    f.count,
                    f.count_param.as_ref(),
                    &w.params,
                    &mut used,
                    path,
                    &field,
                )?;
                if f.collect_metrics && f.skip_wait_to_completion {
                    return Err(werr(
                        path,
                        &field,
                        "collectMetrics and skipWaitToCompletion cannot be used together",
                    ));
                }
                let template_path = f
                    .pod_template_path
                    .as_ref()
                    .or(case.default_pod_template_path.as_ref());
                let template = match template_path {
                    Some(t) => read_template(
                        base,
                        t,
                        f.template_params.clone(),
                        path,
                        &format!("{field}.podTemplatePath"),
                        max_bytes,
                    )?,
                    None => Template::Fixed(Box::new(base_pod())),
                };
                Op::CreatePods {
                    count,
                    namespace: f.namespace.unwrap_or_else(|| format!("namespace-{i}")),
                    template,
                    skip_wait: f.skip_wait_to_completion,
                    collect_metrics: f.collect_metrics,
                }
            }
            "barrier" => {
                let _: BarrierFile = decode_op(raw, path, &field)?;
                Op::Barrier
            }
            "sleep" => {
                let f: SleepFile = decode_op(raw, path, &field)?;
                let text = match (&f.duration, &f.duration_param) {
                    (_, Some(p)) => {
                        let key = p.trim_start_matches('$');
                        used.push(key.to_string());
                        w.params
                            .get(key)
                            .and_then(|v| v.as_str().map(str::to_string))
                            .ok_or_else(|| {
                                werr(
                                    path,
                                    format!("{field}.durationParam"),
                                    format!("parameter {key} must be a duration string"),
                                )
                            })?
                    }
                    (Some(d), None) => d.clone(),
                    (None, None) => {
                        return Err(werr(path, format!("{field}.duration"), "Required value"))
                    }
                };
                let d = crate::config::parse_go_duration(&text).ok_or_else(|| {
                    werr(
                        path,
                        format!("{field}.duration"),
                        format!("{text:?} is not a duration such as \"5s\""),
                    )
                })?;
                Op::Sleep(d)
            }
            "deletePods" => {
                let f: DeletePodsFile = decode_op(raw, path, &field)?;
                Op::DeletePods {
                    namespace: f.namespace,
                    selector: f.label_selector,
                }
            }
            "churn" => {
                let f: ChurnFile = decode_op(raw, path, &field)?;
                let mode = match f.mode.as_str() {
                    "create" => ChurnMode::Create,
                    "recreate" => ChurnMode::Recreate,
                    other => {
                        return Err(werr(
                            path,
                            format!("{field}.mode"),
                            format!("{other:?} is not a churn mode; use create or recreate"),
                        ))
                    }
                };
                if f.number > MAX_OBJECTS_PER_OP {
                    return Err(werr(
                        path,
                        format!("{field}.number"),
                        format!(
                            "{} is over the limit of {MAX_OBJECTS_PER_OP} objects per op",
                            f.number
                        ),
                    ));
                }
                if mode == ChurnMode::Recreate && f.number == 0 {
                    return Err(werr(
                        path,
                        format!("{field}.number"),
                        "must be greater than 0 in recreate mode",
                    ));
                }
                if f.template_paths.is_empty() {
                    return Err(werr(
                        path,
                        format!("{field}.templatePaths"),
                        "Required value",
                    ));
                }
                let mut templates = Vec::with_capacity(f.template_paths.len());
                for (j, t) in f.template_paths.iter().enumerate() {
                    let tfield = format!("{field}.templatePaths[{j}]");
                    templates.push(read_churn_object(
                        base,
                        Path::new(t),
                        path,
                        &tfield,
                        max_bytes,
                    )?);
                }
                Op::Churn {
                    mode,
                    number: f.number,
                    interval: Duration::from_millis(f.interval_milliseconds.unwrap_or(500).max(1)),
                    namespace: f.namespace.unwrap_or_else(|| format!("namespace-{i}")),
                    templates,
                }
            }
            "startCollectingMetrics" => {
                let f: MetricsFile = decode_op(raw, path, &field)?;
                Op::StartCollectingMetrics {
                    namespaces: f.namespaces,
                }
            }
            "stopCollectingMetrics" => {
                let _: MetricsFile = decode_op(raw, path, &field)?;
                Op::StopCollectingMetrics
            }
            other => {
                return Err(werr(
                    path,
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
    for k in w.params.keys() {
        if !used.contains(k) {
            return Err(werr(
                path,
                format!("workloads[{}].params.{k}", wi),
                format!(
                    "the parameter {k} is defined on workload {} but unused",
                    w.name
                ),
            ));
        }
    }
    let threshold = match &w.threshold {
        Some(Value::Number(n)) => n.as_f64(),
        _ => None,
    };
    Ok(Workload {
        name: format!("{}/{}", case.name, w.name),
        ops,
        scheduler_config: case.scheduler_config_path.as_ref().map(|p| base.join(p)),
        threshold,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_index_count_and_params() {
        let mut params = BTreeMap::new();
        params.insert("zone".to_string(), Value::String("z1".into()));
        assert_eq!(
            render_template("n-{{.Index}}/{{ .Count }}-{{.zone}}", 3, 9, &params).unwrap(),
            "n-3/9-z1"
        );
        assert!(render_template("{{ if .X }}", 0, 1, &params).is_err());
        assert!(render_template("{{.missing}}", 0, 1, &params).is_err());
    }

    #[test]
    fn churn_ops_are_checked() {
        let dir = std::env::temp_dir().join(format!("sy-churn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("pod.yaml"),
            "kind: Pod\nmetadata: {generateName: p-}\n",
        )
        .unwrap();
        std::fs::write(dir.join("pvc.yaml"), "kind: PersistentVolumeClaim\n").unwrap();
        let case = |op: &str| {
            let f = dir.join("w.yaml");
            std::fs::write(
                &f,
                format!("- name: C\n  workloadTemplate:\n  - {op}\n  - {{opcode: createPods, count: 1, collectMetrics: true}}\n  workloads: [{{name: w}}]\n"),
            )
            .unwrap();
            load(&f, None, crate::model::input::DEFAULT_MAX_INPUT_BYTES)
        };
        let w = case("{opcode: churn, mode: create, templatePaths: [pod.yaml]}").unwrap();
        match &w.ops[0] {
            Op::Churn {
                mode,
                number,
                interval,
                namespace,
                templates,
            } => {
                assert_eq!(*mode, ChurnMode::Create);
                assert_eq!(*number, 0);
                assert_eq!(*interval, Duration::from_millis(500));
                assert_eq!(namespace, "namespace-0");
                assert!(matches!(templates[0], ChurnObject::Pod(_)));
            }
            other => panic!("{other:?}"),
        }
        let e = case("{opcode: churn, mode: recreate, templatePaths: [pod.yaml]}").unwrap_err();
        assert!(
            e.to_string()
                .contains("[0].workloadTemplate[0].number: must be greater than 0"),
            "{e}"
        );
        let e = case("{opcode: churn, mode: create, templatePaths: [pvc.yaml]}").unwrap_err();
        assert!(
            e.to_string()
                .contains("pvc.yaml: kind: churn of PersistentVolumeClaim"),
            "{e}"
        );
        let e = case("{opcode: churn, mode: sometimes, templatePaths: [pod.yaml]}").unwrap_err();
        assert!(
            e.to_string()
                .contains("mode: \"sometimes\" is not a churn mode"),
            "{e}"
        );
    }

    #[test]
    fn base_objects_parse() {
        assert_eq!(
            base_node(0).metadata.generate_name.as_deref(),
            Some("node-0-")
        );
        assert_eq!(base_pod().spec.unwrap().containers.len(), 1);
    }
}
