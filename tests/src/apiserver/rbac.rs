//! Calls recorded by the double checked against `deploy/rbac.yaml`: what the
//! shipped ClusterRole and Role would forbid.

use super::*;

/// One RBAC rule of deploy/rbac.yaml (ClusterRole or Role; namespaces are not
/// compared: the tests' objects live in `default`).
#[derive(Debug, Clone)]
pub struct Rule {
    pub groups: Vec<String>,
    pub resources: Vec<String>,
    pub names: Vec<String>,
    pub verbs: Vec<String>,
}

/// What RBAC sees of a request: verb, API group, resource (with subresource), name.
pub fn rbac_request(c: &Call) -> Option<(String, String, String, Option<String>)> {
    let (path, query) = c.path.split_once('?').unwrap_or((&c.path, ""));
    let (kind, _ns, name, sub) = route(path)?;
    let group = kind
        .group_version
        .rsplit_once('/')
        .map_or("", |(g, _)| g)
        .to_string();
    let resource = match &sub {
        Some(s) => format!("{}/{s}", kind.plural),
        None => kind.plural.to_string(),
    };
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match (c.method.as_str(), &name) {
        ("GET", None) if watch => "watch",
        ("GET", None) => "list",
        ("GET", Some(_)) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", _) => "delete",
        _ => return None,
    };
    Some((
        verb.to_string(),
        group,
        resource,
        if sub.is_some() { name } else { name.clone() },
    ))
}

/// The Role and ClusterRole rules of an RBAC manifest (multi-document YAML).
pub fn rules_of(text: &str) -> Vec<Rule> {
    let docs: Vec<Value> = switchyard::yaml::from_multiple(text).expect("rbac yaml");
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    docs.iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| Rule {
            groups: strings(&r["apiGroups"]),
            resources: strings(&r["resources"]),
            names: strings(&r["resourceNames"]),
            verbs: strings(&r["verbs"]),
        })
        .collect()
}

/// deploy/rbac.yaml's rules.
pub fn deploy_rules() -> Vec<Rule> {
    let path = crate::workspace_root().join("deploy/rbac.yaml");
    rules_of(&std::fs::read_to_string(&path).expect("deploy/rbac.yaml"))
}

/// Whether `rules` allow the request (exact names, as the shipped roles use no
/// wildcards).
pub(super) fn allowed(
    rules: &[Rule],
    verb: &str,
    group: &str,
    resource: &str,
    name: Option<&str>,
) -> bool {
    rules.iter().any(|r| {
        r.verbs.iter().any(|v| v == verb)
            && r.groups.iter().any(|g| g == group)
            && r.resources.iter().any(|x| x == resource)
            && (r.names.is_empty() || name.is_some_and(|n| r.names.iter().any(|x| x == n)))
    })
}

/// The user the double's token stands for when it enforces RBAC.
pub const SERVICE_ACCOUNT_USER: &str = "system:serviceaccount:switchyard-system:switchyard";

/// A 403 in the API server's words (`staging/src/k8s.io/apiserver/pkg/endpoints/
/// handlers/responsewriters/errors.go`, `forbiddenMessage`).
pub(super) fn forbidden_message(
    verb: &str,
    group: &str,
    resource: &str,
    name: Option<&str>,
    namespace: Option<&str>,
) -> String {
    let base = resource.split('/').next().unwrap_or(resource);
    let object = match name {
        Some(n) => format!("{base} {n:?}"),
        None => base.to_string(),
    };
    let scope = match namespace {
        Some(ns) => format!("in the namespace {ns:?}"),
        None => "at the cluster scope".to_string(),
    };
    format!("{object} is forbidden: User {SERVICE_ACCOUNT_USER:?} cannot {verb} resource {resource:?} in API group {group:?} {scope}")
}

/// A discovery path: no resource in it.
fn is_discovery(path: &str) -> bool {
    let path = path.split('?').next().unwrap_or(path);
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    matches!(
        parts.as_slice(),
        ["api"] | ["api", _] | ["apis"] | ["apis", _] | ["apis", _, _]
    )
}

impl ApiServer {
    /// From now on, requests `rules` do not allow are refused (403 Forbidden), as a
    /// server would refuse the ServiceAccount's token.
    pub fn enforce_rbac(&self, rules: Vec<Rule>) {
        self.state.lock().unwrap().rbac = Some(Arc::new(rules));
    }

    /// Every call recorded so far, checked against the ClusterRole and Role in
    /// deploy/rbac.yaml: the list of calls they would forbid.
    pub fn forbidden_by_deploy_rbac(&self) -> Vec<String> {
        let rules = deploy_rules();
        let mut out = Vec::new();
        for c in self.calls() {
            // Discovery (`/api`, `/apis`, `/apis/GROUP/VERSION`) is every
            // authenticated user's (the bootstrap `system:discovery` role).
            if c.method == "GET" && is_discovery(&c.path) {
                continue;
            }
            let Some((verb, group, resource, name)) = rbac_request(&c) else {
                out.push(format!(
                    "{} {}: not a Kubernetes API request",
                    c.method, c.path
                ));
                continue;
            };
            if !allowed(&rules, &verb, &group, &resource, name.as_deref()) {
                out.push(format!(
                    "{} {} ({verb} {group}/{resource})",
                    c.method, c.path
                ));
            }
        }
        out.sort();
        out.dedup();
        out
    }
}
