//! The API-server double refuses what a v1.36 API server refuses of the writes a
//! scheduler makes, in the server's words, so a careless client fails here before it
//! fails against a real cluster: invalid event names and fields (422), a stale
//! resourceVersion (409), a binding of a bound pod (409) or without a target (422),
//! the status subresource changing the spec, deletes of objects with finalizers,
//! RBAC denials (403), fields the API lacks (a Warning, or 400 when strict),
//! protobuf bodies with the wrong field numbers, list and watch options the server
//! refuses (422, 400); and it lists and watches as the server does: consistent
//! pages, selectors, bookmarks, streaming lists, 410 once compacted.

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
    // ValidatePodBinding: a target needs a name; the URL and the Binding agree.
    let mut no_target = bind("");
    no_target["metadata"]["name"] = json!("q");
    let qpath = "/api/v1/namespaces/default/pods/q/binding";
    let (code, s) = send(&api, &c, "POST", qpath, JSON, no_target);
    assert_eq!(
        (code, s["message"].as_str()),
        (
            422,
            Some("Binding \"q\" is invalid: target.name: Required value")
        )
    );
    let (code, _) = send(&api, &c, "POST", qpath, JSON, bind("n1"));
    assert_eq!(code, 400, "the URL names q, the Binding p");
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

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// A GET on a plain connection, without a client's retries.
fn raw_get(api: &ApiServer, path: &str) -> (u16, Value) {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(api.addr).expect("connect");
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: double\r\nConnection: close\r\n\r\n"
    )
    .expect("write");
    let mut out = String::new();
    conn.read_to_string(&mut out).expect("read");
    let code = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default();
    (code, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn get(api: &ApiServer, c: &kube::Client, path: &str) -> (u16, Value) {
    send(api, c, "GET", path, JSON, Value::Null)
}

#[test]
fn lists_come_in_consistent_pages_until_their_version_is_compacted() {
    let api = ApiServer::start();
    let c = client(&api);
    for i in 0..5 {
        api.apply(pod(&format!("p-{i}")));
    }
    let (code, first) = get(&api, &c, "/api/v1/namespaces/default/pods?limit=2");
    assert_eq!(code, 200);
    assert_eq!(names(&first), ["p-0", "p-1"]);
    assert_eq!(first["metadata"]["remainingItemCount"], 3);
    // Items carry no type of their own: the list does.
    assert!(first["items"][0]["kind"].is_null(), "{first}");
    // Changes after the first page do not show in the next: one consistent list.
    api.apply(pod("p-9"));
    api.delete(PODS, "default", "p-3");
    let token = first["metadata"]["continue"].as_str().expect("continue");
    let (_, second) = get(
        &api,
        &c,
        &format!("/api/v1/namespaces/default/pods?limit=2&continue={token}"),
    );
    assert_eq!(names(&second), ["p-2", "p-3"]);
    assert_eq!(
        second["metadata"]["resourceVersion"],
        first["metadata"]["resourceVersion"]
    );
    let token = second["metadata"]["continue"].as_str().expect("continue");
    let (_, third) = get(
        &api,
        &c,
        &format!("/api/v1/namespaces/default/pods?limit=2&continue={token}"),
    );
    assert_eq!(names(&third), ["p-4"]);
    assert!(third["metadata"]["continue"].is_null(), "{third}");
    // Once compacted, the token has expired: 410, and the client must list again.
    api.compact();
    let (code, s) = get(
        &api,
        &c,
        &format!("/api/v1/namespaces/default/pods?limit=2&continue={token}"),
    );
    assert_eq!((code, s["reason"].as_str()), (410, Some("Expired")));
    // A token that is not one is a bad request.
    assert_eq!(get(&api, &c, "/api/v1/pods?continue=bogus").0, 400);
    // A version the server has not reached: 504, which clients retry (so asked
    // without one).
    let (code, s) = raw_get(&api, "/api/v1/pods?resourceVersion=999999");
    assert_eq!((code, s["reason"].as_str()), (504, Some("Timeout")));
}

#[test]
fn list_and_watch_options_are_refused_as_the_server_refuses_them() {
    let api = ApiServer::start();
    let c = client(&api);
    api.apply(pod("a"));
    let rv = api.get(PODS, "default", "a").expect("a")["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    api.apply(pod("b"));
    // An exact list reads the past.
    let (code, s) = get(
        &api,
        &c,
        &format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact"),
    );
    assert_eq!((code, names(&s)), (200, vec!["a".to_string()]));
    for (query, message) in [
        (
            "resourceVersionMatch=NotOlderThan",
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        ),
        (
            "resourceVersion=0&resourceVersionMatch=Exact",
            "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
        ),
        (
            "sendInitialEvents=true",
            "sendInitialEvents is forbidden for list",
        ),
        (
            "watch=true&sendInitialEvents=true",
            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ),
        (
            "watch=true&resourceVersion=5&resourceVersionMatch=NotOlderThan",
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ),
    ] {
        let (code, s) = get(&api, &c, &format!("/api/v1/pods?{query}"));
        assert_eq!(code, 422, "{query}: {s}");
        let m = s["message"].as_str().unwrap_or_default();
        assert!(
            m.starts_with("ListOptions.meta.k8s.io \"\" is invalid: ") && m.contains(message),
            "{query}: {m}"
        );
    }
    let (code, s) = get(&api, &c, "/api/v1/pods?fieldSelector=spec.priority%3D1");
    assert_eq!(
        (code, s["message"].as_str()),
        (400, Some("field label not supported: spec.priority"))
    );
    let (code, s) = get(&api, &c, "/api/v1/pods?labelSelector=app%20in%20web");
    assert_eq!(code, 400, "{s}");
}

#[test]
fn a_streaming_list_ends_its_initial_events_with_a_marked_bookmark() {
    let api = ApiServer::start();
    let c = client(&api);
    api.apply(pod("a"));
    api.apply(pod("b"));
    let now = api.get(PODS, "default", "b").expect("b")["metadata"]["resourceVersion"].clone();
    let events = watch_events(
        &api,
        &c,
        "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
    );
    let types: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(types, ["ADDED", "ADDED", "BOOKMARK"]);
    let end = &events[2].1;
    assert_eq!(
        end["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(end["metadata"]["resourceVersion"], now);
    assert_eq!(end["kind"], "Pod");
    // A legacy watch from "" is defaulted to the same stream (WatchList); without
    // bookmarks allowed there is no end marker.
    let events = watch_events(&api, &c, "");
    let types: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(types, ["ADDED", "ADDED"]);
}

#[test]
fn a_watch_gets_bookmarks_and_a_compacted_version_is_gone() {
    let api = ApiServer::start();
    let c = client(&api);
    api.apply(pod("a"));
    let rv: u64 = api.get(PODS, "default", "a").expect("a")["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("rv");
    api.set_bookmark_interval(std::time::Duration::from_millis(150));
    // A change of another kind, mid-watch, moves the bookmarks on: a client that
    // resumes from a bookmark does not replay what it has seen.
    let events = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(400));
            api.apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}));
        });
        watch_events(
            &api,
            &c,
            &format!("resourceVersion={rv}&allowWatchBookmarks=true"),
        )
    });
    let marks: Vec<u64> = events
        .iter()
        .filter(|(t, _)| t == "BOOKMARK")
        .filter_map(|(_, o)| o["metadata"]["resourceVersion"].as_str()?.parse().ok())
        .collect();
    assert!(marks.len() >= 3, "{events:?}");
    assert!(marks.windows(2).all(|w| w[0] <= w[1]), "{marks:?}");
    assert_eq!(
        (marks[0], marks[marks.len() - 1]),
        (rv, rv + 1),
        "{marks:?}"
    );
    assert!(events.iter().all(|(t, _)| t == "BOOKMARK"), "{events:?}");
    // Without asking for them, none.
    assert!(watch_events(&api, &c, &format!("resourceVersion={rv}")).is_empty());
    api.compact();
    let events = watch_events(&api, &c, &format!("resourceVersion={rv}"));
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].0.as_str(), &events[0].1["code"]),
        ("ERROR", &json!(410))
    );
}

#[test]
fn kube_watchers_list_in_pages_and_stream_lists() {
    use futures_util::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::watcher;
    let api = ApiServer::start();
    let c = client(&api);
    for i in 0..7 {
        api.apply(pod(&format!("p-{i}")));
    }
    for config in [
        watcher::Config::default().page_size(3),
        watcher::Config::default().streaming_lists(),
    ] {
        let pods: kube::Api<Pod> = kube::Api::all(c.clone());
        let seen = api.runtime().block_on(async {
            let mut stream = watcher(pods, config).boxed();
            let mut seen = 0;
            while let Some(e) = stream.next().await {
                match e.expect("watch event") {
                    watcher::Event::InitApply(_) => seen += 1,
                    watcher::Event::InitDone => break,
                    _ => {}
                }
            }
            seen
        });
        assert_eq!(seen, 7);
    }
    let lists = api
        .calls()
        .iter()
        .filter(|c| c.method == "GET" && c.path.contains("limit=3"))
        .count();
    assert_eq!(lists, 3, "7 pods in pages of 3");
}

#[test]
fn unknown_fields_are_warned_of_dropped_or_refused_as_asked() {
    let api = ApiServer::start();
    let c = client(&api);
    let mut e = event("careless");
    e["message"] = json!("core/v1 Events have this; events.k8s.io/v1 has note");
    // Warn (the default): stored without the field, one Warning header.
    let (code, stored) = send(&api, &c, "POST", EVENTS_PATH, JSON, e.clone());
    assert_eq!(code, 201);
    assert!(stored.get("message").is_none(), "{stored}");
    assert_eq!(stored["note"], e["note"]);
    assert_eq!(
        api.warnings(),
        [(EVENTS_PATH.to_string(), "message".to_string())]
    );
    // Strict: refused, naming the field.
    e["metadata"]["name"] = json!("strict");
    let (code, s) = send(
        &api,
        &c,
        "POST",
        &format!("{EVENTS_PATH}?fieldValidation=Strict"),
        JSON,
        e.clone(),
    );
    assert_eq!(code, 400);
    assert_eq!(
        s["message"],
        r#"strict decoding error: unknown field "message""#
    );
    // Ignore: stored, no warning.
    e["metadata"]["name"] = json!("ignored");
    let path = format!("{EVENTS_PATH}?fieldValidation=Ignore");
    assert_eq!(send(&api, &c, "POST", &path, JSON, e).0, 201);
    assert_eq!(api.warnings().len(), 1);
    // A status patch is judged by what it writes.
    api.apply(pod("p"));
    let (code, _) = send(
        &api,
        &c,
        "PATCH",
        "/api/v1/namespaces/default/pods/p/status",
        "application/strategic-merge-patch+json",
        json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reasons": "x"}]}}),
    );
    assert_eq!(code, 200);
    assert_eq!(api.warnings()[1].1, "status.conditions[0].reasons");
    // A body that is not JSON is a bad request.
    api.runtime().block_on(async {
        let req = http::Request::post(EVENTS_PATH)
            .header("content-type", JSON)
            .body(b"{not json".to_vec())
            .expect("request");
        let resp = c
            .send(req.map(kube::client::Body::from))
            .await
            .expect("send");
        assert_eq!(resp.status().as_u16(), 400);
    });
}

/// A raw POST: status, answer media type, answer bytes.
fn post_bytes(
    api: &ApiServer,
    c: &kube::Client,
    path: &str,
    ctype: &str,
    body: Vec<u8>,
) -> (u16, String, Vec<u8>) {
    api.runtime().block_on(async {
        let req = http::Request::post(path)
            .header("content-type", ctype)
            .header("accept", PROTOBUF)
            .body(body)
            .expect("request");
        let resp = c
            .send(req.map(kube::client::Body::from))
            .await
            .expect("send");
        let code = resp.status().as_u16();
        let ctype = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        (code, ctype, bytes.to_vec())
    })
}

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// Length-delimited field `tag` holding `b` (protobuf wire format, by hand).
fn ld(tag: u8, b: &[u8]) -> Vec<u8> {
    let mut out = vec![(tag << 3) | 2, b.len() as u8];
    out.extend_from_slice(b);
    out
}

/// `k8s\0` + runtime.Unknown{typeMeta{apiVersion, kind}, raw}.
fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let tm = [ld(1, api_version.as_bytes()), ld(2, kind.as_bytes())].concat();
    [b"k8s\0".to_vec(), ld(1, &tm), ld(2, raw)].concat()
}

#[test]
fn protobuf_bodies_are_read_by_upstreams_field_numbers() {
    use switchyard::cluster::kubeproto;
    let api = ApiServer::start();
    let c = client(&api);
    for p in ["p", "q", "r"] {
        api.apply(pod(p));
    }
    // Switchyard's own encoding binds, and the answer comes back in protobuf.
    let uid = api.get(PODS, "default", "p").expect("p")["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let body = kubeproto::binding("default", "p", &uid, "n1");
    let (code, ctype, answer) = post_bytes(
        &api,
        &c,
        "/api/v1/namespaces/default/pods/p/binding",
        PROTOBUF,
        body,
    );
    assert_eq!((code, ctype.as_str()), (201, PROTOBUF));
    assert_eq!(
        kubeproto::decode_status(&answer).and_then(|s| s.code),
        Some(201)
    );
    assert_eq!(api.node_of("p").as_deref(), Some("n1"));
    // A careless encoding: the node's name under ObjectReference's uid (4), not
    // its name (3). Refused as the server refuses a Binding without a target, and
    // the refusal is a protobuf Status.
    let meta = ld(1, b"q");
    let target = [ld(1, b"Node"), ld(4, b"n1")].concat();
    let careless = envelope("v1", "Binding", &[ld(1, &meta), ld(2, &target)].concat());
    let (code, _, answer) = post_bytes(
        &api,
        &c,
        "/api/v1/namespaces/default/pods/q/binding",
        PROTOBUF,
        careless,
    );
    assert_eq!(code, 422);
    let s = kubeproto::decode_status(&answer).expect("a protobuf Status");
    assert_eq!(
        s.message.as_deref(),
        Some("Binding \"q\" is invalid: target.name: Required value")
    );
    // A field number the type lacks: a real server drops it silently; the double
    // notes it for `assert_a_careful_client`.
    let target = [ld(1, b"Node"), ld(3, b"n1")].concat();
    let extra = envelope(
        "v1",
        "Binding",
        &[ld(1, &ld(1, b"r")), ld(2, &target), ld(7, b"x")].concat(),
    );
    let (code, _, _) = post_bytes(
        &api,
        &c,
        "/api/v1/namespaces/default/pods/r/binding",
        PROTOBUF,
        extra,
    );
    assert_eq!(code, 201);
    assert_eq!(api.warnings().len(), 1);
    assert!(
        api.warnings()[0].1.contains("protobuf field #7 dropped"),
        "{:?}",
        api.warnings()
    );
    // The envelope must name the kind of the resource written.
    let wrong = envelope("events.k8s.io/v1", "Event", &ld(1, &ld(1, b"r")));
    assert_eq!(
        post_bytes(
            &api,
            &c,
            "/api/v1/namespaces/default/pods/r/binding",
            PROTOBUF,
            wrong
        )
        .0,
        400
    );
    // A JSON-only server refuses the media type; the client must fall back.
    api.refuse_protobuf();
    let body = kubeproto::binding("default", "q", "", "n1");
    assert_eq!(
        post_bytes(
            &api,
            &c,
            "/api/v1/namespaces/default/pods/q/binding",
            PROTOBUF,
            body
        )
        .0,
        415
    );
}
