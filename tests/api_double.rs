//! The API-server double refuses what a v1.36 API server refuses of the writes a
//! scheduler makes, in the server's words, so a careless client fails here before it
//! fails against a real cluster: invalid event names and fields (422), a stale
//! resourceVersion (409), a binding of a bound pod (409), the status subresource
//! changing the spec, deletes of objects with finalizers, RBAC denials (403); and a
//! watch with a selector sees objects enter and leave it as the watch cache sends.

use http_body_util::BodyExt;
use serde_json::{json, Value};
use switchyard_e2e::apiserver::{ApiServer, PODS};

fn client(api: &ApiServer) -> kube::Client {
    api.runtime().block_on(api.client())
}

/// One raw request: the status code and the JSON body.
fn send(
    api: &ApiServer,
    c: &kube::Client,
    method: &str,
    path: &str,
    ctype: &str,
    body: Value,
) -> (u16, Value) {
    api.runtime().block_on(async {
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", ctype)
            .body(serde_json::to_vec(&body).expect("json"))
            .expect("request");
        let resp = c
            .send(req.map(kube::client::Body::from))
            .await
            .expect("send");
        let code = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    })
}

fn event(name: &str) -> Value {
    json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
           "metadata": {"name": name, "namespace": "default"},
           "eventTime": "2026-11-27T10:00:00.000000Z", "type": "Normal",
           "reportingController": "switchyard", "reportingInstance": "switchyard-1",
           "action": "Binding", "reason": "Scheduled", "note": "Successfully assigned",
           "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "p"}})
}

const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/default/events";
const JSON: &str = "application/json";

#[test]
fn events_are_validated_as_v1_36_validates_them() {
    let api = ApiServer::start();
    let c = client(&api);
    let (code, _) = send(
        &api,
        &c,
        "POST",
        EVENTS_PATH,
        JSON,
        event("p.18ebe120a33eb997"),
    );
    assert_eq!(code, 201);
    // An uppercase name (a careless `format!("{:X}")`), a name ending in '.'.
    for name in ["p.18EBE120", "p."] {
        let (code, s) = send(&api, &c, "POST", EVENTS_PATH, JSON, event(name));
        assert_eq!(code, 422, "{name}: {s}");
        let m = s["message"].as_str().unwrap_or_default();
        assert!(
            m.starts_with(&format!(
                "Event.events.k8s.io {name:?} is invalid: metadata.name: Invalid value"
            )),
            "{m}"
        );
    }
    let mut e = event("p.2");
    e["reportingController"] = Value::Null;
    e["note"] = json!("x".repeat(1025));
    let (code, s) = send(&api, &c, "POST", EVENTS_PATH, JSON, e);
    assert_eq!(code, 422);
    assert_eq!(
        s["message"],
        "Event.events.k8s.io \"p.2\" is invalid: [reportingController: Required value, note: Too long: may not be more than 1024 bytes]"
    );
    // A series must count at least 2.
    let (code, s) = send(
        &api,
        &c,
        "PATCH",
        &format!("{EVENTS_PATH}/p.18ebe120a33eb997"),
        "application/merge-patch+json",
        json!({"series": {"count": 1, "lastObservedTime": "2026-11-27T10:00:01.000000Z"}}),
    );
    assert_eq!(code, 422, "{s}");
    // generateName: the prefix and five generated characters.
    let mut e = event("");
    e["metadata"]["generateName"] = json!("p-");
    let (code, s) = send(&api, &c, "POST", EVENTS_PATH, JSON, e);
    assert_eq!(code, 201);
    let name = s["metadata"]["name"].as_str().unwrap_or_default();
    assert!(name.starts_with("p-") && name.len() == 7, "{name}");
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"schedulerName": "switchyard", "containers": [{"name": "c", "image": "x"}]},
           "status": {"phase": "Pending"}})
}

#[test]
fn status_patches_bindings_and_deletes_follow_the_server_rules() {
    let api = ApiServer::start();
    let c = client(&api);
    api.apply(pod("p"));
    let rv = api.get(PODS, "default", "p").expect("p")["metadata"]["resourceVersion"].clone();
    let status_path = "/api/v1/namespaces/default/pods/p/status";
    let smp = "application/strategic-merge-patch+json";
    // The status subresource changes the status only.
    let (code, _) = send(
        &api,
        &c,
        "PATCH",
        status_path,
        smp,
        json!({"spec": {"nodeName": "sneaky"}, "status": {"nominatedNodeName": "n1"}}),
    );
    assert_eq!(code, 200);
    let p = api.get(PODS, "default", "p").expect("p");
    assert!(p["spec"]["nodeName"].is_null(), "{p}");
    assert_eq!(p["status"]["nominatedNodeName"], "n1");
    // A patch carrying a stale resourceVersion is refused.
    let (code, s) = send(
        &api,
        &c,
        "PATCH",
        status_path,
        smp,
        json!({"metadata": {"resourceVersion": rv}, "status": {"nominatedNodeName": "n2"}}),
    );
    assert_eq!(code, 409, "{s}");
    // Binding: once, and then 409 naming the node; the nomination is cleared.
    let bind = |node: &str| {
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
    };
    let bpath = "/api/v1/namespaces/default/pods/p/binding";
    assert_eq!(send(&api, &c, "POST", bpath, JSON, bind("n1")).0, 201);
    let p = api.get(PODS, "default", "p").expect("p");
    assert!(p["status"]["nominatedNodeName"].is_null(), "{p}");
    let (code, s) = send(&api, &c, "POST", bpath, JSON, bind("n2"));
    assert_eq!(code, 409);
    assert!(
        s["message"]
            .as_str()
            .unwrap_or_default()
            .contains("is already assigned to node \"n1\""),
        "{s}"
    );
    // A pod with a finalizer is only marked for deletion.
    let mut f = pod("f");
    f["metadata"]["finalizers"] = json!(["example.com/keep"]);
    api.apply(f);
    let (code, _) = send(
        &api,
        &c,
        "DELETE",
        "/api/v1/namespaces/default/pods/f",
        JSON,
        json!({}),
    );
    assert_eq!(code, 200);
    let f = api.get(PODS, "default", "f").expect("still there");
    assert!(f["metadata"]["deletionTimestamp"].is_string(), "{f}");
}

#[test]
fn rbac_denials_are_403_in_the_servers_words() {
    let api = ApiServer::start();
    let c = client(&api);
    api.apply(pod("p"));
    let rules: Vec<_> = switchyard_e2e::apiserver::deploy_rules()
        .into_iter()
        .filter(|r| !r.resources.iter().any(|x| x == "pods/binding"))
        .collect();
    api.enforce_rbac(rules);
    let bind = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
                      "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}});
    let (code, s) = send(
        &api,
        &c,
        "POST",
        "/api/v1/namespaces/default/pods/p/binding",
        JSON,
        bind,
    );
    assert_eq!(code, 403);
    assert_eq!(
        s["message"],
        "pods \"p\" is forbidden: User \"system:serviceaccount:switchyard-system:switchyard\" cannot create resource \"pods/binding\" in API group \"\" in the namespace \"default\""
    );
    // What the role allows still works.
    assert_eq!(
        send(&api, &c, "GET", "/api/v1/pods", JSON, Value::Null).0,
        200
    );
}

/// The events of a pod watch (`query` added) that ends after a second.
fn watch_events(api: &ApiServer, c: &kube::Client, query: &str) -> Vec<(String, Value)> {
    api.runtime().block_on(async {
        let req = http::Request::get(format!("/api/v1/pods?watch=true&timeoutSeconds=1&{query}"))
            .body(Vec::new())
            .expect("request");
        let resp = c
            .send(req.map(kube::client::Body::from))
            .await
            .expect("watch");
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|e| {
                (
                    e["type"].as_str().unwrap_or_default().to_string(),
                    e["object"].clone(),
                )
            })
            .collect()
    })
}

#[test]
fn a_watch_with_a_selector_sees_objects_enter_and_leave_it() {
    let api = ApiServer::start();
    let c = client(&api);
    api.apply(pod("a"));
    let from = api.get(PODS, "default", "a").expect("a")["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut done = api.get(PODS, "default", "a").expect("a");
    done["status"]["phase"] = json!("Succeeded");
    api.apply(done);
    let mut b = pod("b");
    b["status"]["phase"] = json!("Succeeded");
    api.apply(b.clone());
    b["status"]["phase"] = json!("Running");
    api.apply(b);
    // Replayed from history, as a resumed watch is: `a` left the selection (the
    // informer must drop it), `b` entered it.
    let sel = "fieldSelector=status.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed";
    let events = watch_events(&api, &c, &format!("resourceVersion={from}&{sel}"));
    let seen: Vec<(String, String)> = events
        .iter()
        .map(|(t, o)| {
            (
                t.clone(),
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("DELETED".to_string(), "a".to_string()),
            ("ADDED".to_string(), "b".to_string())
        ]
    );
    // The DELETED carries the object as it was, at the change's resourceVersion.
    assert_eq!(events[0].1["status"]["phase"], "Pending");
}
