//! `TenantQuota`: at most N pods of one tenant on a node.
//!
//! PreFilter notes the incoming pod's tenant in the cycle state; Filter reads the
//! tenant's count on the node from the SDK's index of pods by tenant (kept current by
//! every delta, so neither point scans the cluster's pods); AddPod/RemovePod set
//! changed counts on the forked state of a what-if evaluation (nominated pods,
//! preemption dry runs). Filter never looks at the node's pods, so a dry run that
//! removes or adds pods changes its answer exactly through AddPod/RemovePod.

use std::collections::HashMap;
use std::sync::Arc;

use switchyard_plugin_sdk::{
    pb, Cycle, CycleState, FilterPlugin, Index, Node, NodeInfo, Plugin, Pod, PreFilterPlugin,
    PreFilterResult, Snapshot, Status,
};

pub const NAME: &str = "TenantQuota";
/// Pod label naming the pod's tenant. Pods without it (or with an empty value) are
/// not subject to any quota.
pub const TENANT_LABEL: &str = "quota.switchyard.dev/tenant";
/// Node label: at most this many pods of any one tenant on the node. Nodes without it
/// are unlimited.
pub const LIMIT_LABEL: &str = "quota.switchyard.dev/pods-per-tenant";

/// The tenant of a pod: its non-empty [`TENANT_LABEL`].
pub fn tenant(pod: &Pod) -> Option<&str> {
    pod.labels
        .get(TENANT_LABEL)
        .map(String::as_str)
        .filter(|t| !t.is_empty())
}

/// The node's limit: `Ok(None)` when unlimited, an UnschedulableAndUnresolvable
/// status when the label is not a non-negative integer.
pub fn node_limit(node: &Node) -> Result<Option<u64>, Status> {
    let Some(value) = node.labels.get(LIMIT_LABEL) else {
        return Ok(None);
    };
    // Digits only: `parse` alone would also take a leading `+`.
    match value.parse::<u64>() {
        Ok(n) if value.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(n)),
        _ => Err(Status::unresolvable(format!(
            "node(s) had an invalid value {value:?} for label {LIMIT_LABEL} (expected a non-negative integer)"
        ))),
    }
}

/// The message of a node that has no room left for the tenant.
pub fn exceeded_message(tenant: &str) -> String {
    format!("node(s) exceeded the pod quota of tenant {tenant}")
}

/// The PreFilter state: the pod's tenant, where its count per node comes from, and
/// the counts a what-if evaluation (AddPod/RemovePod) changed. PreFilter copies no
/// count: with the SDK's index a node's count is a look-up at Filter time, so a cycle
/// costs the same however many nodes hold the tenant's pods.
#[derive(Clone, Debug, Default)]
pub struct QuotaState {
    pub tenant: String,
    base: Base,
    /// Counts set by AddPod/RemovePod on a forked state, by node name (the name is
    /// what a forked NodeInfo keeps). Absent nodes count from `base`.
    changed: HashMap<String, u64>,
}

/// Where a node's count comes from before any AddPod/RemovePod.
#[derive(Clone, Debug)]
enum Base {
    /// The replica's index of pods by tenant, leaving out the pod being scheduled
    /// (on `own_node`, should the replica already place it).
    Indexed { own_node: Option<u32> },
    /// Counted by scanning the nodes that set a limit (a replica without indexes).
    Counted(HashMap<String, u64>),
}

impl Default for Base {
    fn default() -> Self {
        Base::Counted(HashMap::new())
    }
}

impl QuotaState {
    /// Pods of the tenant on `node` (the pod being scheduled left out), as this
    /// cycle's evaluation sees them.
    pub fn count(&self, snapshot: &Snapshot, node: &NodeInfo) -> u64 {
        if let Some(n) = self.changed.get(node.name()) {
            return *n;
        }
        match &self.base {
            Base::Counted(counts) => counts.get(node.name()).copied().unwrap_or(0),
            Base::Indexed { own_node } => {
                let id = node.node.id;
                let n = snapshot
                    .pods_by_label(TENANT_LABEL)
                    .map_or(0, |p| p.on_node(&self.tenant, id));
                u64::from(n) - u64::from(n > 0 && *own_node == Some(id))
            }
        }
    }
}

/// Counts the pods of tenant `wanted` on `nodes` that set a limit, leaving out the pod
/// `self_uid` (the one being scheduled, should the replica already place it).
pub fn count_tenant_pods<'a>(
    wanted: &str,
    self_uid: &str,
    nodes: impl IntoIterator<Item = &'a NodeInfo>,
) -> QuotaState {
    let mut counts = HashMap::new();
    for ni in nodes {
        if !ni.node.labels.contains_key(LIMIT_LABEL) {
            continue;
        }
        let n = ni
            .pods
            .iter()
            .filter(|p| p.uid != self_uid && tenant(p) == Some(wanted))
            .count() as u64;
        if n > 0 {
            counts.insert(ni.name().to_string(), n);
        }
    }
    QuotaState {
        tenant: wanted.to_string(),
        base: Base::Counted(counts),
        changed: HashMap::new(),
    }
}

/// [`count_tenant_pods`] from the replica's indexes, in constant time: Filter reads
/// the counts of the nodes it is asked about from the index.
pub fn count_tenant_pods_indexed(wanted: &str, self_uid: &str, snapshot: &Snapshot) -> QuotaState {
    // The pod itself never counts, should the replica already place it.
    let own_node = snapshot
        .pod(self_uid)
        .filter(|p| tenant(p) == Some(wanted))
        .and_then(|p| snapshot.node_by_name(&p.node_name))
        .map(|ni| ni.node.id);
    QuotaState {
        tenant: wanted.to_string(),
        base: Base::Indexed { own_node },
        changed: HashMap::new(),
    }
}

fn missing_state() -> Status {
    Status::error(format!(
        "{NAME}: the PreFilter state of this cycle is missing (PreFilter did not run or skipped the pod)"
    ))
}

pub struct TenantQuota;

impl TenantQuota {
    /// PreFilter over explicit nodes (the snapshot's, in a real cycle).
    pub fn pre_filter_nodes<'a>(
        &self,
        pod: &Pod,
        nodes: impl IntoIterator<Item = &'a NodeInfo>,
        state: &mut CycleState,
    ) -> PreFilterResult {
        let Some(tenant) = tenant(pod) else {
            return Status::skip().into();
        };
        state.write(count_tenant_pods(tenant, &pod.uid, nodes));
        Status::success().into()
    }

    /// PreFilter from the replica's indexes (the SDK keeps them; see
    /// [`Plugin::indexes`]).
    pub fn pre_filter_indexed(
        &self,
        pod: &Pod,
        snapshot: &Snapshot,
        state: &mut CycleState,
    ) -> PreFilterResult {
        let Some(tenant) = tenant(pod) else {
            return Status::skip().into();
        };
        state.write(count_tenant_pods_indexed(tenant, &pod.uid, snapshot));
        Status::success().into()
    }

    /// AddPod (`add`) or RemovePod: a pod of the state's tenant placed on or taken
    /// off `node` moves its count by one (never below 0); other pods change nothing.
    fn adjust(
        &self,
        cycle: &Cycle,
        state: &mut CycleState,
        pod: &Pod,
        node: &NodeInfo,
        add: bool,
    ) -> Status {
        let Some(s) = state.read_mut::<QuotaState>() else {
            return missing_state();
        };
        // The pod being scheduled never counts against itself (PreFilter left it out).
        if pod.uid == cycle.pod.uid || tenant(pod) != Some(s.tenant.as_str()) {
            return Status::success();
        }
        let c = s.count(cycle.snapshot, node);
        let c = if add {
            c.saturating_add(1)
        } else {
            c.saturating_sub(1)
        };
        s.changed.insert(node.name().to_string(), c);
        Status::success()
    }
}

impl Plugin for TenantQuota {
    fn name(&self) -> &str {
        NAME
    }
    /// A pod rejected for the quota may fit once a node gains room: a new node, a
    /// node whose limit label changes, a pod of the tenant deleted, or relabelled out
    /// of the tenant.
    fn events(&self) -> Vec<pb::ClusterEvent> {
        vec![
            pb::ClusterEvent {
                resource: "Node".into(),
                actions: vec!["Add".into(), "UpdateNodeLabel".into()],
            },
            pb::ClusterEvent {
                resource: "Pod".into(),
                actions: vec!["Delete".into(), "UpdatePodLabel".into()],
            },
        ]
    }
    /// The tenant's pods per node and the limited nodes, kept by the SDK: PreFilter
    /// reads the nodes holding the tenant's pods, not every pod of the cluster.
    fn indexes(&self) -> Vec<Index> {
        vec![
            Index::PodsByLabel(TENANT_LABEL.into()),
            Index::NodesByLabel(LIMIT_LABEL.into()),
        ]
    }
    /// Filter reads the pod's tenant label, the node's limit label and the node's
    /// pods (the tenant's count); PreFilter notes only the tenant. So an answer holds
    /// for every pod of the tenant until the node or its pods change, and the
    /// scheduler asks only for the nodes of a round that did.
    fn signature(&self) -> Vec<pb::PodField> {
        vec![pb::PodField::None]
    }
    fn signature_node_pods(&self) -> bool {
        true
    }
    fn signature_label_keys(&self) -> Vec<String> {
        vec![TENANT_LABEL.into()]
    }
    /// PreFilter's verdict (Skip without a tenant, else Success) and state (the
    /// tenant) come from the pod's tenant label alone: the scheduler may send it, and
    /// the first Filter round, ahead of the pod's attempt.
    fn pre_filter_pod_only(&self) -> bool {
        true
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for TenantQuota {
    fn pre_filter(&self, cycle: &Cycle, state: &mut CycleState) -> PreFilterResult {
        let snap = cycle.snapshot;
        match (
            snap.pods_by_label(TENANT_LABEL),
            snap.nodes_by_label(LIMIT_LABEL),
        ) {
            (Some(_), Some(_)) => self.pre_filter_indexed(cycle.pod, snap, state),
            // A replica built without the indexes (a test's): count by scanning.
            _ => self.pre_filter_nodes(cycle.pod, snap.nodes(), state),
        }
    }

    fn has_extensions(&self) -> bool {
        true
    }

    fn add_pod(
        &self,
        cycle: &Cycle,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        node: &NodeInfo,
    ) -> Status {
        self.adjust(cycle, state, pod, node, true)
    }

    fn remove_pod(
        &self,
        cycle: &Cycle,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        node: &NodeInfo,
    ) -> Status {
        self.adjust(cycle, state, pod, node, false)
    }
}

impl FilterPlugin for TenantQuota {
    fn filter(&self, cycle: &Cycle, state: &CycleState, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<QuotaState>() else {
            return missing_state();
        };
        let limit = match node_limit(&node.node) {
            Ok(Some(limit)) => limit,
            Ok(None) => return Status::success(),
            Err(status) => return status,
        };
        if s.count(cycle.snapshot, node).saturating_add(1) <= limit {
            Status::success()
        } else if limit == 0 {
            // Evicting pods cannot make room on a node that admits none.
            Status::unresolvable(exceeded_message(&s.tenant))
        } else {
            Status::unschedulable(exceeded_message(&s.tenant))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_plugin_sdk::{Code, Snapshot};

    fn pod(uid: &str, tenant: Option<&str>) -> Arc<Pod> {
        Arc::new(Pod {
            uid: uid.into(),
            name: uid.into(),
            namespace: "default".into(),
            labels: tenant
                .map(|t| [(TENANT_LABEL.to_string(), t.to_string())].into())
                .unwrap_or_default(),
            ..Default::default()
        })
    }

    fn node(name: &str, limit: Option<&str>, pods: Vec<Arc<Pod>>) -> NodeInfo {
        let pods = pods
            .into_iter()
            .map(|p| {
                let mut p = (*p).clone();
                p.node_name = name.into();
                Arc::new(p)
            })
            .collect();
        NodeInfo {
            node: Node {
                name: name.into(),
                labels: limit
                    .map(|l| [(LIMIT_LABEL.to_string(), l.to_string())].into())
                    .unwrap_or_default(),
                ..Default::default()
            },
            pods,
        }
    }

    /// Runs PreFilter over `nodes`; returns the state it wrote and its status.
    fn pre_filter(pod: &Arc<Pod>, nodes: &[NodeInfo]) -> (Status, CycleState) {
        let mut state = CycleState::default();
        let r = TenantQuota.pre_filter_nodes(pod, nodes, &mut state);
        assert!(r.node_names.is_none());
        (r.status, state)
    }

    fn filter(pod: &Arc<Pod>, state: &CycleState, node: &NodeInfo) -> Status {
        let snapshot = Snapshot::default();
        let cycle = cycle(pod, &snapshot);
        TenantQuota.filter(&cycle, state, node)
    }

    fn cycle<'a>(pod: &'a Arc<Pod>, snapshot: &'a Snapshot) -> Cycle<'a> {
        Cycle {
            id: 1,
            pod,
            profile: "default-scheduler",
            snapshot,
        }
    }

    #[test]
    fn pod_without_tenant_is_skipped() {
        let nodes = [node("a", Some("0"), vec![])];
        for p in [pod("p", None), {
            let mut p = (*pod("p", None)).clone();
            p.labels.insert(TENANT_LABEL.into(), String::new());
            Arc::new(p)
        }] {
            let (s, state) = pre_filter(&p, &nodes);
            assert_eq!(s.code, Code::Skip);
            assert!(state.is_empty());
        }
        // Through the trait, over the (empty) snapshot of a cycle.
        let snapshot = Snapshot::default();
        let p = pod("p", None);
        let mut state = CycleState::default();
        let r = TenantQuota.pre_filter(&cycle(&p, &snapshot), &mut state);
        assert_eq!(r.status, Status::skip());
    }

    #[test]
    fn pre_filter_through_the_trait_counts_the_snapshot() {
        // The replica as the scheduler would send it: the SDK's test builder.
        let limited = node("a", Some("2"), vec![]).node;
        let free = node("b", None, vec![]).node;
        let on = |uid: &str, tenant: &str, node: &str| {
            let mut p = (*pod(uid, Some(tenant))).clone();
            p.node_name = node.into();
            p
        };
        let snapshot = Snapshot::from_objects(
            [limited, free],
            [on("q1", "t", "a"), on("q2", "u", "a"), on("q3", "t", "b")],
        )
        .unwrap();
        let p = pod("p", Some("t"));
        let mut state = CycleState::default();
        let r = TenantQuota.pre_filter(&cycle(&p, &snapshot), &mut state);
        assert!(r.status.is_success(), "{:?}", r.status);
        let counts = state.read::<QuotaState>().unwrap();
        let a = snapshot.node_by_name("a").unwrap();
        assert_eq!(
            counts.count(&snapshot, a),
            1,
            "only tenant t's pods on the limited node"
        );
        assert!(TenantQuota
            .filter(&cycle(&p, &snapshot), &state, a)
            .is_success());
    }

    /// The indexed PreFilter counts exactly what the scan counts, on a replica moved
    /// by deltas (pods placed, moved, removed, nodes relabelled), the pod itself
    /// placed or not.
    #[test]
    fn indexed_counts_equal_scanned_counts() {
        let mk_node = |name: &str, limit: Option<&str>| node(name, limit, vec![]).node;
        let on = |uid: &str, tenant: Option<&str>, node: &str| {
            let mut p = (*pod(uid, tenant)).clone();
            p.node_name = node.into();
            p
        };
        let mut pods = Vec::new();
        for i in 0..60 {
            let t = ["t", "u", "", "t"][i % 4];
            let tenant = (i % 7 != 0).then_some(t);
            pods.push(on(&format!("q{i}"), tenant, &format!("n{}", i % 9)));
        }
        pods.push(on("self", Some("t"), "n2"));
        let nodes: Vec<Node> = (0..9)
            .map(|i| mk_node(&format!("n{i}"), (i % 3 != 0).then_some("5")))
            .collect();
        let snapshot = Snapshot::from_objects(nodes.clone(), pods.clone()).unwrap();
        let indexed = Snapshot::from_objects(nodes, pods)
            .unwrap()
            .with_indexes(TenantQuota.indexes());
        for (who, tenant) in [("self", "t"), ("other", "t"), ("x", "u"), ("y", "none")] {
            let scanned = count_tenant_pods(tenant, who, snapshot.nodes());
            let from_index = count_tenant_pods_indexed(tenant, who, &indexed);
            for ni in indexed
                .nodes()
                .filter(|n| n.node.labels.contains_key(LIMIT_LABEL))
            {
                assert_eq!(
                    scanned.count(&snapshot, ni),
                    from_index.count(&indexed, ni),
                    "{who} of tenant {tenant} on {}",
                    ni.name()
                );
            }
        }
        // No limited node: both leave a state; an unlimited node is never counted.
        let free = Snapshot::from_objects([mk_node("f", None)], [on("a", Some("t"), "f")])
            .unwrap()
            .with_indexes(TenantQuota.indexes());
        assert_eq!(count_tenant_pods_indexed("t", "p", &free).tenant, "t");
        let scanned = count_tenant_pods("t", "p", free.nodes());
        let f = free.node_by_name("f").unwrap();
        assert_eq!(scanned.count(&free, f), 0);
    }

    /// A dry run on an indexed replica: RemovePod and AddPod move the count Filter
    /// reads from the index, on the fork only.
    #[test]
    fn indexed_state_forks_through_add_and_remove() {
        let on = |uid: &str, node: &str| {
            let mut p = (*pod(uid, Some("t"))).clone();
            p.node_name = node.into();
            p
        };
        let snapshot = Snapshot::from_objects(
            [node("a", Some("2"), vec![]).node],
            [on("v1", "a"), on("v2", "a")],
        )
        .unwrap()
        .with_indexes(TenantQuota.indexes());
        let p = pod("p", Some("t"));
        let c = cycle(&p, &snapshot);
        let mut base = CycleState::default();
        assert!(TenantQuota.pre_filter(&c, &mut base).status.is_success());
        let a = snapshot.node_by_name("a").unwrap();
        assert_eq!(TenantQuota.filter(&c, &base, a).code, Code::Unschedulable);
        let victim = snapshot.pod("v1").unwrap().clone();
        let mut fork = base.clone();
        assert!(TenantQuota
            .remove_pod(&c, &mut fork, &victim, a)
            .is_success());
        assert!(TenantQuota.filter(&c, &fork, a).is_success());
        assert_eq!(TenantQuota.filter(&c, &base, a).code, Code::Unschedulable);
        assert!(TenantQuota.add_pod(&c, &mut fork, &victim, a).is_success());
        assert_eq!(TenantQuota.filter(&c, &fork, a).code, Code::Unschedulable);
    }

    /// The SDK's harness: the manifests of `testdata/cluster.yaml` converted by the
    /// scheduler (`switchyard snapshot`), each pending pod run through PreFilter and
    /// Filter over every node as the sidecar would, with the plugin's indexes.
    #[test]
    fn harness_runs_the_quota_as_the_sidecar_does() {
        use switchyard_plugin_sdk::harness::Harness;
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let bin = std::env::var("SWITCHYARD_BIN")
            .unwrap_or_else(|_| format!("{root}/target/debug/switchyard"));
        let cluster = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/cluster.yaml");
        let mut h = Harness::from_manifests_with(&bin, &[cluster])
            .unwrap_or_else(|e| panic!("{e} (build it: cargo build -p switchyard)"));
        assert_eq!(
            h.pending(),
            ["default/acme-new", "default/globex-new", "default/plain"]
        );

        let acme = h.run(&TenantQuota, "acme-new").unwrap();
        assert!(acme.pre_filter.as_ref().unwrap().status.is_success());
        let full = acme.status("one").unwrap();
        assert_eq!(full.code, Code::Unschedulable);
        assert_eq!(full.reasons, [exceeded_message("acme")]);
        assert_eq!(acme.status("two-b").unwrap().code, Code::Unschedulable);
        assert_eq!(acme.feasible(), ["two-a", "free"]);
        assert_eq!(acme.state.read::<QuotaState>().unwrap().tenant, "acme");

        // globex has one pod, on the node that takes one per tenant.
        let globex = h.run(&TenantQuota, "default/globex-new").unwrap();
        assert_eq!(globex.feasible(), ["two-a", "two-b", "free"]);

        // No tenant: PreFilter skips, Filter is not run, every node passes.
        let plain = h.run(&TenantQuota, "plain").unwrap();
        assert_eq!(plain.pre_filter.as_ref().unwrap().status.code, Code::Skip);
        assert_eq!(plain.feasible().len(), 4);
        assert!(h.run(&TenantQuota, "nobody").is_err());
    }

    /// PreFilter's verdict reads the pod alone (`pre_filter_pod_only`): with no
    /// limited node it still succeeds, and Filter passes every node.
    #[test]
    fn no_limited_node_passes_every_node() {
        let p = pod("p", Some("t"));
        let nodes = [node("a", None, vec![pod("q", Some("t"))])];
        let (s, state) = pre_filter(&p, &nodes);
        assert!(s.is_success(), "{s:?}");
        assert_eq!(state.read::<QuotaState>().unwrap().tenant, "t");
        assert!(filter(&p, &state, &nodes[0]).is_success());
    }

    #[test]
    fn unlimited_node_passes() {
        let p = pod("p", Some("t"));
        let full = (0..5).map(|i| pod(&format!("q{i}"), Some("t"))).collect();
        let nodes = [node("a", Some("1"), vec![]), node("free", None, full)];
        let (s, state) = pre_filter(&p, &nodes);
        assert!(s.is_success(), "{s:?}");
        // Unlimited nodes are not even counted.
        let empty = Snapshot::default();
        let counts = state.read::<QuotaState>().unwrap();
        assert_eq!(counts.count(&empty, &nodes[1]), 0);
        assert!(filter(&p, &state, &nodes[1]).is_success());
        assert!(filter(&p, &state, &nodes[0]).is_success());
    }

    #[test]
    fn at_the_limit_fails_with_the_message() {
        let p = pod("p", Some("acme"));
        let nodes = [
            node(
                "a",
                Some("2"),
                vec![pod("q1", Some("acme")), pod("q2", Some("acme"))],
            ),
            node("b", Some("2"), vec![pod("q3", Some("acme"))]),
        ];
        let (s, state) = pre_filter(&p, &nodes);
        assert!(s.is_success());
        let st = filter(&p, &state, &nodes[0]);
        assert_eq!(st.code, Code::Unschedulable);
        assert_eq!(
            st.reasons,
            ["node(s) exceeded the pod quota of tenant acme"]
        );
        assert!(filter(&p, &state, &nodes[1]).is_success());
    }

    #[test]
    fn zero_limit_is_unresolvable() {
        let p = pod("p", Some("acme"));
        let nodes = [node("a", Some("0"), vec![])];
        let (_, state) = pre_filter(&p, &nodes);
        let st = filter(&p, &state, &nodes[0]);
        assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(st.message(), exceeded_message("acme"));
    }

    #[test]
    fn the_pod_itself_does_not_count() {
        let p = pod("p", Some("t"));
        let nodes = [node("a", Some("1"), vec![p.clone()])];
        let (_, state) = pre_filter(&p, &nodes);
        assert!(filter(&p, &state, &nodes[0]).is_success());
    }

    #[test]
    fn remove_then_add_on_a_fork() {
        let p = pod("p", Some("t"));
        let victim = pod("v", Some("t"));
        let nodes = [node("a", Some("1"), vec![victim.clone()])];
        let ni = &nodes[0];
        let (_, base) = pre_filter(&p, &nodes);
        assert_eq!(filter(&p, &base, ni).code, Code::Unschedulable);

        let snapshot = Snapshot::default();
        let c = cycle(&p, &snapshot);
        let mut fork = base.clone();
        assert!(TenantQuota
            .remove_pod(&c, &mut fork, &victim, ni)
            .is_success());
        assert!(TenantQuota.filter(&c, &fork, ni).is_success());
        // The base state is untouched.
        assert_eq!(TenantQuota.filter(&c, &base, ni).code, Code::Unschedulable);

        assert!(TenantQuota.add_pod(&c, &mut fork, &victim, ni).is_success());
        let st = TenantQuota.filter(&c, &fork, ni);
        assert_eq!(st.code, Code::Unschedulable);
        assert_eq!(st.message(), exceeded_message("t"));

        // Removing never goes below zero.
        let mut fork = base.clone();
        for _ in 0..3 {
            assert!(TenantQuota
                .remove_pod(&c, &mut fork, &victim, ni)
                .is_success());
        }
        assert_eq!(fork.read::<QuotaState>().unwrap().count(&snapshot, ni), 0);
        // Adding on a node PreFilter found empty starts its count.
        let b = node("b", Some("1"), vec![]);
        assert!(TenantQuota.add_pod(&c, &mut fork, &victim, &b).is_success());
        assert_eq!(TenantQuota.filter(&c, &fork, &b).code, Code::Unschedulable);
    }

    #[test]
    fn other_tenants_do_not_count() {
        let p = pod("p", Some("t"));
        let other = pod("o", Some("u"));
        let nodes = [node(
            "a",
            Some("1"),
            vec![other.clone(), pod("x", None), pod("y", Some(""))],
        )];
        let (_, base) = pre_filter(&p, &nodes);
        assert!(filter(&p, &base, &nodes[0]).is_success());
        // Nor when a dry run adds one.
        let snapshot = Snapshot::default();
        let c = cycle(&p, &snapshot);
        let mut fork = base.clone();
        assert!(TenantQuota
            .add_pod(&c, &mut fork, &other, &nodes[0])
            .is_success());
        assert!(TenantQuota.filter(&c, &fork, &nodes[0]).is_success());
        // The pod being scheduled is never added against itself.
        assert!(TenantQuota
            .add_pod(&c, &mut fork, &p, &nodes[0])
            .is_success());
        assert!(TenantQuota.filter(&c, &fork, &nodes[0]).is_success());
    }

    #[test]
    fn bad_limit_is_unresolvable() {
        let p = pod("p", Some("t"));
        for bad in [
            "many",
            "-1",
            "+1",
            "1.5",
            "",
            " 2",
            "99999999999999999999999",
        ] {
            let nodes = [node("a", Some(bad), vec![])];
            let (s, state) = pre_filter(&p, &nodes);
            assert!(s.is_success(), "{bad:?}: {s:?}");
            let st = filter(&p, &state, &nodes[0]);
            assert_eq!(st.code, Code::UnschedulableAndUnresolvable, "{bad:?}");
            assert!(st.message().contains(LIMIT_LABEL), "{}", st.message());
            assert!(
                st.message().contains(&format!("{bad:?}")),
                "{}",
                st.message()
            );
        }
    }

    #[test]
    fn missing_state_is_an_error() {
        let p = pod("p", Some("t"));
        let ni = node("a", Some("1"), vec![]);
        let empty = CycleState::default();
        let st = filter(&p, &empty, &ni);
        assert_eq!(st.code, Code::Error);
        assert!(st.message().contains(NAME), "{}", st.message());
        // Also on an unlimited node, and for AddPod/RemovePod.
        assert_eq!(
            filter(&p, &empty, &node("b", None, vec![])).code,
            Code::Error
        );
        let snapshot = Snapshot::default();
        let c = cycle(&p, &snapshot);
        let mut fork = CycleState::default();
        assert_eq!(
            TenantQuota.add_pod(&c, &mut fork, &p, &ni).code,
            Code::Error
        );
        assert_eq!(
            TenantQuota.remove_pod(&c, &mut fork, &p, &ni).code,
            Code::Error
        );
        // A state of another type is as good as none.
        let mut other = CycleState::default();
        other.write(5u32);
        assert_eq!(filter(&p, &other, &ni).code, Code::Error);
    }

    #[test]
    fn declares_extensions_and_events() {
        assert!(TenantQuota.has_extensions());
        assert!(TenantQuota.as_pre_filter().is_some());
        assert!(TenantQuota.as_filter().is_some());
        let ev = TenantQuota.events();
        assert!(ev
            .iter()
            .any(|e| e.resource == "Node" && e.actions.iter().any(|a| a == "UpdateNodeLabel")));
        assert!(ev
            .iter()
            .any(|e| e.resource == "Pod" && e.actions.iter().any(|a| a == "Delete")));
    }
}
