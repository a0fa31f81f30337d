//! Running a workload's ops in order against the embedded cluster: creating nodes,
//! namespaces and pods, barriers, sleeps, deletions, and churn on a timer in the
//! background.

mod any;

use super::*;

/// Pods in `namespaces` (empty: any) created at or after `since` (a
/// [`EmbeddedCluster::next_order`] value) that are bound now, as upstream's throughput
/// collector counts them, and when the first and the last of them were bound.
/// Counting only new pods keeps preemption workloads honest: victims leave the
/// cluster, so a difference of bound totals would undercount.
pub(super) fn bound_since(
    cluster: &EmbeddedCluster,
    since: u64,
    namespaces: &[String],
    labels: &BTreeMap<String, String>,
) -> Bound {
    let mut b = Bound::default();
    for r in cluster.pods().iter().filter(|r| {
        r.order >= since
            && r.pod.node_name.is_some()
            && (namespaces.is_empty() || namespaces.iter().any(|n| **n == *r.pod.namespace))
            && labels.iter().all(|(k, v)| r.pod.labels().get(k) == Some(v))
    }) {
        b.pods += 1;
        // The embedded cluster's bind stamps the start time (created bound: none).
        if let Some(t) = r.pod.spec.start_time {
            b.first_micros = Some(b.first_micros.map_or(t, |f| f.min(t)));
            b.last_micros = Some(b.last_micros.map_or(t, |l| l.max(t)));
        }
    }
    b
}

/// Pods a metrics window counts, and the wall-clock span of their binding.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Bound {
    pub(super) pods: usize,
    /// Microseconds since the epoch.
    pub(super) first_micros: Option<i64>,
    pub(super) last_micros: Option<i64>,
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run_ops(
    w: &workload::Workload,
    cluster: &Arc<EmbeddedCluster>,
    sched: &Arc<Scheduler>,
    opts: &SimulateOptions,
    stuck: StuckRule,
    deadline: Instant,
    progress: &mut Progress,
    measured: &mut Measuring,
) -> Result<(), SimulateError> {
    let mut churn = Churn::default();
    let ctx = OpsContext { stuck, deadline };
    let result = run_ops_inner(w, cluster, sched, opts, ctx, progress, measured, &mut churn);
    // Upstream churn runs until the workload's last op is done.
    let churned = churn.stop();
    result?;
    churned.map_err(|m| SimulateError::Op(format!("{}: {m}", w.name)))
}

/// What every op of a run shares: when to call it settled, and when to give up.
#[derive(Clone)]
pub(super) struct OpsContext {
    pub(super) stuck: StuckRule,
    pub(super) deadline: Instant,
}

/// An open metrics window: where it started, which pods it counts.
type Window<'a> = (Mark, u64, &'a [String], &'a BTreeMap<String, String>);

#[allow(clippy::too_many_arguments)]
pub(super) fn run_ops_inner(
    w: &workload::Workload,
    cluster: &Arc<EmbeddedCluster>,
    sched: &Arc<Scheduler>,
    opts: &SimulateOptions,
    ctx: OpsContext,
    progress: &mut Progress,
    measured: &mut Measuring,
    churn: &mut Churn,
) -> Result<(), SimulateError> {
    let mut window: Option<Window> = None;
    for (i, op) in w.ops.iter().enumerate() {
        let op_err = |m: String| SimulateError::Op(format!("{}: op {i}: {m}", w.name));
        match op {
            Op::CreateNodes {
                count,
                template,
                labels,
                allocatable,
            } => {
                for n in 0..*count {
                    let mut node: core::Node = template.instantiate(n, *count).map_err(op_err)?;
                    if let Some(l) = labels {
                        let (k, v) = match l {
                            NodeLabels::RoundRobin { key, values } => {
                                (key.clone(), values[n % values.len()].clone())
                            }
                            NodeLabels::Unique { key } => (
                                key.clone(),
                                format!(
                                    "{:016x}",
                                    crate::rand::SplitMix64(n as u64 ^ opts.seed).next_u64()
                                ),
                            ),
                        };
                        node.metadata
                            .labels
                            .get_or_insert_with(Default::default)
                            .insert(k, v);
                    }
                    if !allocatable.is_empty() {
                        let status = node.status.get_or_insert_with(Default::default);
                        let alloc = status
                            .allocatable
                            .get_or_insert_with(|| status.capacity.clone().unwrap_or_default());
                        for (k, v) in allocatable {
                            alloc.insert(k.clone(), Quantity(v.clone()));
                        }
                    }
                    if let Some(k) = w.declared_features {
                        node.status
                            .get_or_insert_with(Default::default)
                            .declared_features =
                            Some((1..=k).map(|i| format!("Feature{i}")).collect());
                    }
                    if node.metadata.name.as_deref().is_none_or(str::is_empty) {
                        let prefix = node
                            .metadata
                            .generate_name
                            .clone()
                            .unwrap_or_else(|| format!("node-{i}-"));
                        node.metadata.name = Some(format!("{prefix}{n:05}"));
                    }
                    cluster
                        .create_node(&node)
                        .map_err(|e| op_err(format!("node {n}: {e}")))?;
                }
            }
            Op::CreateNamespaces {
                prefix,
                count,
                template,
            } => {
                for n in 0..*count {
                    let mut ns = template.as_deref().cloned().unwrap_or_default();
                    ns.metadata.name = Some(format!("{prefix}-{n}"));
                    cluster
                        .create_namespace(&ns)
                        .map_err(|e| op_err(e.to_string()))?;
                }
            }
            Op::CreatePods {
                count,
                namespace,
                template,
                skip_wait,
                collect_metrics,
                signature_batch,
                volumes,
                nominated_node_name,
                steady,
            } => {
                if let Some(d) = steady {
                    let mark = measured.mark();
                    let bound = steady_state(cluster, template, namespace, *count, *d, progress)
                        .map_err(op_err)?;
                    if *collect_metrics {
                        measured.record(mark, bound);
                    }
                    wait_settled(sched, cluster, opts.timeout, &ctx.stuck, progress)?;
                    continue;
                }
                let mut pods = Vec::with_capacity(*count);
                for n in 0..*count {
                    let mut p: core::Pod = template.instantiate(n, *count).map_err(op_err)?;
                    p.metadata.namespace = Some(namespace.clone());
                    if let Some(b) = signature_batch {
                        p.metadata
                            .labels
                            .get_or_insert_with(BTreeMap::new)
                            .insert("signature".into(), format!("signature-label-{}", n / b));
                    }
                    if let Some(v) = volumes {
                        any::create_pod_volumes(cluster, v, namespace, n, &mut p)
                            .map_err(op_err)?;
                    }
                    pods.push(p);
                }
                progress.total += count;
                let since = cluster.next_order();
                let mark = measured.mark();
                let mut keys = Vec::with_capacity(pods.len());
                for p in &pods {
                    keys.push(cluster.create_pod(p).map_err(|e| op_err(e.to_string()))?);
                }
                if let Some(node) = nominated_node_name {
                    any::nominate_and_ungate(cluster, &keys, node);
                }
                if !*skip_wait {
                    wait_settled(sched, cluster, opts.timeout, &ctx.stuck, progress)?;
                }
                if *collect_metrics {
                    let bound = bound_since(
                        cluster,
                        since,
                        std::slice::from_ref(namespace),
                        &BTreeMap::new(),
                    );
                    measured.record(mark, bound);
                }
            }
            Op::AllocResourceClaims { namespace } => {
                // The scheduler's view of the claims and devices must be current.
                wait_settled(sched, cluster, opts.timeout, &ctx.stuck, progress)?;
                let nodes = cluster.nodes();
                for c in cluster.claims_in(namespace) {
                    if c.allocation.is_some() {
                        continue;
                    }
                    let a = crate::plugins::dynamicresources::allocate_on_first_fit(
                        &sched.dra, &c, &nodes,
                    )
                    .map_err(op_err)?
                    .ok_or_else(|| {
                        op_err(format!(
                            "allocResourceClaims: claim {} fits on no node",
                            c.key()
                        ))
                    })?;
                    let updated = cluster.allocate_claim(&c, &a).map_err(op_err)?;
                    // Seen at once, so the next claim does not take the same devices.
                    sched
                        .dra
                        .upsert(&crate::model::dra::DraObject::ResourceClaim(updated));
                }
                wait_settled(sched, cluster, opts.timeout, &ctx.stuck, progress)?;
            }
            Op::CreateAny {
                count,
                namespace,
                template,
            } => any::create_any(cluster, *count, namespace.as_deref(), template, progress)
                .map_err(op_err)?,
            Op::UpdateAny {
                count,
                namespace,
                template,
                per_second,
            } => any::update_any(
                cluster,
                *count,
                namespace.as_deref(),
                template,
                *per_second,
                ctx.deadline,
            )
            .map_err(op_err)?,
            Op::CreateResourceDriver {
                driver,
                nodes,
                devices,
            } => any::create_resource_driver(cluster, driver, nodes, *devices).map_err(op_err)?,
            Op::Barrier => wait_settled(sched, cluster, opts.timeout, &ctx.stuck, progress)?,
            Op::Sleep(d) => {
                // A sleep never outlasts the run's --timeout.
                let left = ctx.deadline.saturating_duration_since(Instant::now());
                if *d > left {
                    std::thread::sleep(left);
                    return Err(SimulateError::Timeout {
                        timeout: opts.timeout,
                        pending: format!("op {i} (sleep {d:?}) runs past the time-out"),
                    });
                }
                std::thread::sleep(*d);
            }
            Op::DeletePods {
                namespace,
                selector,
                per_second,
                skip_wait,
            } => {
                // The pods that match when the op starts, as upstream lists them.
                let targets: Vec<(Arc<str>, Arc<str>)> = cluster
                    .pods()
                    .into_iter()
                    .filter(|r| {
                        *r.pod.namespace == **namespace
                            && selector
                                .iter()
                                .all(|(k, v)| r.pod.labels().get(k) == Some(v))
                    })
                    .map(|r| (r.pod.namespace.clone(), r.pod.name.clone()))
                    .collect();
                let deleter = PacedDeleter {
                    cluster: cluster.clone(),
                    targets,
                    per_second: *per_second,
                    deadline: ctx.deadline,
                    background: *skip_wait && per_second.is_some(),
                };
                if deleter.background {
                    churn.spawn_fn(move |stop| deleter.run(stop));
                } else {
                    deleter
                        .run(&std::sync::atomic::AtomicBool::new(false))
                        .map_err(op_err)?;
                }
            }
            Op::Churn {
                mode,
                number,
                interval,
                namespace,
                templates,
            } => {
                let ticker = Churner {
                    cluster: cluster.clone(),
                    mode: *mode,
                    number: *number,
                    interval: *interval,
                    namespace: namespace.clone(),
                    templates: templates.clone(),
                    label: format!("op {i} (churn)"),
                };
                churn.spawn(ticker);
            }
            Op::StartCollectingMetrics { namespaces, labels } => {
                window = Some((measured.mark(), cluster.next_order(), namespaces, labels));
            }
            Op::StopCollectingMetrics => {
                wait_settled(sched, cluster, opts.timeout, &ctx.stuck, progress)?;
                if let Some((mark, since, namespaces, labels)) = window.take() {
                    let pods = bound_since(cluster, since, namespaces, labels);
                    measured.record(mark, pods);
                }
            }
        }
    }
    Ok(())
}

/// Background `churn` ops of one workload run.
#[derive(Default)]
pub(super) struct Churn {
    pub(super) stop: Arc<std::sync::atomic::AtomicBool>,
    pub(super) threads: Vec<std::thread::JoinHandle<Result<(), String>>>,
}

impl Churn {
    pub(super) fn spawn(&mut self, c: Churner) {
        self.spawn_fn(move |stop| c.run(stop));
    }

    /// Runs `f` in the background until it returns or the workload's last op is
    /// done (then `stop` is set).
    pub(super) fn spawn_fn(
        &mut self,
        f: impl FnOnce(&std::sync::atomic::AtomicBool) -> Result<(), String> + Send + 'static,
    ) {
        let stop = self.stop.clone();
        self.threads.push(std::thread::spawn(move || f(&stop)));
    }

    /// Stops every churn thread; the first error any of them hit.
    pub(super) fn stop(self) -> Result<(), String> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut first = Ok(());
        for t in self.threads {
            let r = t
                .join()
                .unwrap_or_else(|_| Err("churn thread panicked".into()));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

/// A `deletePods` op: its pods deleted `per_second` a second (all at once without
/// a rate), as upstream's ticker paces them.
pub(super) struct PacedDeleter {
    pub(super) cluster: Arc<EmbeddedCluster>,
    pub(super) targets: Vec<(Arc<str>, Arc<str>)>,
    pub(super) per_second: Option<u32>,
    pub(super) deadline: Instant,
    pub(super) background: bool,
}

impl PacedDeleter {
    pub(super) fn run(self, stop: &std::sync::atomic::AtomicBool) -> Result<(), String> {
        let started = Instant::now();
        for (i, (ns, name)) in self.targets.iter().enumerate() {
            if let Some(rate) = self.per_second.filter(|r| *r > 0) {
                let due = started + Duration::from_secs_f64((i + 1) as f64 / f64::from(rate));
                // In the background the workload's end stops it; in the foreground
                // it must finish within the run's time-out.
                if !self.background && due > self.deadline {
                    return Err(format!(
                        "deleting {} pods at {rate}/s runs past the time-out",
                        self.targets.len()
                    ));
                }
                while Instant::now() < due {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return Ok(());
                    }
                    std::thread::sleep((due - Instant::now()).min(Duration::from_millis(5)));
                }
            }
            self.cluster.delete_pod(ns, name);
        }
        Ok(())
    }
}

/// One `churn` op: creates (and in recreate mode deletes) objects on a real-time tick.
pub(super) struct Churner {
    pub(super) cluster: Arc<EmbeddedCluster>,
    pub(super) mode: ChurnMode,
    pub(super) number: usize,
    pub(super) interval: Duration,
    pub(super) namespace: String,
    pub(super) templates: Vec<ChurnObject>,
    pub(super) label: String,
}

/// What a churn tick created, so recreate mode can delete it again.
pub(super) enum Churned {
    Pod(String, String),
    Node(String),
    Service(String, String),
}

impl Churner {
    pub(super) fn run(self, stop: &std::sync::atomic::AtomicBool) -> Result<(), String> {
        let mut slots: Vec<Vec<Option<Churned>>> = self
            .templates
            .iter()
            .map(|_| (0..self.number).map(|_| None).collect())
            .collect();
        let mut ticks = 0usize;
        let mut serial = 0u64;
        loop {
            let next = Instant::now() + self.interval;
            while Instant::now() < next {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return Ok(());
                }
                std::thread::sleep((next - Instant::now()).min(Duration::from_millis(5)));
            }
            for (t, template) in self.templates.iter().enumerate() {
                match self.mode {
                    ChurnMode::Create => {
                        serial += 1;
                        self.create(template, serial)?;
                    }
                    ChurnMode::Recreate => {
                        let slot = &mut slots[t][ticks % self.number];
                        match slot.take() {
                            Some(obj) => self.delete(obj),
                            None => {
                                serial += 1;
                                *slot = Some(self.create(template, serial)?);
                            }
                        }
                    }
                }
            }
            ticks += 1;
            if self.mode == ChurnMode::Create && ticks == self.number {
                return Ok(());
            }
        }
    }

    /// Names a generateName object: the prefix, the op's label-free serial.
    pub(super) fn name(&self, generate_name: Option<&str>, kind: &str, serial: u64) -> String {
        format!("{}{serial:05}", generate_name.unwrap_or(kind))
    }

    pub(super) fn create(&self, template: &ChurnObject, serial: u64) -> Result<Churned, String> {
        let err = |e: String| format!("{}: {e}", self.label);
        match template {
            ChurnObject::Pod(p) => {
                let mut p = (**p).clone();
                p.metadata.namespace = Some(self.namespace.clone());
                let key = self
                    .cluster
                    .create_pod(&p)
                    .map_err(|e| err(e.to_string()))?;
                let name = key.rsplit('/').next().unwrap_or_default().to_string();
                Ok(Churned::Pod(self.namespace.clone(), name))
            }
            ChurnObject::Node(n) => {
                let mut n = (**n).clone();
                if n.metadata.name.as_deref().is_none_or(str::is_empty) {
                    n.metadata.name =
                        Some(self.name(n.metadata.generate_name.as_deref(), "node-churn-", serial));
                }
                let name = self
                    .cluster
                    .create_node(&n)
                    .map_err(|e| err(e.to_string()))?;
                Ok(Churned::Node(name.to_string()))
            }
            ChurnObject::Service(s) => {
                let mut s = (**s).clone();
                s.metadata.namespace = Some(self.namespace.clone());
                if s.metadata.name.as_deref().is_none_or(str::is_empty) {
                    s.metadata.name = Some(self.name(
                        s.metadata.generate_name.as_deref(),
                        "service-churn-",
                        serial,
                    ));
                }
                let sel =
                    crate::model::convert::service_selector(&s).map_err(|e| err(e.to_string()))?;
                let name = sel.name.to_string();
                self.cluster.add_selector(sel);
                Ok(Churned::Service(self.namespace.clone(), name))
            }
        }
    }

    pub(super) fn delete(&self, obj: Churned) {
        match obj {
            Churned::Pod(ns, name) => {
                self.cluster.delete_pod(&ns, &name);
            }
            Churned::Node(name) => {
                self.cluster.delete_node(&name);
            }
            Churned::Service(ns, name) => {
                self.cluster
                    .delete_selector(crate::model::node::WorkloadKind::Service, &ns, &name);
            }
        }
    }
}

/// scheduler_perf's steady state: `count` pods from `template`; for `duration`, each
/// pod that gets bound is deleted and replaced by the next one, so the scheduler always
/// has `count` to place. Returns what was bound, and when the stretch began.
fn steady_state(
    cluster: &EmbeddedCluster,
    template: &crate::simulate::workload::Template<core::Pod>,
    namespace: &str,
    count: usize,
    duration: std::time::Duration,
    progress: &mut Progress,
) -> Result<Bound, String> {
    let started = std::time::Instant::now();
    let mut next = 0usize;
    let create = |next: &mut usize| -> Result<String, String> {
        let mut p: core::Pod = template.instantiate(*next, count)?;
        p.metadata.namespace = Some(namespace.to_string());
        *next += 1;
        cluster.create_pod(&p).map_err(|e| e.to_string())
    };
    let mut live: Vec<String> = Vec::with_capacity(count);
    for _ in 0..count {
        live.push(create(&mut next)?);
    }
    progress.total += count;
    let mut bound = Bound::default();
    while started.elapsed() < duration {
        let mut replaced = false;
        for key in live.iter_mut() {
            let (ns, name) = key.split_once('/').unwrap_or(("", key.as_str()));
            let Some(r) = cluster.pod(ns, name) else {
                continue;
            };
            if r.pod.node_name.is_none() {
                continue;
            }
            bound.pods += 1;
            if let Some(t) = r.pod.spec.start_time {
                bound.first_micros = Some(bound.first_micros.map_or(t, |f| f.min(t)));
                bound.last_micros = Some(bound.last_micros.map_or(t, |l| l.max(t)));
            }
            cluster.delete_pod(ns, name);
            *key = create(&mut next)?;
            progress.total += 1;
            replaced = true;
        }
        if !replaced {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
    Ok(bound)
}
