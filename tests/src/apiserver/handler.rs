//! Serving requests as the API server does: routing, list and watch, binding,
//! status patches, deletes with preconditions, events and Leases.

use super::*;

pub(super) fn json_response(code: StatusCode, v: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(v.to_string())).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

/// 404 for an object of `kind` named `name`, in the server's words.
pub(super) fn not_found(kind: Kind, name: &str) -> Response<Body> {
    status(
        404,
        "NotFound",
        &format!("{} {name:?} not found", kind.plural),
    )
}

/// A patch that names a resourceVersion is a precondition: 409 when the object has
/// moved on.
pub(super) fn rv_conflict(
    kind: Kind,
    name: &str,
    cur: &Value,
    patch: &Value,
) -> Option<Response<Body>> {
    let want = patch["metadata"]["resourceVersion"].as_str()?;
    (cur["metadata"]["resourceVersion"].as_str() != Some(want)).then(|| {
        status(409, "Conflict", &format!("Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again", kind.plural))
    })
}

/// 422 Invalid, worded as the API server words it: `Kind.group "name" is invalid:
/// field: message` (several in brackets).
pub(super) fn invalid(kind: Kind, o: &Value, e: validate::Invalid) -> Response<Body> {
    let group = kind.group_version.rsplit_once('/').map(|(g, _)| g);
    let what = match group {
        Some(g) => format!("{}.{g}", kind.kind),
        None => kind.kind.to_string(),
    };
    let list = if e.0.len() == 1 {
        e.0[0].clone()
    } else {
        format!("[{}]", e.0.join(", "))
    };
    let name = o["metadata"]["name"].as_str().unwrap_or("");
    status(
        422,
        "Invalid",
        &format!("{what} {name:?} is invalid: {list}"),
    )
}

pub(super) fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
    json_response(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code}),
    )
}

/// Strategic merge of `patch` into `target`, with lists of conditions merged by
/// `type` (the only list the scheduler patches).
pub(super) fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else if k == "conditions" && v.is_array() {
                    let list = t.entry(k.clone()).or_insert_with(|| json!([]));
                    let Some(items) = list.as_array_mut() else {
                        continue;
                    };
                    for c in v.as_array().into_iter().flatten() {
                        match items.iter_mut().find(|x| x["type"] == c["type"]) {
                            Some(x) => merge(x, c),
                            None => items.push(c.clone()),
                        }
                    }
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

impl Shared {
    pub(super) fn put(&self, kind: Kind, mut object: Value) -> Value {
        let mut st = self.state.lock().unwrap();
        st.rv += 1;
        let rv = st.rv;
        let ns = ns_of(kind, object["metadata"]["namespace"].as_str().unwrap_or(""));
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let key = (kind, ns.clone(), name);
        let existed = st.objects.get(&key).cloned();
        if kind.namespaced {
            object["metadata"]["namespace"] = json!(ns);
        }
        if object["metadata"]["uid"].is_null() {
            object["metadata"]["uid"] = match &existed {
                Some(o) => o["metadata"]["uid"].clone(),
                None => {
                    st.uid += 1;
                    json!(format!("uid-{}", st.uid))
                }
            };
        }
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        st.objects.insert(key, object.clone());
        let change = Change {
            rv,
            kind,
            kind_type: if existed.is_some() {
                "MODIFIED"
            } else {
                "ADDED"
            },
            object: object.clone(),
            prev: existed,
        };
        let created = change.prev.is_none();
        st.history.push(change.clone());
        // Sent under the lock, so watches see changes in resourceVersion order.
        let _ = self.changes.send(change);
        drop(st);
        // kube-controller-manager's resourceclaim controller.
        if kind == PODS && created {
            self.claims_for_pod(&object);
        }
        object
    }

    pub(super) fn remove(&self, kind: Kind, namespace: &str, name: &str) -> Option<Value> {
        let mut st = self.state.lock().unwrap();
        let mut object = st
            .objects
            .remove(&(kind, ns_of(kind, namespace), name.to_string()))?;
        let prev = object.clone();
        st.rv += 1;
        object["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        let change = Change {
            rv: st.rv,
            kind,
            kind_type: "DELETED",
            object: object.clone(),
            prev: Some(prev),
        };
        st.history.push(change.clone());
        let _ = self.changes.send(change);
        drop(st);
        if kind == PODS {
            self.pod_gone(&object);
        }
        Some(object)
    }

    /// Serves a request, answering in protobuf when the client asks only for it
    /// and the answer's kind is one the double encodes (see [`protobuf`]).
    pub(super) async fn handle(&self, req: Request<hyper::body::Incoming>) -> Response<Body> {
        let accept = req
            .headers()
            .get("accept")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let wants_protobuf = accept.starts_with(protobuf::MEDIA_TYPE)
            && !accept.contains("json")
            && !accept.contains("*/*")
            && req.method() != Method::GET
            && !self.state.lock().unwrap().protobuf_refused;
        let resp = self.handle_request(req).await;
        if !wants_protobuf {
            return resp;
        }
        let (mut parts, body) = resp.into_parts();
        let bytes = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let encoded = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| protobuf::encode_object(&v));
        match encoded {
            Some(pb) => {
                parts.headers.insert(
                    "content-type",
                    hyper::header::HeaderValue::from_static(protobuf::MEDIA_TYPE),
                );
                Response::from_parts(parts, Full::new(Bytes::from(pb)).boxed())
            }
            None => Response::from_parts(parts, Full::new(bytes).boxed()),
        }
    }

    async fn handle_request(&self, req: Request<hyper::body::Incoming>) -> Response<Body> {
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let query: HashMap<String, String> = req
            .uri()
            .query()
            .unwrap_or("")
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), percent_decode(v)))
            .collect();
        let call = Call {
            method: method.to_string(),
            path: req
                .uri()
                .path_and_query()
                .map(|p| p.to_string())
                .unwrap_or_default(),
            content_type: req
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        };
        // This request's own call: another connection may record one meanwhile.
        let rbac = {
            let mut st = self.state.lock().unwrap();
            st.calls.push(call.clone());
            st.rbac.clone()
        };
        if let Some(rules) = rbac {
            if let Some((verb, group, resource, name)) = rbac_request(&call) {
                if !rbac::allowed(&rules, &verb, &group, &resource, name.as_deref()) {
                    let ns = route(&path).and_then(|r| r.1);
                    return status(
                        403,
                        "Forbidden",
                        &rbac::forbidden_message(
                            &verb,
                            &group,
                            &resource,
                            name.as_deref(),
                            ns.as_deref(),
                        ),
                    );
                }
            }
        }
        let content_type = req
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
            .to_string();
        let body = match req.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => Bytes::new(),
        };
        if method == Method::GET && path.trim_end_matches('/') == "/apis/resource.k8s.io/v1" {
            return json_response(StatusCode::OK, &resourceclaim::discovery());
        }
        let Some((kind, ns, name, sub)) = route(&path) else {
            return status(
                404,
                "NotFound",
                &format!("the server could not find the requested resource {path}"),
            );
        };
        let writes = matches!(method, Method::POST | Method::PUT | Method::PATCH);
        // The body's type: JSON, or protobuf for the kinds the double decodes
        // (Binding, Event); 415 for anything else, as a server answers a media
        // type it cannot decode.
        let (pb_kind, pb_version) = match sub.as_deref() {
            Some("binding") => ("Binding", "v1"),
            _ => (kind.kind, kind.group_version),
        };
        let protobuf_ok = content_type.starts_with(protobuf::MEDIA_TYPE)
            && protobuf::readable(pb_kind)
            && !self.state.lock().unwrap().protobuf_refused;
        let body: Value = if protobuf_ok && writes {
            match protobuf::decode_body(&body, pb_version, pb_kind) {
                Ok((v, dropped)) => {
                    // The server drops these without a word; the double tells.
                    let mut st = self.state.lock().unwrap();
                    st.warnings.extend(
                        dropped
                            .into_iter()
                            .map(|d| (call.path.clone(), format!("protobuf field {d} dropped"))),
                    );
                    v
                }
                Err(e) => {
                    return status(
                        400,
                        "BadRequest",
                        &format!("the body of the request could not be decoded: {e}"),
                    )
                }
            }
        } else if !content_type.contains("json") {
            return status(
                415,
                "UnsupportedMediaType",
                &format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {content_type})"),
            );
        } else {
            match serde_json::from_slice(&body) {
                Ok(v) => v,
                Err(e) if writes => {
                    return status(
                        400,
                        "BadRequest",
                        &format!("couldn't get version/kind; json parse error: {e}"),
                    )
                }
                Err(_) => Value::Null,
            }
        };
        let validation = match warnings::FieldValidation::from_query(
            query.get("fieldValidation").map(String::as_str),
        ) {
            Ok(v) => v,
            Err(e) => return status(400, "BadRequest", &e),
        };
        let unknown = if writes && validation != warnings::FieldValidation::Ignore {
            self.unknown_in_write(
                kind,
                ns.as_deref(),
                name.as_deref(),
                sub.as_deref(),
                &method,
                &body,
            )
        } else {
            Vec::new()
        };
        if validation == warnings::FieldValidation::Strict && !unknown.is_empty() {
            let list: Vec<String> = unknown
                .iter()
                .map(|f| format!("unknown field {f:?}"))
                .collect();
            return status(
                400,
                "BadRequest",
                &format!("strict decoding error: {}", list.join(", ")),
            );
        }
        let mut body = body;
        for f in &unknown {
            warnings::strip(&mut body, f);
        }
        let mut resp = self.serve(method, kind, ns, name, sub, body, &query);
        if resp.status().is_success() && !unknown.is_empty() {
            for f in &unknown {
                if let Ok(h) = hyper::header::HeaderValue::from_str(&warnings::header(f)) {
                    resp.headers_mut().append("warning", h);
                }
            }
            let mut st = self.state.lock().unwrap();
            st.warnings
                .extend(unknown.into_iter().map(|f| (call.path.clone(), f)));
        }
        resp
    }

    /// The fields of a write the API lacks (see [`warnings`]).
    fn unknown_in_write(
        &self,
        kind: Kind,
        ns: Option<&str>,
        name: Option<&str>,
        sub: Option<&str>,
        method: &Method,
        body: &Value,
    ) -> Vec<String> {
        let result = match (method, name) {
            (&Method::PATCH, Some(n)) => {
                let Some(mut cur) = self.get(kind, ns.unwrap_or(""), n) else {
                    return Vec::new();
                };
                if sub == Some("status") {
                    merge(&mut cur, &json!({"status": body["status"].clone()}));
                } else {
                    merge(&mut cur, body);
                }
                cur
            }
            _ => body.clone(),
        };
        warnings::unknown_fields(kind, sub, body, &result)
    }

    /// Answers a routed request.
    #[allow(clippy::too_many_arguments)]
    fn serve(
        &self,
        method: Method,
        kind: Kind,
        ns: Option<String>,
        name: Option<String>,
        sub: Option<String>,
        body: Value,
        query: &HashMap<String, String>,
    ) -> Response<Body> {
        match (method, name.as_deref(), sub.as_deref()) {
            (Method::GET, None, None) => {
                let opts = match listwatch::ListOptions::from_query(query) {
                    Ok(o) => o,
                    Err(e) => return status(400, "BadRequest", &e),
                };
                let errs = opts.validate();
                if !errs.is_empty() {
                    return listwatch::invalid_options(&errs);
                }
                let sel = match Selection::parse(
                    kind,
                    ns.as_deref(),
                    query.get("labelSelector").map(String::as_str),
                    query.get("fieldSelector").map(String::as_str),
                ) {
                    Ok(s) => s,
                    Err(e) => return status(400, "BadRequest", &e),
                };
                if opts.watch {
                    self.watch(kind, sel, opts)
                } else {
                    self.list_response(kind, &sel, &opts)
                }
            }
            (Method::GET, Some(n), None) => match self.get(kind, ns.as_deref().unwrap_or(""), n) {
                Some(o) => json_response(StatusCode::OK, &o),
                None => not_found(kind, n),
            },
            (Method::POST, None, None) => {
                let mut o = body;
                if o["metadata"]["name"].as_str().is_none_or(str::is_empty) {
                    if let Some(base) = o["metadata"]["generateName"].as_str() {
                        let n = self.state.lock().unwrap().rv;
                        o["metadata"]["name"] = json!(validate::generate_name(base, n));
                    }
                }
                if let Err(e) = validate::validate_create(kind, &o) {
                    return invalid(kind, &o, e);
                }
                if let Some(ns) = &ns {
                    o["metadata"]["namespace"] = json!(ns);
                }
                let n = o["metadata"]["name"].as_str().unwrap_or("").to_string();
                if self.get(kind, ns.as_deref().unwrap_or(""), &n).is_some() {
                    return status(
                        409,
                        "AlreadyExists",
                        &format!("{} \"{n}\" already exists", kind.plural),
                    );
                }
                o["apiVersion"] = json!(kind.group_version);
                o["kind"] = json!(kind.kind);
                json_response(StatusCode::CREATED, &self.put(kind, o))
            }
            (Method::PUT, Some(n), None) => {
                let Some(cur) = self.get(kind, ns.as_deref().unwrap_or(""), n) else {
                    return not_found(kind, n);
                };
                if body["metadata"]["resourceVersion"] != cur["metadata"]["resourceVersion"] {
                    return status(409, "Conflict", &format!("Operation cannot be fulfilled on {} \"{n}\": the object has been modified; please apply your changes to the latest version and try again", kind.plural));
                }
                let mut o = body;
                // An update of the main resource leaves the status alone (the
                // status subresource's job).
                if kind == PODS || kind == NODES || kind == RESOURCE_CLAIMS {
                    o["status"] = cur["status"].clone();
                }
                o["apiVersion"] = json!(kind.group_version);
                o["kind"] = json!(kind.kind);
                json_response(StatusCode::OK, &self.put(kind, o))
            }
            (Method::POST, Some(n), Some("binding")) if kind == PODS => {
                self.bind(ns.as_deref().unwrap_or(""), n, &body)
            }
            // A merge patch of an object (event series).
            (Method::PATCH, Some(n), None) => {
                let Some(mut cur) = self.get(kind, ns.as_deref().unwrap_or(""), n) else {
                    return not_found(kind, n);
                };
                if let Some(c) = rv_conflict(kind, n, &cur, &body) {
                    return c;
                }
                let mut body = body;
                // The claim strategy keeps the status out of main-resource writes.
                if kind == RESOURCE_CLAIMS {
                    if let Some(o) = body.as_object_mut() {
                        o.remove("status");
                    }
                }
                merge(&mut cur, &body);
                if let Err(e) = validate::validate_create(kind, &cur) {
                    return invalid(kind, &cur, e);
                }
                json_response(StatusCode::OK, &self.put(kind, cur))
            }
            (Method::PATCH, Some(n), Some("status")) => {
                let Some(mut cur) = self.get(kind, ns.as_deref().unwrap_or(""), n) else {
                    return not_found(kind, n);
                };
                if let Some(c) = rv_conflict(kind, n, &cur, &body) {
                    return c;
                }
                // The status subresource changes the status only
                // (pkg/registry/core/pod/strategy.go, podStatusStrategy).
                let old = cur.clone();
                merge(&mut cur, &json!({"status": body["status"].clone()}));
                if kind == RESOURCE_CLAIMS {
                    if let Err(e) = validate::validate_claim_status(&old, &cur) {
                        return invalid(kind, &cur, e);
                    }
                }
                json_response(StatusCode::OK, &self.put(kind, cur))
            }
            (Method::DELETE, Some(n), None) => {
                let Some(cur) = self.get(kind, ns.as_deref().unwrap_or(""), n) else {
                    return not_found(kind, n);
                };
                if let Some(uid) = body["preconditions"]["uid"].as_str() {
                    if cur["metadata"]["uid"].as_str() != Some(uid) {
                        return status(409, "Conflict", &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", cur["metadata"]["uid"]));
                    }
                }
                // An object with finalizers is only marked for deletion; it goes when
                // its finalizers are removed (apiserver registry/generic/registry/store.go).
                if cur["metadata"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| !f.is_empty())
                {
                    let mut marked = cur.clone();
                    if marked["metadata"]["deletionTimestamp"].is_null() {
                        marked["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                        marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                        marked = self.put(kind, marked);
                    }
                    return json_response(StatusCode::OK, &marked);
                }
                match self.remove(kind, ns.as_deref().unwrap_or(""), n) {
                    Some(o) => json_response(StatusCode::OK, &o),
                    None => not_found(kind, n),
                }
            }
            _ => status(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            ),
        }
    }

    pub(super) fn get(&self, kind: Kind, namespace: &str, name: &str) -> Option<Value> {
        let st = self.state.lock().unwrap();
        st.objects
            .get(&(kind, ns_of(kind, namespace), name.to_string()))
            .cloned()
    }

    pub(super) fn bind(&self, ns: &str, name: &str, body: &Value) -> Response<Body> {
        let doomed = {
            let mut st = self.state.lock().unwrap();
            let i = st.delete_on_bind.iter().position(|n| n == name);
            i.map(|i| st.delete_on_bind.remove(i)).is_some()
        };
        if doomed {
            self.remove(PODS, ns, name);
        }
        // BindingREST.Create and ValidatePodBinding (pkg/registry/core/pod/storage,
        // pkg/apis/core/validation).
        if body["metadata"]["name"].as_str() != Some(name) {
            return status(
                400,
                "BadRequest",
                "name in URL does not match name in Binding object",
            );
        }
        let mut errs = Vec::new();
        if let Some(k) = body["target"]["kind"]
            .as_str()
            .filter(|k| !k.is_empty() && *k != "Node")
        {
            errs.push(format!(
                "target.kind: Unsupported value: {k:?}: supported values: \"Node\", \"<empty>\""
            ));
        }
        if body["target"]["name"].as_str().is_none_or(str::is_empty) {
            errs.push("target.name: Required value".to_string());
        }
        if !errs.is_empty() {
            let list = if errs.len() == 1 {
                errs[0].clone()
            } else {
                format!("[{}]", errs.join(", "))
            };
            return status(
                422,
                "Invalid",
                &format!("Binding {name:?} is invalid: {list}"),
            );
        }
        let Some(mut pod) = self.get(PODS, ns, name) else {
            return status(404, "NotFound", &format!("pods \"{name}\" not found"));
        };
        {
            let mut st = self.state.lock().unwrap();
            if std::mem::take(&mut st.conflict_next_bind) {
                return status(409, "Conflict", &format!("Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is being bound"));
            }
        }
        // The Binding's uid and resourceVersion, when set, are preconditions
        // (BindingREST.setPodNodeAndMetadata).
        if let Some(uid) = body["metadata"]["uid"].as_str().filter(|u| !u.is_empty()) {
            if pod["metadata"]["uid"].as_str() != Some(uid) {
                return status(409, "Conflict", &format!("Operation cannot be fulfilled on pods/binding \"{name}\": the UID does not match"));
            }
        }
        if let Some(rv) = body["metadata"]["resourceVersion"]
            .as_str()
            .filter(|v| !v.is_empty())
        {
            if pod["metadata"]["resourceVersion"].as_str() != Some(rv) {
                return status(409, "Conflict", &format!("Operation cannot be fulfilled on pods \"{name}\": the object has been modified; please apply your changes to the latest version and try again"));
            }
        }
        if let Some(node) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            return status(409, "Conflict", &format!("Operation cannot be fulfilled on pods/binding \"{name}\": pod {name} is already assigned to node \"{node}\""));
        }
        pod["spec"]["nodeName"] = body["target"]["name"].clone();
        merge(
            &mut pod,
            &json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}),
        );
        // ClearingNominatedNodeNameAfterBinding (beta, on since v1.35): the binding's
        // own write clears the nomination (pkg/registry/core/pod/storage/storage.go,
        // setPodNodeAndMetadata).
        if let Some(status) = pod["status"].as_object_mut() {
            status.remove("nominatedNodeName");
        }
        self.put(PODS, pod);
        json_response(
            StatusCode::CREATED,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}),
        )
    }
}

/// A request path taken apart: kind, namespace, name, subresource.
pub(super) type Route = (Kind, Option<String>, Option<String>, Option<String>);

/// `/api/v1/...` or `/apis/GROUP/VERSION/...` into its [`Route`].
pub(super) fn route(path: &str) -> Option<Route> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (gv, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("v1".to_string(), rest),
        ["apis", g, v, rest @ ..] => (format!("{g}/{v}"), rest),
        _ => return None,
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, r, more @ ..] if !r.is_empty() => (Some(ns.to_string()), {
            let mut v = vec![*r];
            v.extend_from_slice(more);
            v
        }),
        r => (None, r.to_vec()),
    };
    let plural = *rest.first()?;
    let kind = KINDS
        .iter()
        .copied()
        .find(|k| k.group_version == gv && k.plural == plural)?;
    Some((
        kind,
        ns,
        rest.get(1).map(|s| s.to_string()),
        rest.get(2).map(|s| s.to_string()),
    ))
}

pub(super) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
