//! The `kubernetes` backend: the `kube` crate against an API server.
//!
//! Watching is done with kube's watchers (list, then watch from the list's
//! resourceVersion; on a dropped watch they resume, on `410 Gone` they list again),
//! one per kind. Each watcher keeps the objects it has delivered, so an update is
//! sent with its old object, a relist's missing objects become deletions, and an
//! object whose resourceVersion did not change is not sent twice. Namespaces,
//! nodes, PDBs and the workloads default topology spreading reads are listed first;
//! pods once those are synced, and `Synced` once the pods are: the cache is warm
//! before the first cycle, as kube-scheduler waits for its informers.
//!
//! Acting: bind through `pods/binding`, PodScheduled and nominatedNodeName through a
//! strategic-merge patch of `pods/status`, victims marked `DisruptionTarget` then
//! deleted with a UID precondition, `events.k8s.io/v1` Events. Bindings and events,
//! the two writes every pod costs, go in protobuf ([`super::kubeproto`]) as
//! kube-scheduler's do, and as JSON if the server refuses it. Writes go through one
//! client-side rate limiter (`clientConnection.qps`/`burst`); none of them runs on the
//! scheduling thread.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::kubeproto;
use crate::client::BoxFuture;
use crate::client::{
    ClientError, ClusterBackend, ClusterClient, EventSink, EventType, PodEvent, PodStatusUpdate,
    WatchEvent,
};
use crate::model::convert::{self, SystemPriorities};
use crate::model::Pod;

/// The field manager and the events' reporting controller.
pub const FIELD_MANAGER: &str = "switchyard";

/// How many writes may wait on the API server at once. kube's client speaks
/// HTTP/1.1, one request per connection at a time, and opens a new TLS connection for
/// every request that finds none idle: without a bound, the backlog a scheduler
/// drains at start (thousands of bindings in a second) became thousands of TLS
/// handshakes the API server had to serve before the first binding, and almost
/// nothing was bound for the first seconds. A few dozen kept-alive connections carry
/// more writes per second than the API server can take on two cores.
pub const MAX_WRITES_IN_FLIGHT: usize = 32;
/// The same for events (client-go's recorder writes them from one worker).
pub const MAX_EVENTS_IN_FLIGHT: usize = 8;

/// Client-side limits and identity.
#[derive(Clone, Debug)]
pub struct KubernetesOptions {
    /// Writes per second (KubeSchedulerConfiguration `clientConnection.qps`).
    pub qps: f32,
    /// Writes allowed in a burst (`clientConnection.burst`).
    pub burst: u32,
    /// Names this process in events (`reportingInstance`), e.g. the pod name.
    pub instance: String,
}

impl Default for KubernetesOptions {
    /// kube-scheduler's defaults: qps 50, burst 100.
    fn default() -> Self {
        KubernetesOptions {
            qps: 50.0,
            burst: 100,
            instance: FIELD_MANAGER.into(),
        }
    }
}

/// A cluster behind an API server.
pub struct KubernetesCluster {
    client: kube::Client,
    runtime: tokio::runtime::Handle,
    limiter: Arc<RateLimiter>,
    /// Writes in flight (bindings, status patches, deletions).
    writes: Arc<tokio::sync::Semaphore>,
    /// Event creates in flight, apart so events never hold bindings back.
    events: Arc<tokio::sync::Semaphore>,
    options: KubernetesOptions,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Bindings and events go as protobuf until the API server refuses the media
    /// type (415); then as JSON.
    protobuf: Arc<AtomicBool>,
}

impl KubernetesCluster {
    /// `runtime` runs the watchers and the fire-and-forget writes (events).
    pub fn new(
        client: kube::Client,
        runtime: tokio::runtime::Handle,
        options: KubernetesOptions,
    ) -> Self {
        KubernetesCluster {
            client,
            runtime,
            limiter: Arc::new(RateLimiter::new(options.qps, options.burst)),
            writes: Arc::new(tokio::sync::Semaphore::new(MAX_WRITES_IN_FLIGHT)),
            events: Arc::new(tokio::sync::Semaphore::new(MAX_EVENTS_IN_FLIGHT)),
            options,
            tasks: Mutex::new(Vec::new()),
            protobuf: Arc::new(AtomicBool::new(true)),
        }
    }

    fn pods(&self, namespace: &str) -> Api<core::Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Stops every watcher (the scheduler is shutting down).
    pub fn stop(&self) {
        if let Ok(mut t) = self.tasks.lock() {
            for h in t.drain(..) {
                h.abort();
            }
        }
    }
}

impl Drop for KubernetesCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What a watcher delivers, before it becomes a [`WatchEvent`].
enum Change<M> {
    Add(M),
    Update(M, M),
    Delete(M),
}

/// Counts the kinds still listing; the last one to finish fires `done`.
struct Pending {
    left: AtomicUsize,
    done: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl Pending {
    fn new(n: usize) -> (Arc<Self>, tokio::sync::oneshot::Receiver<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (
            Arc::new(Pending {
                left: AtomicUsize::new(n),
                done: Mutex::new(Some(tx)),
            }),
            rx,
        )
    }

    fn one_done(&self) {
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(tx) = self.done.lock().ok().and_then(|mut d| d.take()) {
                let _ = tx.send(());
            }
        }
    }
}

/// Runs one kind's watcher until the sink closes. `convert` returns `None` for an
/// object the scheduler cannot use (logged once per version).
async fn watch_kind<K, M>(
    api: Api<K>,
    config: watcher::Config,
    kind: &'static str,
    convert: impl Fn(&K) -> Option<M> + Send + 'static,
    emit: impl Fn(Change<M>) -> bool + Send + 'static,
    synced: Arc<Pending>,
) where
    K: kube::Resource + Clone + Debug + DeserializeOwned + Send + 'static,
    M: Clone + Send + 'static,
{
    // key -> (resourceVersion, object)
    let mut store: HashMap<String, (String, M)> = HashMap::new();
    let mut relist: Option<HashSet<String>> = None;
    let mut first = true;
    let key = |o: &K| {
        let m = o.meta();
        format!(
            "{}/{}",
            m.namespace.as_deref().unwrap_or(""),
            m.name.as_deref().unwrap_or("")
        )
    };
    let rv = |o: &K| o.meta().resource_version.clone().unwrap_or_default();
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    // Applies an added or modified object; false when the sink is gone.
    let apply = |store: &mut HashMap<String, (String, M)>, o: &K| -> bool {
        let k = key(o);
        let v = rv(o);
        if store
            .get(&k)
            .is_some_and(|(old, _)| *old == v && !v.is_empty())
        {
            return true;
        }
        let Some(m) = convert(o) else {
            // Unusable now: forget the old version, as if deleted.
            return match store.remove(&k) {
                Some((_, old)) => emit(Change::Delete(old)),
                None => true,
            };
        };
        match store.insert(k, (v, m.clone())) {
            Some((_, old)) => emit(Change::Update(old, m)),
            None => emit(Change::Add(m)),
        }
    };
    while let Some(ev) = stream.next().await {
        let ok = match ev {
            Err(e) => {
                // The watcher retries with backoff (relisting after 410 Gone).
                let (verb, err) = match &e {
                    watcher::Error::InitialListFailed(err) => ("list", Some(err)),
                    watcher::Error::WatchStartFailed(err) => ("watch", Some(err)),
                    watcher::Error::WatchFailed(err) => ("watch", Some(err)),
                    _ => ("watch", None),
                };
                match (err, &e) {
                    (Some(err), _) => report_api_error(
                        verb,
                        resource_of(kind),
                        &format!("{kind} watch; retrying"),
                        err,
                    ),
                    // 410 Gone: the resourceVersion is too old (an API server restart
                    // or compaction); the watcher lists again. Routine, not a fault.
                    (None, watcher::Error::WatchError(s)) if s.code == 410 => {
                        tracing::info!(kind, "watch expired (410 Gone); listing again")
                    }
                    (None, _) => tracing::warn!(kind, error = %e, "watch failed; retrying"),
                }
                true
            }
            Ok(Event::Init) => {
                relist = Some(HashSet::new());
                true
            }
            Ok(Event::InitApply(o)) => {
                if let Some(seen) = relist.as_mut() {
                    seen.insert(key(&o));
                }
                apply(&mut store, &o)
            }
            Ok(Event::InitDone) => {
                let seen = relist.take().unwrap_or_default();
                let gone: Vec<String> = store
                    .keys()
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect();
                let mut ok = true;
                for k in gone {
                    if let Some((_, old)) = store.remove(&k) {
                        ok &= emit(Change::Delete(old));
                    }
                }
                if first {
                    first = false;
                    tracing::debug!(kind, objects = store.len(), "initial list synced");
                    synced.one_done();
                }
                ok
            }
            Ok(Event::Apply(o)) => apply(&mut store, &o),
            Ok(Event::Delete(o)) => match store.remove(&key(&o)) {
                Some((_, old)) => emit(Change::Delete(old)),
                None => true,
            },
        };
        if !ok {
            return;
        }
    }
}

fn usable<T, E: std::fmt::Display>(kind: &str, name: Option<&str>, r: Result<T, E>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(kind, name = name.unwrap_or(""), error = %e, "object ignored");
            None
        }
    }
}

impl ClusterBackend for KubernetesCluster {
    fn start(&self, sink: EventSink) {
        let c = self.client.clone();
        let mut tasks = Vec::new();
        // Everything pods refer to first; pods once these have listed.
        // Namespaces, nodes, PDBs, the four workload kinds and the six storage kinds.
        // PriorityClasses are not watched: admission has set spec.priority.
        let (before_pods, before_pods_done) = Pending::new(13);
        let spawn = |f: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>| {
            self.runtime.spawn(f)
        };
        let name = |m: &kube::api::ObjectMeta| m.name.clone();
        {
            let s = sink.clone();
            tasks.push(spawn(Box::pin(watch_kind(
                Api::<core::Namespace>::all(c.clone()),
                watcher::Config::default(),
                "Namespace",
                move |o: &core::Namespace| {
                    usable(
                        "Namespace",
                        name(&o.metadata).as_deref(),
                        convert::namespace_from_k8s(o),
                    )
                },
                move |ch| match ch {
                    Change::Add(n) | Change::Update(_, n) => s.send(WatchEvent::NamespaceUpsert(n)),
                    Change::Delete(n) => s.send(WatchEvent::NamespaceDelete(n.name)),
                },
                before_pods.clone(),
            ))));
        }
        {
            let s = sink.clone();
            tasks.push(spawn(Box::pin(watch_kind(
                Api::<core::Node>::all(c.clone()),
                watcher::Config::default(),
                "Node",
                move |o: &core::Node| {
                    let uid = || o.metadata.name.clone().unwrap_or_default();
                    usable(
                        "Node",
                        name(&o.metadata).as_deref(),
                        convert::node_from_k8s(o, uid),
                    )
                    .map(Arc::new)
                },
                move |ch| match ch {
                    Change::Add(n) => s.send(WatchEvent::NodeAdd(n)),
                    Change::Update(o, n) => s.send(WatchEvent::NodeUpdate(o, n)),
                    Change::Delete(n) => s.send(WatchEvent::NodeDelete(n)),
                },
                before_pods.clone(),
            ))));
        }
        {
            let s = sink.clone();
            tasks.push(spawn(Box::pin(watch_kind(
                Api::<policy::PodDisruptionBudget>::all(c.clone()),
                watcher::Config::default(),
                "PodDisruptionBudget",
                move |o: &policy::PodDisruptionBudget| {
                    usable(
                        "PodDisruptionBudget",
                        name(&o.metadata).as_deref(),
                        convert::pdb_from_k8s(o),
                    )
                    .map(Arc::new)
                },
                move |ch| match ch {
                    Change::Add(p) | Change::Update(_, p) => s.send(WatchEvent::PdbUpsert(p)),
                    Change::Delete(p) => s.send(WatchEvent::PdbDelete {
                        namespace: p.namespace.clone(),
                        name: p.name.clone(),
                    }),
                },
                before_pods.clone(),
            ))));
        }
        macro_rules! workload {
            ($ty:ty, $kind:literal, $conv:path) => {{
                let s = sink.clone();
                tasks.push(spawn(Box::pin(watch_kind(
                    Api::<$ty>::all(c.clone()),
                    watcher::Config::default(),
                    $kind,
                    move |o: &$ty| {
                        usable($kind, name(&o.metadata).as_deref(), $conv(o)).map(Arc::new)
                    },
                    move |ch| match ch {
                        Change::Add(w) | Change::Update(_, w) => {
                            s.send(WatchEvent::WorkloadSelectorUpsert(w))
                        }
                        Change::Delete(w) => s.send(WatchEvent::WorkloadSelectorDelete {
                            kind: w.kind,
                            namespace: w.namespace.clone(),
                            name: w.name.clone(),
                        }),
                    },
                    before_pods.clone(),
                ))));
            }};
        }
        workload!(core::Service, "Service", convert::service_selector);
        workload!(
            core::ReplicationController,
            "ReplicationController",
            convert::replication_controller_selector
        );
        workload!(
            apps::ReplicaSet,
            "ReplicaSet",
            convert::replica_set_selector
        );
        workload!(
            apps::StatefulSet,
            "StatefulSet",
            convert::stateful_set_selector
        );
        macro_rules! storage {
            ($ty:ty, $kind:literal, $conv:expr, $variant:path) => {{
                let s = sink.clone();
                tasks.push(spawn(Box::pin(watch_kind(
                    Api::<$ty>::all(c.clone()),
                    watcher::Config::default(),
                    $kind,
                    move |o: &$ty| {
                        usable($kind, name(&o.metadata).as_deref(), $conv(o)).map(Arc::new)
                    },
                    move |ch| match ch {
                        Change::Add(o) | Change::Update(_, o) => {
                            s.send(WatchEvent::StorageUpsert($variant(o)))
                        }
                        Change::Delete(o) => s.send(WatchEvent::StorageDelete($variant(o))),
                    },
                    before_pods.clone(),
                ))));
            }};
        }
        use crate::model::storage::StorageObject as S;
        use k8s_openapi::api::storage::v1 as storage;
        storage!(
            core::PersistentVolumeClaim,
            "PersistentVolumeClaim",
            |o: &core::PersistentVolumeClaim| convert::pvc_from_k8s(o, String::new),
            S::Pvc
        );
        storage!(
            core::PersistentVolume,
            "PersistentVolume",
            convert::pv_from_k8s,
            S::Pv
        );
        storage!(
            storage::StorageClass,
            "StorageClass",
            convert::storage_class_from_k8s,
            S::StorageClass
        );
        storage!(
            storage::CSINode,
            "CSINode",
            convert::csi_node_from_k8s,
            S::CsiNode
        );
        storage!(
            storage::CSIDriver,
            "CSIDriver",
            convert::csi_driver_from_k8s,
            S::CsiDriver
        );
        storage!(
            storage::CSIStorageCapacity,
            "CSIStorageCapacity",
            convert::csi_storage_capacity_from_k8s,
            S::CsiStorageCapacity
        );
        drop(before_pods);

        let s = sink.clone();
        let pods = Api::<core::Pod>::all(c.clone());
        let runtime = self.runtime.clone();
        tasks.push(spawn(Box::pin(async move {
            if before_pods_done.await.is_err() {
                return;
            }
            let (pods_synced, pods_done) = Pending::new(1);
            let s2 = s.clone();
            let watch = runtime.spawn(watch_kind(
                pods,
                // As kube-scheduler's informer: finished pods use nothing.
                watcher::Config::default().fields("status.phase!=Succeeded,status.phase!=Failed"),
                "Pod",
                move |o: &core::Pod| {
                    let uid = || o.metadata.uid.clone().unwrap_or_default();
                    usable(
                        "Pod",
                        name(&o.metadata).as_deref(),
                        convert::pod_from_k8s(o, &SystemPriorities, uid),
                    )
                    .map(Arc::new)
                },
                move |ch| match ch {
                    Change::Add(p) => s2.send(WatchEvent::PodAdd(p)),
                    Change::Update(o, p) => s2.send(WatchEvent::PodUpdate(o, p)),
                    Change::Delete(p) => s2.send(WatchEvent::PodDelete(p)),
                },
                pods_synced,
            ));
            if pods_done.await.is_ok() {
                s.send(WatchEvent::Synced);
            }
            let _ = watch.await;
        })));
        if let Ok(mut t) = self.tasks.lock() {
            t.extend(tasks);
        }
    }
}

/// The API resource a watched kind is listed as (for errors and metrics).
fn resource_of(kind: &str) -> &'static str {
    match kind {
        "Pod" => "pods",
        "Node" => "nodes",
        "Namespace" => "namespaces",
        "PodDisruptionBudget" => "poddisruptionbudgets",
        "Service" => "services",
        "ReplicationController" => "replicationcontrollers",
        "ReplicaSet" => "replicasets",
        "StatefulSet" => "statefulsets",
        "PersistentVolumeClaim" => "persistentvolumeclaims",
        "PersistentVolume" => "persistentvolumes",
        "StorageClass" => "storageclasses",
        "CSINode" => "csinodes",
        "CSIDriver" => "csidrivers",
        "CSIStorageCapacity" => "csistoragecapacities",
        _ => "unknown",
    }
}

fn pod_key(pod: &Pod) -> String {
    format!("pod {}/{}", pod.namespace, pod.name)
}

fn is_code(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// The event name client-go's recorder gives: `<object>.<hex unix nanoseconds>`.
fn event_name(object: &str, at: k8s_openapi::jiff::Timestamp) -> String {
    format!("{object}.{:x}", at.as_nanosecond())
}

/// The status code of a failed request, or `transport` when none came back.
fn error_code(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.code.to_string(),
        _ => "transport".into(),
    }
}

/// How often one kind of failure (verb, resource, code) is logged: a storm of refused
/// writes (every bind during an API server outage) is one line per interval, with
/// the count of the ones not shown.
const API_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

type ErrorLogState = HashMap<(String, String, String), (Instant, u64)>;
static API_ERROR_LOG: std::sync::LazyLock<Mutex<ErrorLogState>> =
    std::sync::LazyLock::new(|| Mutex::new(HashMap::new()));

/// Counts a failed API request in `switchyard_api_errors_total{verb,resource,code}`
/// and logs it at warn with the API server's own message, at most once per
/// [`API_ERROR_LOG_INTERVAL`] for each verb, resource and code. Never silent: a
/// refused write is something the operator must see (RBAC, admission, validation).
pub fn report_api_error(verb: &str, resource: &str, what: &str, e: &kube::Error) {
    let code = error_code(e);
    crate::telemetry::metrics::API_ERRORS.add(&[verb, resource, &code], 1);
    let now = Instant::now();
    let suppressed = {
        let Ok(mut log) = API_ERROR_LOG.lock() else {
            return;
        };
        let key = (verb.to_string(), resource.to_string(), code.clone());
        match log.get_mut(&key) {
            Some((last, skipped)) if now.duration_since(*last) < API_ERROR_LOG_INTERVAL => {
                *skipped += 1;
                return;
            }
            Some((last, skipped)) => {
                *last = now;
                std::mem::take(skipped)
            }
            None => {
                log.insert(key, (now, 0));
                0
            }
        }
    };
    let message = match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    };
    tracing::warn!(
        verb,
        resource,
        code = %code,
        object = what,
        suppressed_since_last = suppressed,
        "API server refused {verb} {resource}: {message}"
    );
}

/// POSTs a body in Kubernetes' protobuf encoding ([`kubeproto`]) to `path` and asks
/// for the answer in it too. `Ok(false)` when the server refuses the media type
/// (415): the caller writes JSON instead. A refusal is a `kube::Error::Api` with
/// the server's own Status, as kube's JSON calls give.
async fn post_protobuf(
    client: &kube::Client,
    path: &str,
    body: Vec<u8>,
) -> Result<bool, kube::Error> {
    let req = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, kubeproto::PROTOBUF)
        .header(http::header::ACCEPT, kubeproto::PROTOBUF)
        .body(kube::client::Body::from(body))
        .map_err(kube::Error::HttpError)?;
    let res = client.send(req).await?;
    let code = res.status();
    let protobuf_reply = res
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(kubeproto::PROTOBUF));
    // Read the whole answer even when it is not needed: an unread body would close
    // the kept-alive connection and cost a new TLS handshake.
    let body = res.into_body().collect_bytes().await?;
    if code.is_success() {
        return Ok(true);
    }
    if code == http::StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return Ok(false);
    }
    let status = if protobuf_reply {
        kubeproto::decode_status(&body).map(|s| {
            kube::core::Status::failure(
                s.message.as_deref().unwrap_or_default(),
                s.reason.as_deref().unwrap_or_default(),
            )
        })
    } else {
        serde_json::from_slice::<kube::core::Status>(&body).ok()
    };
    let status = status
        .unwrap_or_else(|| kube::core::Status::failure(String::from_utf8_lossy(&body).trim(), ""));
    Err(kube::Error::Api(status.with_code(code.as_u16()).boxed()))
}

/// Notes, once, that the API server takes no protobuf, so JSON is written from now on.
fn protobuf_refused(flag: &AtomicBool) {
    if flag.swap(false, Ordering::Relaxed) {
        tracing::info!(
            "the API server refused protobuf bodies (415); writing bindings and events as JSON"
        );
    }
}

fn client_error(what: &str, e: kube::Error) -> ClientError {
    match &e {
        kube::Error::Api(s) if s.code == 404 => ClientError::NotFound(what.to_string()),
        kube::Error::Api(s) if s.code == 409 => ClientError::Conflict(s.message.clone()),
        _ => ClientError::Other(format!("{what}: {e}")),
    }
}

/// RFC 3339 with seconds, as metav1.Time serialises.
fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

impl ClusterClient for KubernetesCluster {
    fn bind<'a>(&'a self, pod: &'a Pod, node: &'a str) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(async move {
            self.limiter.acquire().await;
            let _permit = self.writes.acquire().await;
            let failed = |e: kube::Error| {
                report_api_error("create", "pods/binding", &pod_key(pod), &e);
                client_error(&format!("pods \"{}\"", pod.name), e)
            };
            if self.protobuf.load(Ordering::Relaxed) {
                let path = format!(
                    "/api/v1/namespaces/{}/pods/{}/binding",
                    pod.namespace, pod.name
                );
                let body = kubeproto::binding(&pod.namespace, &pod.name, &pod.uid, node);
                match post_protobuf(&self.client, &path, body).await {
                    Ok(true) => return Ok(()),
                    Ok(false) => protobuf_refused(&self.protobuf),
                    Err(e) => return Err(failed(e)),
                }
            }
            let binding = json!({
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": &*pod.name, "namespace": &*pod.namespace, "uid": &*pod.uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            });
            self.pods(&pod.namespace)
                .create_subresource::<_, serde_json::Value>(
                    "binding",
                    &pod.name,
                    &PostParams::default(),
                    &binding,
                )
                .await
                .map(|_| ())
                .map_err(failed)
        })
    }

    fn update_pod_status<'a>(
        &'a self,
        pod: &'a Pod,
        update: PodStatusUpdate,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(async move {
            let mut status = serde_json::Map::new();
            if let Some(c) = &update.condition {
                // Conditions merge by type in a strategic-merge patch.
                status.insert(
                    "conditions".into(),
                    json!([{
                        "type": "PodScheduled",
                        "status": c.status,
                        "reason": c.reason,
                        "message": c.message,
                        "lastProbeTime": null,
                        "lastTransitionTime": now_rfc3339(),
                    }]),
                );
            }
            if let Some(n) = &update.nominated_node_name {
                status.insert(
                    "nominatedNodeName".into(),
                    n.as_deref().map_or(serde_json::Value::Null, |s| json!(s)),
                );
            }
            if status.is_empty() {
                return Ok(());
            }
            self.limiter.acquire().await;
            let _permit = self.writes.acquire().await;
            self.pods(&pod.namespace)
                .patch_status(
                    &pod.name,
                    &PatchParams::default(),
                    &Patch::Strategic(json!({"status": status})),
                )
                .await
                .map(|_| ())
                .map_err(|e| {
                    report_api_error("patch", "pods/status", &pod_key(pod), &e);
                    client_error(&format!("pods \"{}\"", pod.name), e)
                })
        })
    }

    fn bind_volume<'a>(
        &'a self,
        pv: &'a crate::model::storage::PersistentVolume,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(async move {
            let Some(r) = &pv.claim_ref else {
                return Err(ClientError::Other(format!(
                    "persistentvolume {:?} has no claimRef to write",
                    pv.name
                )));
            };
            let mut metadata = json!({});
            // The resource version makes the patch conditional, as upstream's Update is:
            // a PV changed since the scheduler read it is a conflict.
            if let Some(rv) = &pv.resource_version {
                metadata["resourceVersion"] = json!(&**rv);
            }
            if let Some(v) = pv
                .annotations
                .get(crate::model::storage::ANN_BOUND_BY_CONTROLLER)
            {
                metadata["annotations"] =
                    json!({crate::model::storage::ANN_BOUND_BY_CONTROLLER: v});
            }
            let patch = json!({
                "metadata": metadata,
                "spec": {"claimRef": {
                    "kind": "PersistentVolumeClaim",
                    "apiVersion": "v1",
                    "namespace": &*r.namespace,
                    "name": &*r.name,
                    "uid": &*r.uid,
                }},
            });
            self.limiter.acquire().await;
            let _permit = self.writes.acquire().await;
            Api::<core::PersistentVolume>::all(self.client.clone())
                .patch(&pv.name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map(|_| ())
                .map_err(|e| {
                    let what = format!("persistentvolume {}", pv.name);
                    report_api_error("patch", "persistentvolumes", &what, &e);
                    client_error(&format!("persistentvolumes \"{}\"", pv.name), e)
                })
        })
    }

    fn select_node_for_claim<'a>(
        &'a self,
        pvc: &'a crate::model::storage::PersistentVolumeClaim,
        node: &'a str,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(async move {
            let mut metadata = json!({
                "annotations": {crate::model::storage::ANN_SELECTED_NODE: node},
            });
            if let Some(rv) = &pvc.resource_version {
                metadata["resourceVersion"] = json!(&**rv);
            }
            self.limiter.acquire().await;
            let _permit = self.writes.acquire().await;
            Api::<core::PersistentVolumeClaim>::namespaced(self.client.clone(), &pvc.namespace)
                .patch(
                    &pvc.name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": metadata})),
                )
                .await
                .map(|_| ())
                .map_err(|e| {
                    let what = format!("persistentvolumeclaim {}", pvc.key());
                    report_api_error("patch", "persistentvolumeclaims", &what, &e);
                    client_error(&format!("persistentvolumeclaims \"{}\"", pvc.name), e)
                })
        })
    }

    fn delete_pod<'a>(
        &'a self,
        pod: &'a Pod,
        preemptor: &'a Pod,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(async move {
            let what = format!("pods \"{}\"", pod.name);
            let api = self.pods(&pod.namespace);
            // Upstream marks the victim first, so its controllers know why it goes.
            self.limiter.acquire().await;
            let permit = self.writes.acquire().await;
            let mark = json!({"status": {"conditions": [{
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": format!("{}: preempting to accommodate a higher priority pod", preemptor.spec.scheduler_name),
                "lastTransitionTime": now_rfc3339(),
            }]}});
            match api
                .patch_status(&pod.name, &PatchParams::default(), &Patch::Strategic(mark))
                .await
            {
                Ok(_) => {}
                Err(e) if is_code(&e, 404) => return Ok(()),
                Err(e) => {
                    report_api_error("patch", "pods/status", &pod_key(pod), &e);
                    return Err(client_error(&what, e));
                }
            }
            drop(permit);
            self.limiter.acquire().await;
            let _permit = self.writes.acquire().await;
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(pod.uid.to_string()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(&pod.name, &dp).await {
                Ok(_) => Ok(()),
                // Gone already, or a new pod of that name (the UID precondition).
                Err(e) if is_code(&e, 404) || is_code(&e, 409) => Ok(()),
                Err(e) => {
                    report_api_error("delete", "pods", &pod_key(pod), &e);
                    Err(client_error(&what, e))
                }
            }
        })
    }

    fn record_event(&self, event: PodEvent) {
        let client = self.client.clone();
        let limiter = self.limiter.clone();
        let gate = self.events.clone();
        let protobuf = self.protobuf.clone();
        let instance = self.options.instance.clone();
        self.runtime.spawn(async move {
            limiter.acquire().await;
            let _permit = gate.acquire().await;
            let mut note = event.message.clone();
            if note.len() > 1024 {
                let mut cut = 1021;
                while !note.is_char_boundary(cut) {
                    cut -= 1;
                }
                note.truncate(cut);
                note.push_str("...");
            }
            let now = k8s_openapi::jiff::Timestamp::now();
            // As client-go's recorder names them: `<object>.<hex unix nanoseconds>`
            // (a generateName ending in "." is not a valid name prefix).
            let name = event_name(&event.name, now);
            let event_type = match event.event_type {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            };
            let what = || format!("{} event for pod {}/{}", event.reason, event.namespace, event.name);
            if protobuf.load(Ordering::Relaxed) {
                let ev = kubeproto::Event {
                    metadata: Some(kubeproto::ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(event.namespace.to_string()),
                        uid: None,
                    }),
                    event_time: Some(kubeproto::MicroTime {
                        seconds: Some(now.as_second()),
                        // metav1.MicroTime keeps microseconds.
                        nanos: Some(now.subsec_nanosecond() / 1000 * 1000),
                    }),
                    reporting_controller: Some(FIELD_MANAGER.into()),
                    reporting_instance: Some(instance.clone()),
                    action: Some(event.action.to_string()),
                    reason: Some(event.reason.to_string()),
                    regarding: Some(kubeproto::ObjectReference {
                        kind: Some("Pod".into()),
                        namespace: Some(event.namespace.to_string()),
                        name: Some(event.name.to_string()),
                        uid: Some(event.uid.to_string()),
                        api_version: Some("v1".into()),
                    }),
                    note: Some(note.clone()),
                    r#type: Some(event_type.into()),
                };
                let path = format!("/apis/events.k8s.io/v1/namespaces/{}/events", event.namespace);
                let body = kubeproto::envelope("events.k8s.io/v1", "Event", &ev);
                match post_protobuf(&client, &path, body).await {
                    Ok(true) => return,
                    Ok(false) => protobuf_refused(&protobuf),
                    Err(e) => return report_api_error("create", "events", &what(), &e),
                }
            }
            let api: Api<k8s_openapi::api::events::v1::Event> =
                Api::namespaced(client, &event.namespace);
            let ev: k8s_openapi::api::events::v1::Event = match serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": &*event.namespace},
                "eventTime": now.to_string(),
                "reportingController": FIELD_MANAGER,
                "reportingInstance": instance,
                "action": event.action,
                "reason": event.reason,
                "type": event_type,
                "note": note,
                "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": &*event.namespace, "name": &*event.name, "uid": &*event.uid},
            })) {
                Ok(ev) => ev,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot build event");
                    return;
                }
            };
            if let Err(e) = api.create(&PostParams::default(), &ev).await {
                report_api_error("create", "events", &what(), &e);
            }
        });
    }
}

/// A token bucket for writes: `burst` at once, then `qps` per second. Waiting
/// callers sleep; the scheduling thread never calls it.
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    pub fn new(qps: f32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        RateLimiter {
            qps: f64::from(qps).max(0.0),
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// How long the caller must wait before its write (reserving the token).
    fn reserve(&self, now: Instant) -> Duration {
        if self.qps <= 0.0 {
            return Duration::ZERO; // unlimited, as a negative qps upstream
        }
        let Ok(mut s) = self.state.lock() else {
            return Duration::ZERO;
        };
        let (tokens, last) = *s;
        let refilled =
            (tokens + now.saturating_duration_since(last).as_secs_f64() * self.qps).min(self.burst);
        let left = refilled - 1.0;
        *s = (left, now);
        if left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-left / self.qps)
        }
    }

    pub async fn acquire(&self) {
        let wait = self.reserve(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_are_valid_dns_subdomains_as_client_go_makes_them() {
        let at = k8s_openapi::jiff::Timestamp::from_nanosecond(1_700_000_000_123_456_789)
            .expect("timestamp");
        let name = event_name("pod-101", at);
        assert_eq!(name, "pod-101.17979cfe3d85cd15");
        // The API server's rule for metadata.name: lowercase alphanumerics, '-' and
        // '.', starting and ending with an alphanumeric.
        assert!(name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'));
        assert!(name.ends_with(|c: char| c.is_ascii_alphanumeric()));
    }

    #[test]
    fn rate_limiter_allows_a_burst_then_qps() {
        let l = RateLimiter::new(10.0, 3);
        let t = Instant::now();
        for _ in 0..3 {
            assert_eq!(l.reserve(t), Duration::ZERO);
        }
        // The fourth waits one token's time (100 ms), the fifth two.
        assert!((l.reserve(t).as_secs_f64() - 0.1).abs() < 1e-6);
        assert!((l.reserve(t).as_secs_f64() - 0.2).abs() < 1e-6);
        // A second later the debt is paid and tokens refill up to the burst only.
        let later = t + Duration::from_secs(10);
        for _ in 0..3 {
            assert_eq!(l.reserve(later), Duration::ZERO);
        }
        assert!(l.reserve(later) > Duration::ZERO);
    }
}
