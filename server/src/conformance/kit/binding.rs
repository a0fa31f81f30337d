//! Reserve through PostBind, Permit decisions, and QueueSort keys.

use super::*;

impl Kit {
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn binding_points(
        &mut self,
        c: &mut Conn,
        plugins: &[pb::PluginInfo],
        pod: &pb::Pod,
        cycle: u64,
        g: u64,
        nodes: &[pb::Node],
        feasible: &[u32],
    ) {
        let Some(node) = feasible
            .first()
            .and_then(|id| nodes.iter().find(|n| n.id == *id))
            .or(nodes.first())
        else {
            return;
        };
        let t = self.timeout;
        for p in plugins {
            let who = format!("plugin {} pod {}", p.name, pod.name);
            let has = |x: Ep| p.extension_points.contains(&(x as i32));
            if has(Ep::Permit) {
                let r = cycle_request(c, p, cycle, g, &node.name);
                let id = r.request_id;
                match c.permit.call(id, r, t).await {
                    Ok(r) => {
                        let code = r.status.as_ref().map(|s| s.code).unwrap_or(0);
                        let wait_ok = code != pb::Code::Wait as i32 || r.timeout_millis > 0;
                        self.checks.check("X1", valid_code(code) && wait_ok, || {
                            format!(
                                "{who}: Permit answered {} with timeout {} ms",
                                code_name(code),
                                r.timeout_millis
                            )
                        });
                        if code == pb::Code::Wait as i32 && wait_ok {
                            self.permit_decision(c, p, pod, r.timeout_millis).await;
                        }
                    }
                    Err(e) => self.checks.fail("X1", format!("{who}: Permit: {e}")),
                }
            }
            // In the scheduler's order: Reserve, PreBind, PostBind; Unreserve last (a
            // Reserve plugin must accept it whether or not the pod was bound).
            let points = [
                (Ep::Reserve, "Reserve"),
                (Ep::PreBind, "PreBind"),
                (Ep::PostBind, "PostBind"),
                (Ep::Reserve, "Unreserve"),
            ];
            for (point, name) in points {
                if !has(point) {
                    continue;
                }
                let r = cycle_request(c, p, cycle, g, &node.name);
                let id = r.request_id;
                let lane = match name {
                    "Reserve" => &mut c.reserve,
                    "PreBind" => &mut c.pre_bind,
                    "PostBind" => &mut c.post_bind,
                    _ => &mut c.unreserve,
                };
                match lane.call(id, r, t).await {
                    Ok(r) => {
                        let code = r.status.as_ref().map(|s| s.code).unwrap_or(0);
                        self.checks
                            .check("X1", valid_code(code) && r.request_id == id, || {
                                format!("{who}: {name} answered {}", code_name(code))
                            });
                    }
                    Err(e) => self.checks.fail("X1", format!("{who}: {name}: {e}")),
                }
            }
        }
    }

    /// X2: after a WAIT, a later decision on the Permit stream (request_id 0) names
    /// the waiting pod and the plugin that made it wait. None before the timeout is
    /// allowed (the timeout ends the wait); the kit waits for one at most
    /// [`PERMIT_DECISION_WAIT`].
    pub(super) async fn permit_decision(
        &mut self,
        c: &mut Conn,
        p: &pb::PluginInfo,
        pod: &pb::Pod,
        timeout_millis: u32,
    ) {
        let who = format!("plugin {} pod {}", p.name, pod.name);
        // A plugin may wait for something the kit never brings (a whole gang): after
        // two waits with no decision, only decisions already in are looked at.
        let wait = match self.permit_waits_left {
            0 => Duration::from_millis(1),
            _ => Duration::from_millis(u64::from(timeout_millis)).min(PERMIT_DECISION_WAIT),
        };
        let Ok(r) = c.permit.recv(0, wait).await else {
            self.permit_waits_left = self.permit_waits_left.saturating_sub(1);
            return;
        };
        match &r.decision {
            None => self.checks.fail(
                "X2",
                format!("{who}: a Permit message with request_id 0 and no decision"),
            ),
            Some(d) => {
                self.checks
                    .check("X2", d.pod_uid == pod.uid && d.plugin == p.name, || {
                        format!(
                            "{who}: a decision for pod {:?} by plugin {:?}, while pod {:?} waits on {:?}",
                            d.pod_uid, d.plugin, pod.uid, p.name
                        )
                    });
            }
        }
    }

    pub(super) async fn queue_keys(&mut self, c: &mut Conn) {
        let t = self.timeout;
        let plugins: Vec<pb::PluginInfo> =
            c.hs.plugins
                .iter()
                .filter(|p| has(p, Ep::QueueSort))
                .cloned()
                .collect();
        for p in plugins {
            for pod in self.fixture.probes.clone() {
                let mut keys = Vec::new();
                for _ in 0..2 {
                    let id = c.id();
                    let r = c
                        .queue_sort
                        .call(
                            id,
                            pb::QueueSortRequest {
                                request_id: id,
                                plugin: p.name.clone(),
                                pod: Some(pod.clone()),
                            },
                            t,
                        )
                        .await;
                    keys.push(r.map(|r| (r.sort_key, r.status.map(|s| s.code).unwrap_or(0))));
                }
                let who = format!("plugin {} pod {}", p.name, pod.name);
                match (&keys[0], &keys[1]) {
                    (Ok(a), Ok(b)) => {
                        self.checks.check("Q1", a.1 == 0, || {
                            format!("{who}: QueueSort answered {}", code_name(a.1))
                        });
                        self.checks.check("F2", a == b, || {
                            format!("{who}: QueueSort keys {:?} then {:?}", a.0, b.0)
                        });
                    }
                    (Err(e), _) | (_, Err(e)) => self.checks.fail("Q1", format!("{who}: {e}")),
                }
            }
        }
    }
}
