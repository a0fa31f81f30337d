//! A small Kubernetes API-server double for tests of the `kubernetes` backend: real
//! HTTP on 127.0.0.1, real JSON, real chunked watch streams, so the real `kube`
//! client runs against it unchanged. It speaks only what a v1.36 API server speaks:
//! lists and watches as [`listwatch`] serves them (consistent pages with `limit` and
//! `continue`, label and field selectors, bookmarks, streaming lists with their end
//! marker, `410` once a version is compacted), `pods/binding`, strategic-merge
//! patches of `pods/status` (conditions merged by type), delete with a UID
//! precondition, `events.k8s.io/v1` events, and Leases (get, create, update with
//! optimistic concurrency). What it creates or patches is validated as a v1.36
//! server validates it ([`validate`]: names, generateName, Events, Leases), answering
//! 422 `Invalid` in the server's words; fields the API lacks are dropped with a
//! `Warning` header, or refused under `fieldValidation=Strict` ([`warnings`]); the
//! binding clears the nomination as v1.35+ does. Bodies are JSON, or protobuf for
//! the two kinds a scheduler writes that way (Binding, Event: [`protobuf`], with
//! answers in protobuf when asked); other protobuf bodies get 415 (a real server
//! takes protobuf for every built-in kind), and [`ApiServer::refuse_protobuf`]
//! makes it refuse them all, as a JSON-only server does. Tests drive it through
//! [`ApiServer`]: add, update and delete objects, drop every open watch, compact the
//! history, make the next bind conflict.

mod handler;
mod listwatch;
mod protobuf;
mod rbac;
mod resourceclaim;
mod selectors;
pub mod validate;
pub mod warnings;

use handler::*;
pub use rbac::{deploy_rules, rbac_request, rules_of, Rule, SERVICE_ACCOUNT_USER};
use selectors::Selection;

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::sync::broadcast;

type Body = BoxBody<Bytes, Infallible>;

/// A collection: its URL segment, its kind, and whether objects are namespaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Kind {
    pub group_version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

pub const PODS: Kind = Kind {
    group_version: "v1",
    plural: "pods",
    kind: "Pod",
    namespaced: true,
};
pub const NODES: Kind = Kind {
    group_version: "v1",
    plural: "nodes",
    kind: "Node",
    namespaced: false,
};
pub const NAMESPACES: Kind = Kind {
    group_version: "v1",
    plural: "namespaces",
    kind: "Namespace",
    namespaced: false,
};
pub const EVENTS: Kind = Kind {
    group_version: "events.k8s.io/v1",
    plural: "events",
    kind: "Event",
    namespaced: true,
};
pub const LEASES: Kind = Kind {
    group_version: "coordination.k8s.io/v1",
    plural: "leases",
    kind: "Lease",
    namespaced: true,
};

pub const DEVICE_CLASSES: Kind = Kind {
    group_version: "resource.k8s.io/v1",
    plural: "deviceclasses",
    kind: "DeviceClass",
    namespaced: false,
};
pub const RESOURCE_SLICES: Kind = Kind {
    group_version: "resource.k8s.io/v1",
    plural: "resourceslices",
    kind: "ResourceSlice",
    namespaced: false,
};
pub const RESOURCE_CLAIMS: Kind = Kind {
    group_version: "resource.k8s.io/v1",
    plural: "resourceclaims",
    kind: "ResourceClaim",
    namespaced: true,
};
pub const RESOURCE_CLAIM_TEMPLATES: Kind = Kind {
    group_version: "resource.k8s.io/v1",
    plural: "resourceclaimtemplates",
    kind: "ResourceClaimTemplate",
    namespaced: true,
};

const KINDS: [Kind; 21] = [
    DEVICE_CLASSES,
    RESOURCE_SLICES,
    RESOURCE_CLAIMS,
    RESOURCE_CLAIM_TEMPLATES,
    PODS,
    NODES,
    NAMESPACES,
    EVENTS,
    LEASES,
    Kind {
        group_version: "v1",
        plural: "services",
        kind: "Service",
        namespaced: true,
    },
    Kind {
        group_version: "v1",
        plural: "replicationcontrollers",
        kind: "ReplicationController",
        namespaced: true,
    },
    Kind {
        group_version: "apps/v1",
        plural: "replicasets",
        kind: "ReplicaSet",
        namespaced: true,
    },
    Kind {
        group_version: "apps/v1",
        plural: "statefulsets",
        kind: "StatefulSet",
        namespaced: true,
    },
    Kind {
        group_version: "policy/v1",
        plural: "poddisruptionbudgets",
        kind: "PodDisruptionBudget",
        namespaced: true,
    },
    Kind {
        group_version: "scheduling.k8s.io/v1",
        plural: "priorityclasses",
        kind: "PriorityClass",
        namespaced: false,
    },
    Kind {
        group_version: "v1",
        plural: "persistentvolumeclaims",
        kind: "PersistentVolumeClaim",
        namespaced: true,
    },
    Kind {
        group_version: "v1",
        plural: "persistentvolumes",
        kind: "PersistentVolume",
        namespaced: false,
    },
    Kind {
        group_version: "storage.k8s.io/v1",
        plural: "storageclasses",
        kind: "StorageClass",
        namespaced: false,
    },
    Kind {
        group_version: "storage.k8s.io/v1",
        plural: "csinodes",
        kind: "CSINode",
        namespaced: false,
    },
    Kind {
        group_version: "storage.k8s.io/v1",
        plural: "csidrivers",
        kind: "CSIDriver",
        namespaced: false,
    },
    Kind {
        group_version: "storage.k8s.io/v1",
        plural: "csistoragecapacities",
        kind: "CSIStorageCapacity",
        namespaced: true,
    },
];

/// One recorded request: method and path (with query).
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub path: String,
    /// The request body's media type, when it had one.
    pub content_type: Option<String>,
}

#[derive(Clone, Debug)]
struct Change {
    rv: u64,
    kind: Kind,
    kind_type: &'static str,
    object: Value,
    /// The object before the change (updates and deletes), to tell a watch with a
    /// selector whether the object entered or left it.
    prev: Option<Value>,
}

#[derive(Default)]
struct State {
    rv: u64,
    objects: BTreeMap<(Kind, String, String), Value>,
    history: Vec<Change>,
    /// Watches from a version below this get 410 Gone.
    compacted_below: u64,
    conflict_next_bind: bool,
    /// Pods deleted when their binding arrives (as if deleted mid-binding).
    delete_on_bind: Vec<String>,
    calls: Vec<Call>,
    uid: u64,
    /// Rules every request must pass (403 otherwise), once a test enforces them.
    rbac: Option<Arc<Vec<rbac::Rule>>>,
    /// Whether protobuf bodies are refused (415), as by a server or proxy that
    /// takes JSON only.
    protobuf_refused: bool,
    /// Every unknown field a write sent: (request path, field).
    warnings: Vec<(String, String)>,
    /// How often a watch that allows bookmarks gets one (the watch cache: a minute).
    bookmark_every: std::time::Duration,
}

/// The double. Dropping it stops the server.
pub struct ApiServer {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    changes: broadcast::Sender<Change>,
    /// Closing this ends every open watch (the clients see a dropped connection).
    drop_watches: broadcast::Sender<()>,
    runtime: tokio::runtime::Runtime,
}

impl ApiServer {
    pub fn start() -> ApiServer {
        let (runtime, listener, addr) = crate::local_server();
        let state = Arc::new(Mutex::new(State {
            rv: 1,
            bookmark_every: std::time::Duration::from_secs(60),
            ..Default::default()
        }));
        let (changes, _) = broadcast::channel(4096);
        let (drop_watches, _) = broadcast::channel(16);
        let shared = Shared {
            state: state.clone(),
            changes: changes.clone(),
            drop_watches: drop_watches.clone(),
        };
        runtime.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let shared = shared.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(shared.handle(req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        ApiServer {
            addr,
            state,
            changes,
            drop_watches,
            runtime,
        }
    }

    /// A kubeconfig (YAML) pointing at the double, for `switchyard run --kubeconfig`.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: double\n  cluster:\n    server: http://{}\ncontexts:\n- name: double\n  context:\n    cluster: double\n    user: test\ncurrent-context: double\nusers:\n- name: test\n  user:\n    token: test\n",
            self.addr
        )
    }

    /// A `kube` client for the double, as the backend builds one from a kubeconfig.
    pub async fn client(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::from_yaml(&self.kubeconfig()).expect("kubeconfig");
        let cfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .expect("config");
        kube::Client::try_from(cfg).expect("client")
    }

    fn shared(&self) -> Shared {
        Shared {
            state: self.state.clone(),
            changes: self.changes.clone(),
            drop_watches: self.drop_watches.clone(),
        }
    }

    /// Creates or replaces an object (from its apiVersion/kind); a watch sees ADDED or
    /// MODIFIED.
    pub fn apply(&self, object: Value) {
        let kind = kind_of(&object).unwrap_or_else(|| panic!("unknown kind in {object}"));
        let s = self.shared();
        s.put(kind, object);
    }

    /// Deletes an object; a watch sees DELETED.
    pub fn delete(&self, kind: Kind, namespace: &str, name: &str) -> bool {
        self.shared().remove(kind, namespace, name).is_some()
    }

    pub fn get(&self, kind: Kind, namespace: &str, name: &str) -> Option<Value> {
        let st = self.state.lock().unwrap();
        st.objects
            .get(&(kind, ns_of(kind, namespace), name.to_string()))
            .cloned()
    }

    /// The node a pod in `default` is bound to, if any.
    pub fn node_of(&self, pod: &str) -> Option<String> {
        self.get(PODS, "default", pod)
            .and_then(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
    }

    pub fn list(&self, kind: Kind) -> Vec<Value> {
        let st = self.state.lock().unwrap();
        st.objects
            .iter()
            .filter(|((k, _, _), _)| *k == kind)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Ends every open watch connection.
    pub fn drop_watches(&self) {
        let _ = self.drop_watches.send(());
    }

    /// Forgets the history so far: a watch resuming from an older version gets
    /// `410 Gone` and must list again.
    pub fn compact(&self) {
        let mut st = self.state.lock().unwrap();
        st.compacted_below = st.rv + 1;
        st.history.clear();
    }

    /// Watches that allow bookmarks get one this often (from their next tick).
    pub fn set_bookmark_interval(&self, every: std::time::Duration) {
        self.state.lock().unwrap().bookmark_every = every.max(std::time::Duration::from_millis(1));
    }

    /// From now on protobuf bodies are refused with 415 (a server or proxy that
    /// takes JSON only), so a client must fall back to JSON.
    pub fn refuse_protobuf(&self) {
        self.state.lock().unwrap().protobuf_refused = true;
    }

    /// The next `pods/binding` answers 409 Conflict.
    pub fn conflict_next_bind(&self) {
        self.state.lock().unwrap().conflict_next_bind = true;
    }

    /// The pod is deleted when its binding arrives, which then answers 404 (a pod
    /// deleted while the scheduler was binding it).
    pub fn delete_on_bind(&self, name: &str) {
        self.state
            .lock()
            .unwrap()
            .delete_on_bind
            .push(name.to_string());
    }

    /// The `Warning`s the double answered, as (request path, unknown field): a
    /// client that writes fields the API lacks has them dropped on a real server.
    pub fn warnings(&self) -> Vec<(String, String)> {
        self.state.lock().unwrap().warnings.clone()
    }

    /// Panics unless every request the client made was allowed by deploy/'s RBAC
    /// and wrote only fields the API has (a real server would have refused or
    /// silently dropped the rest).
    pub fn assert_a_careful_client(&self) {
        let forbidden = self.forbidden_by_deploy_rbac();
        assert!(
            forbidden.is_empty(),
            "deploy/rbac.yaml does not allow: {forbidden:#?}"
        );
        let warnings = self.warnings();
        assert!(
            warnings.is_empty(),
            "the server warned of unknown fields: {warnings:#?}"
        );
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.runtime
    }
}

fn kind_of(object: &Value) -> Option<Kind> {
    let api_version = object["apiVersion"].as_str()?;
    let kind = object["kind"].as_str()?;
    KINDS
        .iter()
        .copied()
        .find(|k| k.group_version == api_version && k.kind == kind)
}

fn ns_of(kind: Kind, namespace: &str) -> String {
    if kind.namespaced {
        if namespace.is_empty() {
            "default".into()
        } else {
            namespace.into()
        }
    } else {
        String::new()
    }
}

#[derive(Clone)]
struct Shared {
    state: Arc<Mutex<State>>,
    changes: broadcast::Sender<Change>,
    drop_watches: broadcast::Sender<()>,
}
