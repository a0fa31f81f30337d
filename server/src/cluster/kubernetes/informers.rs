//! Watching the cluster: one kube watcher per kind (list, then watch from the list's
//! resourceVersion; resume on a dropped watch, relist on `410 Gone`), each keeping
//! the objects it delivered so updates carry their old object and a relist's missing
//! objects become deletions. Everything pods refer to lists first; pods once those
//! have listed; `Synced` once the pods have.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::resource::v1 as resource;
use k8s_openapi::api::storage::v1 as storage;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;

use super::errors::{report_api_error, resource_of};
use super::KubernetesCluster;
use crate::client::{ClusterBackend, EventSink, WatchEvent};
use crate::model::convert::{self, SystemPriorities};
use crate::model::dra::DraObject;
use crate::model::node::WorkloadSelector;
use crate::model::storage::StorageObject;

/// What a watcher delivers, before it becomes a [`WatchEvent`].
enum Change<M> {
    Add(M),
    Update(M, M),
    Delete(M),
}

/// The watchers pods wait for: each one registered here reports when it has listed,
/// and the pods' watcher starts once all have (no count kept by hand).
struct Informers<'a> {
    cluster: &'a KubernetesCluster,
    sink: EventSink,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    listed: Vec<oneshot::Receiver<()>>,
}

impl Informers<'_> {
    /// Watches kind `K` (cluster-wide): `convert` makes the model object (None: not
    /// usable, logged), `emit` turns a change into the scheduler's event.
    fn watch<K, M>(
        &mut self,
        kind: &'static str,
        convert: impl Fn(&K) -> Option<M> + Send + Sync + 'static,
        emit: impl Fn(&EventSink, Change<M>) -> bool + Send + Sync + 'static,
    ) where
        K: kube::Resource + Clone + Debug + DeserializeOwned + Send + 'static,
        K::DynamicType: Default,
        M: Clone + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.listed.push(rx);
        let sink = self.sink.clone();
        self.tasks.push(self.cluster.runtime.spawn(watch_kind(
            Api::<K>::all(self.cluster.client.clone()),
            watcher::Config::default(),
            kind,
            convert,
            move |ch| emit(&sink, ch),
            tx,
        )));
    }

    /// A Service's or controller's selector (default topology spreading).
    fn workload<K>(
        &mut self,
        kind: &'static str,
        convert: fn(&K) -> Result<WorkloadSelector, convert::FieldError>,
    ) where
        K: kube::Resource + Clone + Debug + DeserializeOwned + Send + 'static,
        K::DynamicType: Default,
        K: kube::ResourceExt,
    {
        self.watch::<K, Arc<WorkloadSelector>>(
            kind,
            move |o| usable(kind, o.meta().name.as_deref(), convert(o)).map(Arc::new),
            |s, ch| match ch {
                Change::Add(w) | Change::Update(_, w) => {
                    s.send(WatchEvent::WorkloadSelectorUpsert(w))
                }
                Change::Delete(w) => s.send(WatchEvent::WorkloadSelectorDelete {
                    kind: w.kind,
                    namespace: w.namespace.clone(),
                    name: w.name.clone(),
                }),
            },
        );
    }

    /// A storage object (VolumeBinding and the volume plugins).
    fn storage<K, T>(
        &mut self,
        kind: &'static str,
        convert: fn(&K) -> Result<T, convert::FieldError>,
        wrap: fn(Arc<T>) -> StorageObject,
    ) where
        K: kube::Resource + Clone + Debug + DeserializeOwned + Send + 'static,
        K::DynamicType: Default,
        T: Send + Sync + 'static,
    {
        self.watch::<K, StorageObject>(
            kind,
            move |o| usable(kind, o.meta().name.as_deref(), convert(o)).map(|t| wrap(Arc::new(t))),
            |s, ch| match ch {
                Change::Add(o) | Change::Update(_, o) => s.send(WatchEvent::StorageUpsert(o)),
                Change::Delete(o) => s.send(WatchEvent::StorageDelete(o)),
            },
        );
    }
}

/// `resource.k8s.io/v1` (GA in Kubernetes 1.34): the kinds DynamicResources reads.
const DRA_GROUP_VERSION: &str = "resource.k8s.io/v1";

impl Informers<'_> {
    /// DeviceClasses, ResourceSlices and ResourceClaims, when the API server serves
    /// `resource.k8s.io/v1`. An older server (before 1.34) has no DRA: nothing is
    /// watched, said once, and pods with claims wait at PreEnqueue.
    fn dra(&mut self) {
        let (tx, rx) = oneshot::channel();
        self.listed.push(rx);
        let client = self.cluster.client.clone();
        let sink = self.sink.clone();
        self.tasks.push(self.cluster.runtime.spawn(async move {
            let served = match client.list_api_group_resources(DRA_GROUP_VERSION).await {
                Ok(list) => list.resources.iter().any(|r| r.name == "resourceclaims"),
                Err(e) => {
                    tracing::info!(error = %e, "{DRA_GROUP_VERSION} is not served by this API server (Kubernetes before 1.34?): Dynamic Resource Allocation is off");
                    false
                }
            };
            if !served {
                let _ = tx.send(());
                return;
            }
            // The three watchers run inside this task, so stopping it stops them.
            let mut inner = Vec::new();
            let mut watchers: Vec<futures_util::future::BoxFuture<'static, ()>> = Vec::new();
            macro_rules! dra_watch {
                ($k:ty, $kind:literal, $conv:expr, $wrap:expr) => {{
                    let (itx, irx) = oneshot::channel();
                    inner.push(irx);
                    let s = sink.clone();
                    watchers.push(Box::pin(watch_kind(
                        Api::<$k>::all(client.clone()),
                        watcher::Config::default(),
                        $kind,
                        move |o: &$k| {
                            usable($kind, o.metadata.name.as_deref(), $conv(o)).map(|m| $wrap(Arc::new(m)))
                        },
                        move |ch| match ch {
                            Change::Add(o) | Change::Update(_, o) => s.send(WatchEvent::DraUpsert(o)),
                            Change::Delete(o) => s.send(WatchEvent::DraDelete(o)),
                        },
                        itx,
                    )));
                }};
            }
            dra_watch!(resource::DeviceClass, "DeviceClass", convert::device_class_from_k8s, DraObject::DeviceClass);
            dra_watch!(resource::ResourceSlice, "ResourceSlice", convert::resource_slice_from_k8s, DraObject::ResourceSlice);
            dra_watch!(
                resource::ResourceClaim,
                "ResourceClaim",
                |o: &resource::ResourceClaim| convert::resource_claim_from_k8s(o, String::new),
                DraObject::ResourceClaim
            );
            let listed = async move {
                for rx in inner {
                    if rx.await.is_err() {
                        return;
                    }
                }
                let _ = tx.send(());
            };
            futures_util::future::join(futures_util::future::join_all(watchers), listed).await;
        }));
    }
}

impl ClusterBackend for KubernetesCluster {
    fn start(&self, sink: EventSink) {
        let mut inf = Informers {
            cluster: self,
            sink: sink.clone(),
            tasks: Vec::new(),
            listed: Vec::new(),
        };
        // Everything pods refer to first. PriorityClasses are not watched: admission
        // has set spec.priority.
        inf.watch::<core::Namespace, _>(
            "Namespace",
            |o| {
                usable(
                    "Namespace",
                    o.metadata.name.as_deref(),
                    convert::namespace_from_k8s(o),
                )
            },
            |s, ch| match ch {
                Change::Add(n) | Change::Update(_, n) => s.send(WatchEvent::NamespaceUpsert(n)),
                Change::Delete(n) => s.send(WatchEvent::NamespaceDelete(n.name)),
            },
        );
        inf.watch::<core::Node, _>(
            "Node",
            |o| {
                let uid = || o.metadata.name.clone().unwrap_or_default();
                usable(
                    "Node",
                    o.metadata.name.as_deref(),
                    convert::node_from_k8s(o, uid),
                )
                .map(Arc::new)
            },
            |s, ch| match ch {
                Change::Add(n) => s.send(WatchEvent::NodeAdd(n)),
                Change::Update(o, n) => s.send(WatchEvent::NodeUpdate(o, n)),
                Change::Delete(n) => s.send(WatchEvent::NodeDelete(n)),
            },
        );
        inf.watch::<policy::PodDisruptionBudget, _>(
            "PodDisruptionBudget",
            |o| {
                usable(
                    "PodDisruptionBudget",
                    o.metadata.name.as_deref(),
                    convert::pdb_from_k8s(o),
                )
                .map(Arc::new)
            },
            |s, ch| match ch {
                Change::Add(p) | Change::Update(_, p) => s.send(WatchEvent::PdbUpsert(p)),
                Change::Delete(p) => s.send(WatchEvent::PdbDelete {
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                }),
            },
        );
        inf.workload::<core::Service>("Service", convert::service_selector);
        inf.workload::<core::ReplicationController>(
            "ReplicationController",
            convert::replication_controller_selector,
        );
        inf.workload::<apps::ReplicaSet>("ReplicaSet", convert::replica_set_selector);
        inf.workload::<apps::StatefulSet>("StatefulSet", convert::stateful_set_selector);
        inf.storage::<core::PersistentVolumeClaim, _>(
            "PersistentVolumeClaim",
            |o| convert::pvc_from_k8s(o, String::new),
            StorageObject::Pvc,
        );
        inf.storage::<core::PersistentVolume, _>(
            "PersistentVolume",
            convert::pv_from_k8s,
            StorageObject::Pv,
        );
        inf.storage::<storage::StorageClass, _>(
            "StorageClass",
            convert::storage_class_from_k8s,
            StorageObject::StorageClass,
        );
        inf.storage::<storage::CSINode, _>(
            "CSINode",
            convert::csi_node_from_k8s,
            StorageObject::CsiNode,
        );
        inf.storage::<storage::CSIDriver, _>(
            "CSIDriver",
            convert::csi_driver_from_k8s,
            StorageObject::CsiDriver,
        );
        inf.storage::<storage::CSIStorageCapacity, _>(
            "CSIStorageCapacity",
            convert::csi_storage_capacity_from_k8s,
            StorageObject::CsiStorageCapacity,
        );

        inf.dra();

        // Pods once everything above has listed; Synced once the pods have.
        let Informers {
            mut tasks, listed, ..
        } = inf;
        let pods = Api::<core::Pod>::all(self.client.clone());
        let runtime = self.runtime.clone();
        tasks.push(self.runtime.spawn(async move {
            for rx in listed {
                if rx.await.is_err() {
                    return;
                }
            }
            let (pods_listed, pods_done) = oneshot::channel();
            let s = sink.clone();
            let watch = runtime.spawn(watch_kind(
                pods,
                // As kube-scheduler's informer: finished pods use nothing.
                watcher::Config::default().fields("status.phase!=Succeeded,status.phase!=Failed"),
                "Pod",
                |o: &core::Pod| {
                    let uid = || o.metadata.uid.clone().unwrap_or_default();
                    usable(
                        "Pod",
                        o.metadata.name.as_deref(),
                        convert::pod_from_k8s(o, &SystemPriorities, uid),
                    )
                    .map(Arc::new)
                },
                move |ch| match ch {
                    Change::Add(p) => s.send(WatchEvent::PodAdd(p)),
                    Change::Update(o, p) => s.send(WatchEvent::PodUpdate(o, p)),
                    Change::Delete(p) => s.send(WatchEvent::PodDelete(p)),
                },
                pods_listed,
            ));
            if pods_done.await.is_ok() {
                sink.send(WatchEvent::Synced);
            }
            let _ = watch.await;
        }));
        tasks.push(self.spawn_series_sweeper());
        if let Ok(mut t) = self.tasks.lock() {
            t.extend(tasks);
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
    listed: tokio::sync::oneshot::Sender<()>,
) where
    K: kube::Resource + Clone + Debug + DeserializeOwned + Send + 'static,
    M: Clone + Send + 'static,
{
    // key -> (resourceVersion, object)
    let mut listed = Some(listed);
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
                    if let Some(tx) = listed.take() {
                        let _ = tx.send(());
                    }
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
