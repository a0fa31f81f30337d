//! Builders for model objects in tests: terse, and the same everywhere.

use std::sync::Arc;

use crate::model::labels::{
    NodeSelector, NodeSelectorTerm, Operator, PreferredSchedulingTerm, Requirement,
};
use crate::model::pod::{HostPort, PodSpec, Protocol};
use crate::model::resource::ResourceName;
use crate::model::{Labels, Node, NodeImage, Pod, Resource, Taint, TaintEffect, Toleration};

pub struct NodeBuilder(Node);

/// A node with 4 CPUs, 32Gi and 110 pod slots unless changed.
pub fn node(name: &str) -> NodeBuilder {
    NodeBuilder(Node {
        name: name.into(),
        uid: format!("node-uid-{name}").into(),
        labels: Labels::default(),
        allocatable: Resource {
            milli_cpu: 4000,
            memory: 32 << 30,
            allowed_pod_number: 110,
            ..Default::default()
        },
        taints: Box::new([]),
        unschedulable: false,
        images: Box::new([]),
        declared_features: Default::default(),
    })
}

impl NodeBuilder {
    pub fn cpu(mut self, milli: i64) -> Self {
        self.0.allocatable.milli_cpu = milli;
        self
    }
    pub fn memory(mut self, bytes: i64) -> Self {
        self.0.allocatable.memory = bytes;
        self
    }
    pub fn pods(mut self, n: i64) -> Self {
        self.0.allocatable.allowed_pod_number = n;
        self
    }
    pub fn scalar(mut self, name: &str, v: i64) -> Self {
        let n: ResourceName = Arc::from(name);
        self.0.allocatable.scalar.set(&n, v);
        self
    }
    pub fn label(mut self, k: &str, v: &str) -> Self {
        let mut pairs: Vec<(String, String)> = self
            .0
            .labels
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        pairs.push((k.to_string(), v.to_string()));
        self.0.labels = Labels::new(pairs);
        self
    }
    pub fn taint(mut self, k: &str, v: &str, effect: TaintEffect) -> Self {
        let mut t = self.0.taints.to_vec();
        t.push(Taint {
            key: k.into(),
            value: v.into(),
            effect,
        });
        self.0.taints = t.into();
        self
    }
    pub fn unschedulable(mut self) -> Self {
        self.0.unschedulable = true;
        self
    }
    pub fn image(mut self, name: &str, size: i64) -> Self {
        let mut v = self.0.images.to_vec();
        v.push(NodeImage {
            name: name.into(),
            size,
        });
        v.sort_by(|a, b| a.name.cmp(&b.name));
        self.0.images = v.into();
        self
    }
    pub fn declared_features(mut self, names: &[&str]) -> Self {
        self.0.declared_features =
            crate::model::features::FeatureSet::of_names(names.iter().copied());
        self
    }
    pub fn build(self) -> Arc<Node> {
        Arc::new(self.0)
    }
}

pub struct PodBuilder {
    pod: Pod,
    spec: PodSpec,
}

/// A pod in namespace `default` requesting nothing, for the default scheduler.
pub fn pod(name: &str) -> PodBuilder {
    PodBuilder {
        pod: Pod {
            uid: format!("uid-{name}").into(),
            namespace: "default".into(),
            name: name.into(),
            node_name: None,
            nominated_node_name: None,
            deletion_timestamp: None,
            resource_version: None,
            phase: Default::default(),
            preempted_by_scheduler: false,
            unschedulable_condition: None,
            spec: Arc::new(PodSpec::default()),
        },
        spec: PodSpec {
            scheduler_name: "default-scheduler".into(),
            non_zero_milli_cpu: crate::model::resource::DEFAULT_MILLI_CPU_REQUEST,
            non_zero_memory: crate::model::resource::DEFAULT_MEMORY_REQUEST,
            image_slots: 1,
            ..Default::default()
        },
    }
}

impl PodBuilder {
    pub fn namespace(mut self, ns: &str) -> Self {
        self.pod.namespace = ns.into();
        self
    }
    pub fn node(mut self, n: &str) -> Self {
        self.pod.node_name = Some(n.into());
        self
    }
    pub fn nominated(mut self, n: &str) -> Self {
        self.pod.nominated_node_name = Some(n.into());
        self
    }
    pub fn priority(mut self, p: i32) -> Self {
        self.spec.priority = p;
        self
    }
    pub fn scheduler(mut self, s: &str) -> Self {
        self.spec.scheduler_name = s.into();
        self
    }
    /// CPU request in millicores (also the non-zero value).
    pub fn cpu(mut self, milli: i64) -> Self {
        self.spec.requests.milli_cpu = milli;
        self.spec.non_zero_milli_cpu = milli;
        self
    }
    pub fn memory(mut self, bytes: i64) -> Self {
        self.spec.requests.memory = bytes;
        self.spec.non_zero_memory = bytes;
        self
    }
    pub fn scalar(mut self, name: &str, v: i64) -> Self {
        let n: ResourceName = Arc::from(name);
        self.spec.requests.scalar.set(&n, v);
        self
    }
    pub fn label(mut self, k: &str, v: &str) -> Self {
        let mut pairs: Vec<(String, String)> = self
            .spec
            .labels
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        pairs.push((k.to_string(), v.to_string()));
        self.spec.labels = Labels::new(pairs);
        self
    }
    pub fn toleration(mut self, t: Toleration) -> Self {
        let mut v = self.spec.tolerations.to_vec();
        v.push(t);
        self.spec.tolerations = v.into();
        self
    }
    pub fn host_port(mut self, port: i32) -> Self {
        let mut v = self.spec.host_ports.to_vec();
        v.push(HostPort {
            ip: "0.0.0.0".into(),
            protocol: Protocol::Tcp,
            port,
        });
        self.spec.host_ports = v.into();
        self
    }
    pub fn node_selector(mut self, k: &str, v: &str) -> Self {
        let mut pairs: Vec<(String, String)> = self
            .spec
            .node_selector
            .iter()
            .flat_map(|l| l.iter().map(|(a, b)| (a.to_string(), b.to_string())))
            .collect();
        pairs.push((k.to_string(), v.to_string()));
        self.spec.node_selector = Some(Labels::new(pairs));
        self
    }
    /// Required node affinity: one term `key In values`.
    pub fn node_affinity_in(mut self, key: &str, values: &[&str]) -> Self {
        let req = Requirement::new(
            key,
            Operator::In,
            values.iter().map(|s| s.to_string()).collect(),
        )
        .expect("valid requirement in test");
        self.spec.required_node_affinity = Some(NodeSelector {
            terms: Box::new([NodeSelectorTerm {
                match_expressions: Box::new([req]),
                valid: true,
                ..Default::default()
            }]),
        });
        self
    }
    pub fn preferred_node_affinity(mut self, weight: i32, key: &str, values: &[&str]) -> Self {
        let req = Requirement::new(
            key,
            Operator::In,
            values.iter().map(|s| s.to_string()).collect(),
        )
        .expect("valid requirement in test");
        let mut v = self.spec.preferred_node_affinity.to_vec();
        v.push(PreferredSchedulingTerm {
            weight,
            term: NodeSelectorTerm {
                match_expressions: Box::new([req]),
                valid: true,
                ..Default::default()
            },
        });
        self.spec.preferred_node_affinity = v.into();
        self
    }
    pub fn image(mut self, name: &str) -> Self {
        let mut v = self.spec.images.to_vec();
        v.push(crate::model::node::normalized_image_name(name).into());
        self.spec.image_slots = v.len().max(1);
        self.spec.images = v.into();
        self
    }
    pub fn gate(mut self, name: &str) -> Self {
        let mut v = self.spec.scheduling_gates.to_vec();
        v.push(name.into());
        self.spec.scheduling_gates = v.into();
        self
    }
    pub fn spec(mut self, f: impl FnOnce(&mut PodSpec)) -> Self {
        f(&mut self.spec);
        self
    }
    pub fn required_features(mut self, names: &[&str]) -> Self {
        self.spec.required_features =
            crate::model::features::FeatureSet::of_names(names.iter().copied());
        self
    }
    pub fn build(mut self) -> Arc<Pod> {
        self.pod.spec = Arc::new(self.spec);
        Arc::new(self.pod)
    }
}

/// A cluster client that accepts everything and does nothing (unit tests).
pub struct NoopClient;

impl crate::client::ClusterClient for NoopClient {
    fn bind<'a>(
        &'a self,
        _pod: &'a Pod,
        _node: &'a str,
    ) -> crate::framework::BoxFuture<'a, Result<(), crate::client::ClientError>> {
        Box::pin(async { Ok(()) })
    }
    fn update_pod_status<'a>(
        &'a self,
        _pod: &'a Pod,
        _update: crate::client::PodStatusUpdate,
    ) -> crate::framework::BoxFuture<'a, Result<(), crate::client::ClientError>> {
        Box::pin(async { Ok(()) })
    }
    fn delete_pod<'a>(
        &'a self,
        _pod: &'a Pod,
        _preemptor: &'a Pod,
    ) -> crate::framework::BoxFuture<'a, Result<(), crate::client::ClientError>> {
        Box::pin(async { Ok(()) })
    }
    fn record_event(&self, _event: crate::client::PodEvent) {}
}

/// The default profile's framework over a no-op client (unit tests).
pub fn default_framework() -> Arc<crate::framework::Framework> {
    let config = crate::config::SchedulerConfig::default_config();
    let handle = Arc::new(crate::framework::Handle::new(
        Arc::new(crate::framework::waiting_pods::WaitingPods::default()),
        Arc::new(NoopClient),
    ));
    match crate::framework::Framework::new(
        &config.profiles[0],
        &crate::plugins::in_tree_registry(),
        handle,
    ) {
        Ok(f) => Arc::new(f),
        Err(e) => panic!("default framework must build: {e}"),
    }
}
