//! API errors: counted by verb, resource and code, logged once per interval and
//! then counted, and mapped to the boundary's `ClientError`.

use super::*;
use std::collections::HashMap;

/// How often one kind of failure (verb, resource, code) is logged: a storm of refused
/// writes (every bind during an API server outage) is one line per interval, with
/// the count of the ones not shown.
pub(super) const API_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

pub(super) type ErrorLogState = HashMap<(String, String, String), (Instant, u64)>;

pub(super) static API_ERROR_LOG: std::sync::LazyLock<Mutex<ErrorLogState>> =
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

/// The status code of a failed request, or `transport` when none came back.
pub(super) fn error_code(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.code.to_string(),
        _ => "transport".into(),
    }
}

pub(super) fn is_code(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

pub(super) fn client_error(what: &str, e: kube::Error) -> ClientError {
    match &e {
        kube::Error::Api(s) if s.code == 404 => ClientError::NotFound(what.to_string()),
        kube::Error::Api(s) if s.code == 409 => ClientError::Conflict(s.message.clone()),
        _ => ClientError::Other(format!("{what}: {e}")),
    }
}

/// The API resource a watched kind is listed as (for errors and metrics).
pub(super) fn resource_of(kind: &str) -> &'static str {
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
        "DeviceClass" => "deviceclasses",
        "ResourceSlice" => "resourceslices",
        "ResourceClaim" => "resourceclaims",
        _ => "unknown",
    }
}
