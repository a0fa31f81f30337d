//! The scheduler_perf file format as written: test cases, workloads and each op's
//! fields (unknown fields refused).

use super::*;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // accepted for compatibility with upstream files; not all fields are used
pub(super) struct TestCaseFile {
    pub(super) name: String,
    #[serde(default)]
    pub(super) feature_gates: Option<Value>,
    #[serde(default)]
    pub(super) metrics_collector_config: Option<Value>,
    pub(super) workload_template: Vec<Value>,
    pub(super) workloads: Vec<WorkloadFile>,
    #[serde(default)]
    pub(super) scheduler_config_path: Option<String>,
    #[serde(default)]
    pub(super) default_pod_template_path: Option<String>,
    #[serde(default)]
    pub(super) labels: Vec<String>,
    #[serde(default)]
    pub(super) default_threshold_metric_selector: Option<Value>,
    /// The scheduler's API client limits in upstream's integration test; the
    /// embedded cluster has no API server, so they are accepted and reported.
    #[serde(default, rename = "schedulerApiClientQPS")]
    pub(super) scheduler_api_client_qps: Option<Value>,
    #[serde(default)]
    pub(super) scheduler_api_client_burst: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // accepted for compatibility with upstream files; not all fields are used
pub(super) struct WorkloadFile {
    pub(super) name: String,
    #[serde(default)]
    pub(super) params: BTreeMap<String, Value>,
    #[serde(default)]
    pub(super) labels: Vec<String>,
    #[serde(default)]
    pub(super) threshold: Option<Value>,
    #[serde(default)]
    pub(super) threshold_metric_selector: Option<Value>,
    #[serde(default)]
    pub(super) feature_gates: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // accepted for compatibility with upstream files; not all fields are used
pub(super) struct LabelStrategyFile {
    pub(super) label_key: String,
    #[serde(default)]
    pub(super) label_values: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // accepted for compatibility with upstream files; not all fields are used
pub(super) struct AllocatableStrategyFile {
    #[serde(default)]
    pub(super) node_allocatable: BTreeMap<String, Value>,
    #[serde(default)]
    pub(super) csi_node_allocatable: Option<Value>,
    #[serde(default)]
    pub(super) migrated_plugins: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // accepted for compatibility with upstream files; not all fields are used
pub(super) struct CreateNodesFile {
    pub(super) opcode: String,
    #[serde(default)]
    pub(super) count: Option<usize>,
    #[serde(default)]
    pub(super) count_param: Option<String>,
    #[serde(default)]
    pub(super) node_template_path: Option<String>,
    #[serde(default)]
    pub(super) label_node_prepare_strategy: Option<LabelStrategyFile>,
    #[serde(default)]
    pub(super) unique_node_label_strategy: Option<LabelStrategyFile>,
    #[serde(default)]
    pub(super) node_allocatable_strategy: Option<AllocatableStrategyFile>,
    #[serde(default)]
    pub(super) template_params: BTreeMap<String, Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // accepted for compatibility with upstream files; not all fields are used
pub(super) struct CreateNamespacesFile {
    pub(super) opcode: String,
    pub(super) prefix: String,
    #[serde(default)]
    pub(super) count: Option<usize>,
    #[serde(default)]
    pub(super) count_param: Option<String>,
    #[serde(default)]
    pub(super) namespace_template_path: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // accepted for compatibility with upstream files; not all fields are used
pub(super) struct CreatePodsFile {
    pub(super) opcode: String,
    #[serde(default)]
    pub(super) count: Option<usize>,
    #[serde(default)]
    pub(super) count_param: Option<String>,
    #[serde(default)]
    pub(super) collect_metrics: bool,
    #[serde(default)]
    pub(super) namespace: Option<String>,
    #[serde(default)]
    pub(super) pod_template_path: Option<String>,
    #[serde(default)]
    pub(super) skip_wait_to_completion: bool,
    #[serde(default)]
    pub(super) template_params: BTreeMap<String, Value>,
    /// Pods `i` of a batch share the label `signature: signature-label-<i/size>`.
    #[serde(default)]
    pub(super) signature_batch_size: Option<usize>,
    #[serde(default)]
    pub(super) signature_batch_size_param: Option<String>,
    /// A PV and a bound PVC per pod, the pod's volumes replaced by that claim.
    #[serde(default)]
    pub(super) persistent_volume_template_path: Option<String>,
    #[serde(default)]
    pub(super) persistent_volume_claim_template_path: Option<String>,
    /// Written to every pod's status before its scheduling gates are removed.
    #[serde(default)]
    pub(super) nominated_node_name: Option<String>,
    #[serde(default)]
    pub(super) pods_scheduling_timeout: Option<String>,
    /// scheduler_perf's steady-state mode: keep `count` pods, deleting and recreating
    /// them, for `duration` (refused: not supported yet).
    #[serde(default)]
    pub(super) steady_state: bool,
    /// `steadyState` from a workload parameter.
    #[serde(default)]
    pub(super) steady_state_param: Option<String>,
    #[serde(default)]
    pub(super) duration: Option<String>,
    #[serde(default)]
    pub(super) duration_param: Option<String>,
}

/// `createAny`: `count` objects of any kind, rendered per index.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // accepted for compatibility with upstream files; not all fields are used
pub(super) struct CreateAnyFile {
    pub(super) opcode: String,
    #[serde(default)]
    pub(super) namespace: Option<String>,
    pub(super) template_path: String,
    #[serde(default)]
    pub(super) count: Option<usize>,
    #[serde(default)]
    pub(super) count_param: Option<String>,
    #[serde(default)]
    pub(super) template_params: BTreeMap<String, Value>,
}

/// `updateAny`: full-object updates of the objects a template names per index.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // accepted for compatibility with upstream files; not all fields are used
pub(super) struct UpdateAnyFile {
    pub(super) opcode: String,
    #[serde(default)]
    pub(super) namespace: Option<String>,
    pub(super) template_path: String,
    #[serde(default)]
    pub(super) count: Option<usize>,
    #[serde(default)]
    pub(super) count_param: Option<String>,
    #[serde(default)]
    pub(super) update_per_second: Option<f64>,
    #[serde(default)]
    pub(super) subresources: Vec<String>,
}

/// `createPodSets`: `count` copies of a createPods op, each in its own namespace.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // accepted for compatibility with upstream files; not all fields are used
pub(super) struct CreatePodSetsFile {
    pub(super) opcode: String,
    #[serde(default)]
    pub(super) count: Option<usize>,
    #[serde(default)]
    pub(super) count_param: Option<String>,
    pub(super) namespace_prefix: String,
    pub(super) create_pods_op: Value,
}

/// `createResourceDriver`: a ResourceSlice per matching node, as upstream's test
/// driver publishes them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // accepted for compatibility with upstream files; not all fields are used
pub(super) struct CreateResourceDriverFile {
    pub(super) opcode: String,
    pub(super) driver_name: String,
    #[serde(default)]
    pub(super) max_claims_per_node: Option<usize>,
    #[serde(default)]
    pub(super) max_claims_per_node_param: Option<String>,
    pub(super) nodes: String,
    /// Older files' switch between the structured and the control-plane driver:
    /// structured parameters are the only kind since v1.32.
    #[serde(default)]
    pub(super) structured_parameters: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // accepted for compatibility with upstream files; not all fields are used
pub(super) struct AllocResourceClaimsFile {
    pub(super) opcode: String,
    pub(super) namespace: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // opcode is read by the dispatcher
pub(super) struct BarrierFile {
    pub(super) opcode: String,
    #[serde(default)]
    pub(super) namespaces: Vec<String>,
    #[serde(default)]
    pub(super) label_selector: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub(super) stage_requirement: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // accepted for compatibility with upstream files; not all fields are used
pub(super) struct SleepFile {
    pub(super) opcode: String,
    #[serde(default)]
    pub(super) duration: Option<String>,
    #[serde(default)]
    pub(super) duration_param: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // accepted for compatibility with upstream files; not all fields are used
pub(super) struct DeletePodsFile {
    pub(super) opcode: String,
    pub(super) namespace: String,
    #[serde(default)]
    pub(super) label_selector: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) skip_wait_to_completion: bool,
    #[serde(default)]
    pub(super) delete_pods_per_second: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // accepted for compatibility with upstream files; not all fields are used
pub(super) struct ChurnFile {
    pub(super) opcode: String,
    pub(super) mode: String,
    #[serde(default)]
    pub(super) number: usize,
    #[serde(default)]
    pub(super) interval_milliseconds: Option<u64>,
    #[serde(default)]
    pub(super) namespace: Option<String>,
    pub(super) template_paths: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)] // accepted for compatibility with upstream files; not all fields are used
pub(super) struct MetricsFile {
    pub(super) opcode: String,
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) namespaces: Vec<String>,
    #[serde(default)]
    pub(super) label_selector: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub(super) collectors: Option<Value>,
}
