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

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::json;

mod claims;
mod errors;
mod events;
mod informers;
mod ratelimit;

use super::kubeproto;
use crate::client::BoxFuture;
use crate::client::{ClientError, ClusterClient, EventType, PodEvent, PodStatusUpdate};
use crate::model::Pod;
pub use errors::report_api_error;
use errors::*;
pub use ratelimit::RateLimiter;

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
    /// Isomorphic events folded into series, as client-go's recorder does.
    series: Arc<events::EventSeries>,
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
            series: Arc::default(),
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

fn pod_key(pod: &Pod) -> String {
    format!("pod {}/{}", pod.namespace, pod.name)
}

/// The event name client-go's recorder gives: `<object>.<hex unix nanoseconds>`.
fn event_name(object: &str, at: k8s_openapi::jiff::Timestamp) -> String {
    format!("{object}.{:x}", at.as_nanosecond())
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

/// RFC 3339 with seconds, as metav1.Time serialises.
fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

impl ClusterClient for KubernetesCluster {
    fn reserve_claim<'a>(
        &'a self,
        claim: &'a crate::model::dra::ResourceClaim,
        allocation: Option<&'a crate::model::dra::Allocation>,
        pod: &'a Pod,
    ) -> BoxFuture<'a, Result<Arc<crate::model::dra::ResourceClaim>, ClientError>> {
        Box::pin(self.reserve_claim_api(claim, allocation, pod))
    }

    fn release_claim<'a>(
        &'a self,
        claim: &'a crate::model::dra::ResourceClaim,
        pod_uid: &'a str,
    ) -> BoxFuture<'a, Result<Arc<crate::model::dra::ResourceClaim>, ClientError>> {
        Box::pin(self.release_claim_api(claim, pod_uid))
    }

    fn deallocate_claim<'a>(
        &'a self,
        claim: &'a crate::model::dra::ResourceClaim,
    ) -> BoxFuture<'a, Result<Arc<crate::model::dra::ResourceClaim>, ClientError>> {
        Box::pin(self.deallocate_claim_api(claim))
    }

    fn create_claim<'a>(
        &'a self,
        claim: &'a crate::model::dra::ResourceClaim,
        generate_name: &'a str,
    ) -> BoxFuture<'a, Result<Arc<crate::model::dra::ResourceClaim>, ClientError>> {
        Box::pin(self.create_claim_api(claim, generate_name))
    }

    fn delete_claim<'a>(
        &'a self,
        claim: &'a crate::model::dra::ResourceClaim,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(self.delete_claim_api(claim))
    }

    fn set_extended_resource_claim_status<'a>(
        &'a self,
        pod: &'a Pod,
        status: &'a crate::model::dra::ExtendedResourceClaimStatus,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(self.set_extended_resource_claim_status_api(pod, status))
    }

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
        let series = self.series.clone();
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
            let key = events::Key {
                uid: event.uid.clone(),
                reason: event.reason,
                action: event.action,
            };
            let name = match series.record(
                key,
                &event.namespace,
                || event_name(&event.name, now),
                Instant::now(),
                now,
            ) {
                events::Write::Create(name) => name,
                events::Write::Series(patch) => {
                    return patch_series(&client, &patch).await;
                }
                events::Write::Nothing => return,
            };
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

/// Writes an event series' count onto its Event (a merge patch, as client-go's
/// recorder sends it); an Event gone meanwhile is left gone.
async fn patch_series(client: &kube::Client, patch: &events::SeriesPatch) {
    let api: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &patch.namespace);
    if let Err(e) = api
        .patch(
            &patch.name,
            &PatchParams::default(),
            &Patch::Merge(patch.body()),
        )
        .await
    {
        if !is_code(&e, 404) {
            report_api_error("patch", "events", &patch.name, &e);
        }
    }
}

impl KubernetesCluster {
    /// Writes the counts of event series that ended or are due a refresh, every
    /// minute, until the runtime stops.
    fn spawn_series_sweeper(&self) -> tokio::task::JoinHandle<()> {
        let series = self.series.clone();
        let client = self.client.clone();
        let limiter = self.limiter.clone();
        self.runtime.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tick.tick().await;
                for p in series.sweep(Instant::now()) {
                    limiter.acquire().await;
                    patch_series(&client, &p).await;
                }
            }
        })
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
}
