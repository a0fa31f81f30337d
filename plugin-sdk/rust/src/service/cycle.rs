//! The calls of a cycle around Filter and Score: PreFilter, PostFilter, Reserve,
//! Unreserve, PreBind, Bind, PostBind, and Permit, which registers a pod a plugin
//! answers Wait for with the waiting pods its handle decides about.

use std::collections::HashMap;

use super::{lock, read, write, Shared};
use crate::pb;
use crate::status::{Code, Status};
use crate::waiting::Handle;

impl Shared {
    pub(super) async fn pre_filter(&self, req: pb::PreFilterRequest) -> pb::PreFilterResponse {
        let mut out = pb::PreFilterResponse {
            request_id: req.request_id,
            generation: req.generation,
            ..Default::default()
        };
        let r = async {
            let (idx, plugin) = self.plugin(&req.plugin)?;
            let entry = self
                .cycle(
                    req.cycle,
                    req.generation,
                    plugin.answers_at_named_generation(),
                )
                .await?;
            // A Filter sent right behind this call waits for its outcome.
            let record = |s: &Status| {
                lock(&entry.pre_filters).insert(idx, s.clone());
                entry.pre_filter_done.notify_waiters();
            };
            let r = (|| {
                let p = plugin.as_pre_filter().ok_or_else(|| {
                    Status::error(format!("plugin {:?} has no PreFilter", req.plugin))
                })?;
                let replica = self.replica_at(&entry, plugin.answers_at_named_generation())?;
                let cycle = entry.view(&replica);
                Ok::<_, Status>(p.pre_filter(&cycle, &mut write(&entry.states[idx])))
            })();
            record(match &r {
                Ok(res) => &res.status,
                Err(s) => s,
            });
            r
        }
        .await;
        match r {
            Ok(res) => {
                out.status = Some(res.status.to_pb());
                if let Some(names) = res.node_names {
                    out.has_node_names = true;
                    out.node_names = names;
                }
            }
            Err(s) => out.status = Some(s.to_pb()),
        }
        out
    }

    pub(super) async fn post_filter(&self, req: pb::PostFilterRequest) -> pb::PostFilterResponse {
        let mut out = pb::PostFilterResponse {
            request_id: req.request_id,
            generation: req.generation,
            ..Default::default()
        };
        let r = async {
            let (idx, plugin) = self.plugin(&req.plugin)?;
            let entry = self
                .cycle(
                    req.cycle,
                    req.generation,
                    plugin.answers_at_named_generation(),
                )
                .await?;
            let p = plugin.as_post_filter().ok_or_else(|| {
                Status::error(format!("plugin {:?} has no PostFilter", req.plugin))
            })?;
            let statuses: HashMap<String, Status> = req
                .node_statuses
                .iter()
                .map(|(k, v)| (k.clone(), Status::from_pb(v)))
                .collect();
            let replica = self.replica_at(&entry, plugin.answers_at_named_generation())?;
            let cycle = entry.view(&replica);
            let r = p.post_filter(&cycle, &mut write(&entry.states[idx]), &statuses);
            Ok::<_, Status>(r)
        }
        .await;
        match r {
            Ok((s, nominate)) => {
                out.status = Some(s.to_pb());
                out.nominated_node_name = nominate.unwrap_or_default();
            }
            Err(s) => out.status = Some(s.to_pb()),
        }
        out
    }

    /// Reserve, Unreserve, PreBind, Bind, PostBind: a cycle, a node, a status.
    pub(super) async fn cycle_call(
        &self,
        req: pb::CycleRequest,
        point: Point,
    ) -> pb::StatusResponse {
        let r = async {
            let (idx, plugin) = self.plugin(&req.plugin)?;
            let entry = self
                .cycle(
                    req.cycle,
                    req.generation,
                    plugin.answers_at_named_generation(),
                )
                .await?;
            let replica = read(&self.replica);
            let cycle = entry.view(&replica);
            let node = req.node_name.as_str();
            let missing = || Status::error(format!("plugin {:?} has no {point:?}", req.plugin));
            let state = &entry.states[idx];
            Ok::<_, Status>(match point {
                Point::Reserve => {
                    let r = plugin
                        .as_reserve()
                        .ok_or_else(missing)
                        .map(|p| p.reserve(&cycle, &mut write(state), node));
                    // A Permit sent right behind this call waits for its outcome.
                    lock(&entry.reserves).insert(
                        idx,
                        match &r {
                            Ok(s) | Err(s) => s.clone(),
                        },
                    );
                    entry.reserve_done.notify_waiters();
                    r?
                }
                Point::Unreserve => {
                    plugin.as_reserve().ok_or_else(missing)?.unreserve(
                        &cycle,
                        &mut write(state),
                        node,
                    );
                    Status::success()
                }
                Point::PreBind => {
                    plugin
                        .as_pre_bind()
                        .ok_or_else(missing)?
                        .pre_bind(&cycle, &read(state), node)
                }
                Point::Bind => {
                    plugin
                        .as_bind()
                        .ok_or_else(missing)?
                        .bind(&cycle, &read(state), node)
                }
                Point::PostBind => {
                    plugin.as_post_bind().ok_or_else(missing)?.post_bind(
                        &cycle,
                        &read(state),
                        node,
                    );
                    Status::success()
                }
            })
        }
        .await;
        let s = match r {
            Ok(s) | Err(s) => s,
        };
        Self::status_reply(req.request_id, req.generation, s)
    }

    pub(super) async fn permit(&self, req: pb::CycleRequest) -> pb::PermitResponse {
        let mut out = pb::PermitResponse {
            request_id: req.request_id,
            generation: req.generation,
            ..Default::default()
        };
        let r = async {
            let (idx, plugin) = self.plugin(&req.plugin)?;
            let entry = self
                .cycle(
                    req.cycle,
                    req.generation,
                    plugin.answers_at_named_generation(),
                )
                .await?;
            let p = plugin
                .as_permit()
                .ok_or_else(|| Status::error(format!("plugin {:?} has no Permit", req.plugin)))?;
            if req.after_reserve {
                let s = self
                    .outcome(
                        &entry,
                        &entry.reserves,
                        &entry.reserve_done,
                        idx,
                        "Permit named a Reserve",
                    )
                    .await?;
                if !s.is_success() {
                    return Err(Status::error(format!(
                        "Permit sent behind a Reserve that returned {:?}",
                        s.code
                    )));
                }
            }
            let handle = Handle::new(self.waiting.clone());
            // The pod is registered as waiting only after the plugin answers Wait (below):
            // `Handle::waiting_pods` inside `permit` lists its siblings, not itself.
            let (s, timeout) = {
                let replica = read(&self.replica);
                let cycle = entry.view(&replica);
                p.permit(
                    &cycle,
                    &mut write(&entry.states[idx]),
                    &req.node_name,
                    &handle,
                )
            };
            if s.code == Code::Wait {
                self.waiting.wait(&entry.pod, &req.plugin);
            }
            Ok::<_, Status>((s, timeout))
        }
        .await;
        match r {
            Ok((s, timeout)) => {
                out.status = Some(s.to_pb());
                out.timeout_millis = timeout.as_millis().min(u32::MAX as u128) as u32;
            }
            Err(s) => out.status = Some(s.to_pb()),
        }
        out
    }
}

/// The extension points of [`Shared::cycle_call`].
#[derive(Clone, Copy, Debug)]
pub(super) enum Point {
    Reserve,
    Unreserve,
    PreBind,
    Bind,
    PostBind,
}

impl Point {
    pub(super) fn name(self) -> &'static str {
        match self {
            Point::Reserve => "Reserve",
            Point::Unreserve => "Unreserve",
            Point::PreBind => "PreBind",
            Point::Bind => "Bind",
            Point::PostBind => "PostBind",
        }
    }
}
