//! Calls recorded by the double checked against `deploy/rbac.yaml`: what the
//! shipped ClusterRole and Role would forbid.

use super::*;

/// One RBAC rule of deploy/rbac.yaml (ClusterRole or Role; namespaces are not
/// compared: the tests' objects live in `default`).
#[derive(Debug)]
pub(super) struct Rule {
    pub(super) groups: Vec<String>,
    pub(super) resources: Vec<String>,
    pub(super) names: Vec<String>,
    pub(super) verbs: Vec<String>,
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

impl ApiServer {
    /// Every call recorded so far, checked against the ClusterRole and Role in
    /// deploy/rbac.yaml: the list of calls they would forbid.
    pub fn forbidden_by_deploy_rbac(&self) -> Vec<String> {
        let path = crate::workspace_root().join("deploy/rbac.yaml");
        let text = std::fs::read_to_string(&path).expect("deploy/rbac.yaml");
        let docs: Vec<Value> = switchyard::yaml::from_multiple(&text).expect("rbac yaml");
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        };
        let rules: Vec<Rule> = docs
            .iter()
            .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
            .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
            .map(|r| Rule {
                groups: strings(&r["apiGroups"]),
                resources: strings(&r["resources"]),
                names: strings(&r["resourceNames"]),
                verbs: strings(&r["verbs"]),
            })
            .collect();
        let mut out = Vec::new();
        for c in self.calls() {
            let Some((verb, group, resource, name)) = rbac_request(&c) else {
                out.push(format!(
                    "{} {}: not a Kubernetes API request",
                    c.method, c.path
                ));
                continue;
            };
            let ok = rules.iter().any(|r| {
                r.verbs.contains(&verb)
                    && r.groups.contains(&group)
                    && r.resources.contains(&resource)
                    && (r.names.is_empty() || name.as_ref().is_some_and(|n| r.names.contains(n)))
            });
            if !ok {
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
