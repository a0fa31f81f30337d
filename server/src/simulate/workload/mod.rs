//! Workloads in the format of kube-scheduler's `scheduler_perf` benchmark: a list of
//! test cases, each a template of ordered ops (create nodes from a template, create
//! pods from a template, barriers, ...) and named workloads giving the `$params`.

mod decode;
mod file;
mod gotemplate;
mod templates;

use file::*;
use templates::*;
pub use templates::{render_template, template_root};

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
        /// The last rendering and its object: consecutive indices often render the
        /// same text (a gang's pods, `DivideInt .Index 8`), and parsing is the cost.
        last: RenderMemo<T>,
    },
}

/// A template's last rendered text and the object it parsed to. A clone starts
/// empty (it is a cache, not state).
pub struct RenderMemo<T>(Box<std::sync::Mutex<Option<(String, T)>>>);

impl<T> Default for RenderMemo<T> {
    fn default() -> Self {
        RenderMemo(Box::new(std::sync::Mutex::new(None)))
    }
}

impl<T> Clone for RenderMemo<T> {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl<T> std::fmt::Debug for RenderMemo<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RenderMemo")
    }
}

impl<T: Clone> RenderMemo<T> {
    /// The object `text` parses to: the last one when `text` is the last text.
    pub fn get_or_parse(
        &self,
        text: String,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<T, String> {
        let mut last = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((t, obj)) = last.as_ref() {
            if *t == text {
                return Ok(obj.clone());
            }
        }
        let obj = parse(&text)?;
        *last = Some((text, obj.clone()));
        Ok(obj)
    }
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
        /// Pods from a template share `signature: signature-label-<i/batch>`.
        signature_batch: Option<usize>,
        /// A bound PV and PVC per pod, the pod's volumes replaced by the claim.
        volumes: Option<Box<PodVolumes>>,
        /// Written to every pod's status, then their scheduling gates removed.
        nominated_node_name: Option<String>,
        /// scheduler_perf's steady state: for this long, each pod scheduled is deleted
        /// and replaced, so `count` pods are always waiting.
        steady: Option<std::time::Duration>,
    },
    /// Allocates every ResourceClaim of the namespace on the first node where it fits
    /// (scheduler_perf's `allocResourceClaims`: claims in use before the test).
    AllocResourceClaims {
        namespace: String,
    },
    /// `count` objects of any kind Switchyard reads, rendered per index.
    CreateAny {
        count: usize,
        namespace: Option<String>,
        template: Template<Value>,
    },
    /// Full-object updates of the pods or nodes the template names per index.
    UpdateAny {
        count: usize,
        namespace: Option<String>,
        template: Template<Value>,
        /// Updates per second (0: as fast as they go). A pod's `resize`
        /// subresource is accepted: the embedded cluster changes requests in place
        /// on any update.
        per_second: f64,
    },
    /// A ResourceSlice per node whose name matches the glob `nodes`, with `devices`
    /// devices (upstream scheduler_perf's test driver).
    CreateResourceDriver {
        driver: String,
        nodes: String,
        devices: usize,
    },
    Barrier,
    Sleep(Duration),
    DeletePods {
        namespace: String,
        selector: BTreeMap<String, String>,
        /// Deletions per second (none: all at once), in the background when
        /// `skip_wait` (until the workload's last op is done).
        per_second: Option<u32>,
        skip_wait: bool,
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
        /// Only pods with these labels count (upstream's `labelSelector`).
        labels: BTreeMap<String, String>,
    },
    StopCollectingMetrics,
}

/// createPods' volume templates (plain objects, named per pod by the runner).
#[derive(Clone, Debug)]
pub struct PodVolumes {
    pub claim: core::PersistentVolumeClaim,
    pub volume: Option<core::PersistentVolume>,
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
    /// What the file asks for that does not apply to a simulation, said once.
    pub notes: Vec<String>,
    /// `numNodeDeclaredFeatures`: every node created declares `Feature1..N`, as
    /// upstream's NodeDeclaredFeatures benchmark sets them after each createNodes.
    pub declared_features: Option<usize>,
}

pub const SUPPORTED_OPS: &[&str] = &[
    "createNodes",
    "createNamespaces",
    "createPods",
    "createPodSets",
    "createAny",
    "updateAny",
    "barrier",
    "sleep",
    "deletePods",
    "churn",
    "startCollectingMetrics",
    "stopCollectingMetrics",
    "createResourceDriver",
    "allocResourceClaims",
];

/// The most objects one op may create (count, countParam, churn number): ten times
/// upstream scheduler_perf's largest workload, and far below what would exhaust memory
/// (each pod costs about 2 KB).
pub const MAX_OBJECTS_PER_OP: usize = 1_000_000;

/// A workload as its file names it, before it is loaded.
#[derive(Clone, Debug, serde::Serialize)]
pub struct WorkloadEntry {
    /// `Case/Workload`.
    pub name: String,
    /// The case's labels, then the workload's (upstream selects runs by them:
    /// `performance`, `integration-test`, `short`, ...).
    pub labels: Vec<String>,
    /// Upstream's minimum pods/s, if the workload sets one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
}

/// The `Case/Workload` pairs in a file, with their labels and thresholds.
pub fn list_workloads(path: &Path, max_bytes: u64) -> Result<Vec<WorkloadEntry>, WorkloadError> {
    let cases = read_cases(path, max_bytes)?;
    Ok(cases
        .iter()
        .flat_map(|c| {
            c.workloads.iter().map(move |w| WorkloadEntry {
                name: format!("{}/{}", c.name, w.name),
                labels: c.labels.iter().chain(&w.labels).cloned().collect(),
                threshold: threshold_of(w),
            })
        })
        .collect())
}

fn threshold_of(w: &file::WorkloadFile) -> Option<f64> {
    match &w.threshold {
        Some(Value::Number(n)) => n.as_f64(),
        _ => None,
    }
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
/// Templates resolve against the file's folder and must stay inside `root`
/// (default: [`template_root`]).
pub fn load(
    path: &Path,
    selector: Option<&str>,
    max_bytes: u64,
    root: Option<&Path>,
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
    check_feature_gates(case, w, ci, wi, path)?;
    let base = match path.parent() {
        Some(b) if !b.as_os_str().is_empty() => b,
        _ => Path::new("."),
    };
    let root = template_root(path, root);
    let files = Files {
        base,
        root: &root,
        file: path,
        max_bytes,
    };
    let mut used: Vec<String> = Vec::new();
    let ops = decode::decode_ops(case, ci, w, &files, &mut used)?;
    // Read by upstream's NodeDeclaredFeatures benchmark itself, not by an op.
    let declared_features = match w.params.get("numNodeDeclaredFeatures") {
        Some(v) => {
            used.push("numNodeDeclaredFeatures".into());
            let n = v.as_u64().filter(|n| *n <= 1000).ok_or_else(|| {
                werr(
                    path,
                    format!("workloads[{wi}].params.numNodeDeclaredFeatures"),
                    format!("must be an integer from 0 to 1000, got {v}"),
                )
            })?;
            Some(n as usize)
        }
        None => None,
    };
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
    let threshold = threshold_of(w);
    let mut notes = Vec::new();
    if case.scheduler_api_client_qps.is_some() || case.scheduler_api_client_burst.is_some() {
        notes.push(format!(
            "{}: schedulerApiClientQPS/Burst limit a scheduler's API client; the embedded cluster has no API server, so they do not apply",
            case.name
        ));
    }
    Ok(Workload {
        name: format!("{}/{}", case.name, w.name),
        ops,
        scheduler_config: match &case.scheduler_config_path {
            Some(p) => Some(files.confined(Path::new(p), &format!("[{ci}].schedulerConfigPath"))?),
            None => None,
        },
        threshold,
        notes,
        declared_features,
    })
}

/// Feature gates whose features change decisions and Switchyard does not have: a
/// workload that turns one on is refused naming it (one that turns it off, or any
/// other gate, runs: the rest are on in v1.36 and implemented, or are how a
/// scheduler works inside, such as queueing hints and async API calls).
const ABSENT_FEATURES: &[(&str, &str)] = &[
    (
        "InPlacePodVerticalScalingSchedulerPreemption",
        "preemption for resizes a kubelet deferred (alpha in v1.36)",
    ),
    ("GenericWorkload", "the Workload API (alpha in v1.36)"),
    (
        "DRADeviceBindingConditions",
        "Dynamic Resource Allocation's device binding conditions (beta in v1.36; see docs/dra.md)",
    ),
    (
        "GangScheduling",
        "the Workload API's gang scheduling (alpha in v1.36)",
    ),
    (
        "TopologyAwareWorkloadScheduling",
        "the Workload API's topology-aware scheduling (alpha in v1.36)",
    ),
    (
        "CompositePodGroup",
        "the Workload API's composite pod groups (alpha in v1.36)",
    ),
];

fn check_feature_gates(
    case: &TestCaseFile,
    w: &WorkloadFile,
    ci: usize,
    wi: usize,
    path: &Path,
) -> Result<(), WorkloadError> {
    // The workload's gates override the test case's.
    let on = |gate: &str| -> Option<String> {
        for (gates, field) in [
            (
                &w.feature_gates,
                format!("[{ci}].workloads[{wi}].featureGates.{gate}"),
            ),
            (&case.feature_gates, format!("[{ci}].featureGates.{gate}")),
        ] {
            if let Some(v) = gates.as_ref().and_then(|g| g.get(gate)) {
                return (v == &Value::Bool(true)).then_some(field);
            }
        }
        None
    };
    for (gate, what) in ABSENT_FEATURES {
        if let Some(field) = on(gate) {
            return Err(werr(
                path,
                field,
                format!("the workload turns on {gate}: {what}, which Switchyard does not have"),
            ));
        }
    }
    Ok(())
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
            load(&f, None, crate::model::input::DEFAULT_MAX_INPUT_BYTES, None)
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

    /// Consecutive indices that render the same text share one parse; a different
    /// rendering is parsed anew, and going back to an earlier text is right too.
    #[test]
    fn per_index_templates_reuse_the_last_parse_only_for_the_same_text() {
        let t: Template<core::Pod> = Template::PerIndex {
            text: "kind: Pod\nmetadata: {name: 'g-{{DivideInt .Index 2}}'}\n".into(),
            params: BTreeMap::new(),
            file: PathBuf::from("pod.yaml"),
            last: Default::default(),
        };
        let names: Vec<String> = [0, 1, 2, 3, 0]
            .into_iter()
            .map(|i| t.instantiate(i, 4).unwrap().metadata.name.unwrap())
            .collect();
        assert_eq!(names, ["g-0", "g-0", "g-1", "g-1", "g-0"]);
    }

    #[test]
    fn upstream_layout_templates_params_and_absent_features() {
        let root =
            std::env::temp_dir().join(format!("sy-up-{}/scheduler_perf", std::process::id()));
        let area = root.join("area");
        std::fs::create_dir_all(root.join("templates")).unwrap();
        std::fs::create_dir_all(&area).unwrap();
        std::fs::write(
            root.join("templates/pod.yaml"),
            "kind: Pod\nmetadata: {generateName: p-, labels: {zone: '{{.zone}}'}}\n",
        )
        .unwrap();
        std::fs::write(
            root.join("templates/svc.yaml"),
            "kind: Service\nmetadata: {generateName: s-}\n",
        )
        .unwrap();
        std::fs::write(
            root.join("templates/slice.yaml"),
            "kind: DeviceTaintRule\n{{$x := .y}}\n",
        )
        .unwrap();
        std::fs::write(root.parent().unwrap().join("outside.yaml"), "kind: Pod\n").unwrap();
        let case = |ops: &str, extra: &str| {
            let f = area.join("performance-config.yaml");
            std::fs::write(
                &f,
                format!("- name: C\n{extra}  workloadTemplate:\n{ops}  workloads: [{{name: w, params: {{n: 3, z: eu}}}}]\n"),
            )
            .unwrap();
            load(&f, None, crate::model::input::DEFAULT_MAX_INPUT_BYTES, None)
        };
        // ../templates resolves inside the scheduler_perf tree; $params fill
        // templateParams; createPodSets unrolls into namespaces; createAny names
        // its namespace.
        let w = case(
            "  - {opcode: createPodSets, countParam: $n, namespacePrefix: set, createPodsOp: {opcode: createPods, count: 2, podTemplatePath: ../templates/pod.yaml, templateParams: {zone: $z}, signatureBatchSize: 2}}\n  - {opcode: createAny, namespace: default, templatePath: ../templates/svc.yaml}\n",
            "",
        )
        .unwrap();
        assert_eq!(w.ops.len(), 4);
        match &w.ops[2] {
            Op::CreatePods {
                namespace,
                signature_batch,
                template,
                ..
            } => {
                assert_eq!(namespace, "set-2");
                assert_eq!(*signature_batch, Some(2));
                let p: core::Pod = template.instantiate(0, 2).unwrap();
                assert_eq!(p.metadata.labels.unwrap()["zone"], "eu");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(w.ops[3], Op::CreateAny { count: 1, .. }));
        // A path out of the tree is refused, naming the tree.
        let e = case(
            "  - {opcode: createPods, count: 1, podTemplatePath: ../../outside.yaml}\n",
            "",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("outside the template tree"), "{e}");
        // Features Switchyard lacks are named, before their templates are rendered.
        let e = case(
            "  - {opcode: createAny, templatePath: ../templates/slice.yaml}\n",
            "",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(
                "DeviceTaintRule objects (Dynamic Resource Allocation's DRADeviceTaintRules"
            ),
            "{e}"
        );
        let e = case("  - {opcode: createPodGroups, count: 1}\n", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("Workload API"), "{e}");
        let e = case(
            "  - {opcode: createPods, count: 1}\n",
            "  featureGates: {GenericWorkload: true}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("[0].featureGates.GenericWorkload"), "{e}");
        let e = case(
            "  - {opcode: createPods, countParam: $n}\n  - {opcode: deletePods, namespace: namespace-0, deletePodsPerSecond: 0}\n",
            "",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("deletePodsPerSecond: must be greater than 0"),
            "{e}"
        );
        // A cluster-scoped kind with a namespace, and an unused param, are errors.
        let e = case("  - {opcode: createNodes, count: 1}\n  - {opcode: createAny, namespace: x, templatePath: ../templates/svc.yaml}\n", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unused") || e.contains("namespace"), "{e}");
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
