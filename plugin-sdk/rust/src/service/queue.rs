//! The queue's calls, outside any cycle: PreEnqueue (may the pod enter the active
//! queue) and QueueSort (the pod's sort key, computed once at enqueue).

use super::Shared;
use crate::pb;
use crate::status::Status;

impl Shared {
    pub(super) fn pre_enqueue(&self, req: pb::PreEnqueueRequest) -> pb::StatusResponse {
        let s = match self.plugin(&req.plugin) {
            Ok((_, p)) => match (p.as_pre_enqueue(), &req.pod) {
                (Some(pe), Some(pod)) => pe.pre_enqueue(pod),
                (None, _) => Status::error(format!("plugin {:?} has no PreEnqueue", req.plugin)),
                (_, None) => Status::error("PreEnqueue request without a pod"),
            },
            Err(s) => s,
        };
        Shared::status_reply(req.request_id, 0, s)
    }

    pub(super) fn queue_sort(&self, req: pb::QueueSortRequest) -> pb::QueueSortResponse {
        let mut out = pb::QueueSortResponse {
            request_id: req.request_id,
            ..Default::default()
        };
        match self.plugin(&req.plugin) {
            Ok((_, p)) => match (p.as_queue_sort(), &req.pod) {
                (Some(q), Some(pod)) => {
                    out.sort_key = q.sort_key(pod);
                    out.status = Some(Status::success().to_pb());
                }
                _ => {
                    out.status = Some(
                        Status::error(format!(
                            "plugin {:?} has no QueueSort, or the request has no pod",
                            req.plugin
                        ))
                        .to_pb(),
                    )
                }
            },
            Err(s) => out.status = Some(s.to_pb()),
        }
        out
    }
}
