//! List and watch as a v1.36 API server serves them: the list options validated
//! (`meta/internalversion/validation`), WatchList defaulting (`SetListOptionsDefaults`:
//! a watch from "" or "0" streams the current objects first), consistent lists at
//! a resourceVersion with `limit`/`continue` pages (`410 Expired` once that version
//! is compacted), label and field selectors, and watches with BOOKMARK events, the
//! `k8s.io/initial-events-end` marker of a streaming list, and `410 Gone` for a
//! version no longer in the history (`storage/cacher`, `storage/etcd3/store.go`).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::time::Duration;

use super::handler::{json_response, status};
use super::selectors::Selection;
use super::*;

/// The list options of a request, as `metav1.ListOptions` decodes them.
#[derive(Clone, Debug, Default)]
pub(super) struct ListOptions {
    pub watch: bool,
    resource_version: String,
    rv_match: String,
    send_initial_events: Option<bool>,
    continue_token: String,
    limit: usize,
    allow_bookmarks: bool,
    timeout_seconds: u64,
}

/// Go's `strconv.ParseBool`, which the query decoder uses.
fn flag(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

impl ListOptions {
    pub(super) fn from_query(q: &HashMap<String, String>) -> Result<ListOptions, String> {
        let get = |k: &str| q.get(k).cloned().unwrap_or_default();
        let limit = match q.get("limit").filter(|l| !l.is_empty()) {
            Some(l) => l
                .parse::<i64>()
                .map_err(|_| format!("limit: Invalid value: {l:?}: must be an integer"))?
                .max(0) as usize,
            None => 0,
        };
        let mut o = ListOptions {
            watch: q.get("watch").is_some_and(|w| flag(w)),
            resource_version: get("resourceVersion"),
            rv_match: get("resourceVersionMatch"),
            send_initial_events: q.get("sendInitialEvents").map(|v| flag(v)),
            continue_token: get("continue"),
            limit,
            allow_bookmarks: q.get("allowWatchBookmarks").is_some_and(|v| flag(v)),
            timeout_seconds: q
                .get("timeoutSeconds")
                .and_then(|t| t.parse().ok())
                .unwrap_or(300),
        };
        // WatchList (on by default in the servers this double models): a legacy
        // watch from "" or "0" becomes a streaming one (SetListOptionsDefaults).
        if o.watch
            && o.send_initial_events.is_none()
            && o.rv_match.is_empty()
            && (o.resource_version.is_empty() || o.resource_version == "0")
        {
            o.send_initial_events = Some(true);
            o.rv_match = "NotOlderThan".into();
        }
        Ok(o)
    }

    /// `ValidateListOptions`: the field errors a 422 lists.
    pub(super) fn validate(&self) -> Vec<String> {
        let m = self.rv_match.as_str();
        let forbidden = |d: &str| format!("resourceVersionMatch: Forbidden: {d}");
        let mut errs = Vec::new();
        if self.watch {
            if self.send_initial_events.is_some() && m != "NotOlderThan" {
                errs.push(forbidden(
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if !m.is_empty() {
                if self.send_initial_events.is_none() {
                    errs.push(forbidden(
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    ));
                }
                if m != "NotOlderThan" {
                    errs.push(format!("resourceVersionMatch: Unsupported value: {m:?}: supported values: \"NotOlderThan\""));
                }
                if !self.continue_token.is_empty() {
                    errs.push(forbidden(
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
            }
            return errs;
        }
        if !m.is_empty() {
            if self.resource_version.is_empty() {
                errs.push(forbidden(
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if !self.continue_token.is_empty() {
                errs.push(forbidden(
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if m != "Exact" && m != "NotOlderThan" {
                errs.push(format!("resourceVersionMatch: Unsupported value: {m:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""));
            }
            if m == "Exact" && self.resource_version == "0" {
                errs.push(forbidden(
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if self.send_initial_events.is_some() {
            errs.push(
                "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list".into(),
            );
        }
        errs
    }
}

/// 422 for list options the server refuses.
pub(super) fn invalid_options(errs: &[String]) -> Response<Body> {
    let list = if errs.len() == 1 {
        errs[0].clone()
    } else {
        format!("[{}]", errs.join(", "))
    };
    status(
        422,
        "Invalid",
        &format!("ListOptions.meta.k8s.io \"\" is invalid: {list}"),
    )
}

const CONTINUE_TOO_OLD: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// A continue token: opaque to clients, like the server's (which is base64 JSON).
fn encode_continue(rv: u64, key: &(String, String)) -> String {
    json!({"v": "meta.k8s.io/v1", "rv": rv, "ns": key.0, "name": key.1})
        .to_string()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_continue(token: &str) -> Option<(u64, (String, String))> {
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect();
    let v: Value = serde_json::from_slice(&bytes?).ok()?;
    if v["v"] != "meta.k8s.io/v1" {
        return None;
    }
    Some((
        v["rv"].as_u64()?,
        (
            v["ns"].as_str()?.to_string(),
            v["name"].as_str()?.to_string(),
        ),
    ))
}

fn key_of(kind: Kind, o: &Value) -> (String, String) {
    (
        ns_of(kind, o["metadata"]["namespace"].as_str().unwrap_or("")),
        o["metadata"]["name"].as_str().unwrap_or("").to_string(),
    )
}

/// Whether every change after `rv` is still in the history.
fn history_from(st: &State, rv: u64) -> bool {
    rv + 1 >= st.compacted_below
}

/// The objects of `kind` as they were at `rv`: today's, with the later changes
/// undone (the double keeps every change since the last compaction).
fn objects_at(st: &State, kind: Kind, rv: u64) -> BTreeMap<(String, String), &Value> {
    let mut view: BTreeMap<(String, String), &Value> = st
        .objects
        .range((kind, String::new(), String::new())..)
        .take_while(|((k, _, _), _)| *k == kind)
        .map(|((_, ns, n), o)| ((ns.clone(), n.clone()), o))
        .collect();
    for c in st.history.iter().rev().take_while(|c| c.rv > rv) {
        if c.kind != kind {
            continue;
        }
        let key = key_of(kind, &c.object);
        match &c.prev {
            None => view.remove(&key),
            Some(prev) => view.insert(key, prev),
        };
    }
    view
}

/// A list item as the server encodes it: the list carries the type, items do not.
fn list_item(o: &Value) -> Value {
    let mut o = o.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
    }
    o
}

fn too_large(rv: u64, current: u64) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": format!("Too large resource version: {rv}, current: {current}"),
           "reason": "Timeout", "code": 504,
           "details": {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                       "retryAfterSeconds": 1}})
}

impl Shared {
    pub(super) fn list_response(
        &self,
        kind: Kind,
        sel: &Selection,
        o: &ListOptions,
    ) -> Response<Body> {
        let st = self.state.lock().unwrap();
        let current = st.rv;
        let (at, after) = if !o.continue_token.is_empty() {
            let Some((rv, key)) = decode_continue(&o.continue_token) else {
                return status(
                    400,
                    "BadRequest",
                    "continue key is not valid: the continue token could not be decoded",
                );
            };
            if !history_from(&st, rv) {
                return status(410, "Expired", CONTINUE_TOO_OLD);
            }
            (rv, Some(key))
        } else if o.resource_version.is_empty() || o.resource_version == "0" {
            (current, None)
        } else {
            let Ok(rv) = o.resource_version.parse::<u64>() else {
                return status(
                    400,
                    "BadRequest",
                    &format!("invalid resource version: {:?}", o.resource_version),
                );
            };
            if rv > current {
                return json_response(StatusCode::GATEWAY_TIMEOUT, &too_large(rv, current));
            }
            if o.rv_match == "Exact" {
                if !history_from(&st, rv) {
                    return status(
                        410,
                        "Expired",
                        "The resourceVersion for the provided list is too old.",
                    );
                }
                (rv, None)
            } else {
                (current, None)
            }
        };
        let view = objects_at(&st, kind, at);
        let range = match &after {
            Some(k) => view.range((Bound::Excluded(k.clone()), Bound::Unbounded)),
            None => view.range::<(String, String), _>(..),
        };
        let mut items = Vec::new();
        let mut last = None;
        let mut remaining = 0usize;
        for (k, v) in range {
            if o.limit > 0 && items.len() >= o.limit {
                remaining += 1;
                continue;
            }
            last = Some(k);
            if sel.matches(v) {
                items.push(list_item(v));
            }
        }
        let mut meta = json!({"resourceVersion": at.to_string()});
        if remaining > 0 {
            if let Some(k) = last {
                meta["continue"] = json!(encode_continue(at, k));
            }
            if sel.is_everything() {
                meta["remainingItemCount"] = json!(remaining);
            }
        }
        json_response(
            StatusCode::OK,
            &json!({"kind": format!("{}List", kind.kind), "apiVersion": kind.group_version,
                    "metadata": meta, "items": items}),
        )
    }

    /// The event a watch with this selection sees for a change, as the watch cache
    /// sends it (`cacheWatcher.convertToWatchEvent`): an object entering the
    /// selection is ADDED, staying MODIFIED, leaving DELETED (its previous state at
    /// the change's resourceVersion); a deletion only if it was selected.
    pub(super) fn event_for(c: &Change, sel: &Selection) -> Option<(&'static str, Value)> {
        let old = c.prev.as_ref().is_some_and(|p| sel.matches(p));
        if c.kind_type == "DELETED" {
            return old.then(|| ("DELETED", c.object.clone()));
        }
        match (sel.matches(&c.object), old) {
            (true, false) => Some(("ADDED", c.object.clone())),
            (true, true) => Some(("MODIFIED", c.object.clone())),
            (false, true) => {
                let mut gone = c.prev.clone().unwrap_or(Value::Null);
                gone["metadata"]["resourceVersion"] = json!(c.rv.to_string());
                Some(("DELETED", gone))
            }
            (false, false) => None,
        }
    }

    pub(super) fn watch(&self, kind: Kind, sel: Selection, o: ListOptions) -> Response<Body> {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1024);
        let line = |t: &str, o: &Value| {
            Ok(Frame::data(Bytes::from(format!(
                "{}\n",
                json!({"type": t, "object": o})
            ))))
        };
        let bookmark = move |rv: u64, end: bool| {
            let mut meta = json!({"resourceVersion": rv.to_string()});
            if end {
                meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            json!({"kind": kind.kind, "apiVersion": kind.group_version, "metadata": meta})
        };
        // Subscribed under the lock that takes the snapshot: no change falls between.
        let (mut changes, initial, backlog, start, error, every) = {
            let st = self.state.lock().unwrap();
            let changes = self.changes.subscribe();
            let now = st.rv;
            let mut error = None;
            let mut initial = Vec::new();
            let mut backlog = Vec::new();
            let from = o.resource_version.parse::<u64>().ok();
            if o.send_initial_events == Some(true) {
                initial = objects_at(&st, kind, now)
                    .into_values()
                    .filter(|v| sel.matches(v))
                    .cloned()
                    .collect();
            } else if let Some(from) = from.filter(|f| *f > 0) {
                if from > now {
                    error = Some(too_large(from, now));
                } else if !history_from(&st, from) {
                    error = Some(json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Failure", "reason": "Expired", "code": 410,
                        "message": format!("too old resource version: {from} ({})", st.compacted_below.saturating_sub(1))}));
                } else {
                    backlog = st
                        .history
                        .iter()
                        .filter(|c| c.kind == kind && c.rv > from)
                        .cloned()
                        .collect();
                }
            }
            (changes, initial, backlog, now, error, st.bookmark_every)
        };
        let mut dropped = self.drop_watches.subscribe();
        let streaming = o.send_initial_events == Some(true);
        tokio::spawn(async move {
            if let Some(e) = error {
                let _ = tx.send(line("ERROR", &e)).await;
                return;
            }
            for v in initial {
                if tx.send(line("ADDED", &v)).await.is_err() {
                    return;
                }
            }
            if streaming && o.allow_bookmarks {
                let _ = tx.send(line("BOOKMARK", &bookmark(start, true))).await;
            }
            for c in backlog {
                if let Some((t, v)) = Self::event_for(&c, &sel) {
                    if tx.send(line(t, &v)).await.is_err() {
                        return;
                    }
                }
            }
            // Changes arrive in resourceVersion order; a bookmark names the newest
            // seen of any kind, as the watch cache's progress does.
            let mut last = start;
            let deadline = tokio::time::sleep(Duration::from_secs(o.timeout_seconds));
            tokio::pin!(deadline);
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                tokio::select! {
                    _ = &mut deadline => return,
                    _ = dropped.recv() => return,
                    _ = tick.tick(), if o.allow_bookmarks => {
                        if tx.send(line("BOOKMARK", &bookmark(last, false))).await.is_err() {
                            return;
                        }
                    }
                    c = changes.recv() => match c {
                        Ok(c) if c.rv > last => {
                            last = c.rv;
                            if c.kind != kind {
                                continue;
                            }
                            let Some((t, v)) = Self::event_for(&c, &sel) else {
                                continue;
                            };
                            if tx.send(line(t, &v)).await.is_err() {
                                return;
                            }
                        }
                        Ok(_) => {}
                        Err(_) => return,
                    },
                }
            }
        });
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(BodyExt::boxed(StreamBody::new(
                tokio_stream::wrappers::ReceiverStream::new(rx),
            )))
            .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(q: &[(&str, &str)]) -> ListOptions {
        let q = q
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ListOptions::from_query(&q).expect("options")
    }

    #[test]
    fn list_options_are_validated_as_the_server_validates_them() {
        assert!(opts(&[("watch", "true")]).validate().is_empty());
        assert!(opts(&[("watch", "1"), ("resourceVersion", "7")])
            .validate()
            .is_empty());
        assert_eq!(
            opts(&[("watch", "true"), ("resourceVersion", "7"), ("sendInitialEvents", "true")])
                .validate(),
            ["resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"]
        );
        assert_eq!(
            opts(&[
                ("watch", "true"),
                ("resourceVersion", "7"),
                ("resourceVersionMatch", "Exact")
            ])
            .validate()
            .len(),
            2
        );
        assert_eq!(
            opts(&[("resourceVersionMatch", "NotOlderThan")]).validate(),
            ["resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"]
        );
        assert_eq!(
            opts(&[("resourceVersion", "0"), ("resourceVersionMatch", "Exact")]).validate(),
            ["resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""]
        );
        assert_eq!(
            opts(&[("sendInitialEvents", "false")]).validate(),
            ["sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"]
        );
    }

    #[test]
    fn continue_tokens_round_trip_and_refuse_garbage() {
        let key = ("default".to_string(), "p-1".to_string());
        assert_eq!(decode_continue(&encode_continue(42, &key)), Some((42, key)));
        assert_eq!(decode_continue("zz"), None);
        assert_eq!(decode_continue("abc"), None);
    }
}
