//! Snapshots and deltas: a full snapshot, changes applied, calls that wait for their generation, concurrent cycles.

use super::filter::FilterAnswer;
use super::*;

impl Kit {
    pub(super) async fn full_snapshot(&mut self, c: &mut Conn, f: &Fixture) -> Result<(), String> {
        let g = c.send(pb::replicate_request::Kind::Delta(f.full_snapshot()), true)?;
        let r = c.acked(g).await;
        match &r {
            Ok(()) => self.checks.ok("R1"),
            Err(e) => self.checks.fail("R1", e.clone()),
        }
        r
    }

    /// Sends the change's deltas: as one message with `more` when replicate-batch was
    /// negotiated (R5), else one by one.
    pub(super) async fn apply_change(
        &mut self,
        c: &mut Conn,
        deltas: &[pb::SnapshotDelta],
    ) -> Result<(), String> {
        let batch = c.negotiated(switchyard_proto::CAPABILITY_REPLICATE_BATCH);
        let mut msgs: Vec<pb::ReplicateRequest> = deltas
            .iter()
            .map(|d| {
                c.generation += 1;
                pb::ReplicateRequest {
                    generation: c.generation,
                    kind: Some(pb::replicate_request::Kind::Delta(d.clone())),
                    ack: false,
                    more: vec![],
                }
            })
            .collect();
        let last = c.generation;
        if batch && msgs.len() > 1 {
            let rest = msgs.split_off(1);
            msgs[0].more = rest;
            if let Some(m) = msgs[0].more.last_mut() {
                m.ack = true;
            }
            self.checks.ok("R5");
        } else if let Some(m) = msgs.last_mut() {
            m.ack = true;
        }
        for m in msgs {
            c.replicate
                .send(m)
                .map_err(|_| "the Replicate stream is closed".to_string())?;
        }
        c.acked(last).await.inspect_err(|e| {
            if batch {
                self.checks.fail("R5", e.clone());
            }
        })
    }

    /// F3: the Filter goes out before the CycleStart it names; its answer must come
    /// after, at that generation, equal to the baseline.
    pub(super) async fn waits_for_generation(
        &mut self,
        c: &mut Conn,
        f: &Fixture,
        baseline: &[PodAnswers],
    ) {
        let nodes = capped(f, c);
        for p in Self::filter_plugins(c) {
            if has(&p, Ep::PreFilter) {
                // Its Filter needs the PreFilter's state: covered by the other plugins.
                continue;
            }
            let pod = &f.probes[0];
            let cycle = c.next_cycle;
            let g = c.generation + 1;
            let req = c.filter_request(&p.name, cycle, g, &nodes);
            let id = req.request_id;
            if let Err(e) = c.filter.send(req) {
                self.checks.fail("F3", e);
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            if let Err(e) = c.start_cycle(pod) {
                self.checks.fail("F3", e);
                return;
            }
            match c.filter.recv(id, self.timeout).await {
                Ok(r) => {
                    let a = FilterAnswer::of(&r);
                    let want = baseline.first().and_then(|b| b.filter.get(&p.name));
                    self.checks.check("F3", r.generation == g && Some(&a) == want, || {
                        format!(
                            "plugin {}: a call sent before generation {g} was applied got {a:?} at generation {}, {want:?} expected",
                            p.name, r.generation
                        )
                    });
                }
                Err(e) => self.checks.fail("F3", format!("plugin {}: {e}", p.name)),
            }
            let _ = c.end_cycle(cycle, false);
        }
    }

    /// F6: two cycles started back to back, both Filters in flight at once.
    pub(super) async fn concurrent_cycles(
        &mut self,
        c: &mut Conn,
        f: &Fixture,
        baseline: &[PodAnswers],
    ) {
        if f.probes.len() < 2 {
            return;
        }
        let nodes = capped(f, c);
        for p in Self::filter_plugins(c) {
            if has(&p, Ep::PreFilter) {
                continue;
            }
            let started: Result<Vec<(u64, u64)>, String> =
                f.probes[..2].iter().map(|pod| c.start_cycle(pod)).collect();
            let Ok(started) = started else { return };
            let reqs: Vec<pb::FilterRequest> = started
                .iter()
                .map(|&(cy, g)| c.filter_request(&p.name, cy, g, &nodes))
                .collect();
            for r in &reqs {
                if c.filter.send(r.clone()).is_err() {
                    return;
                }
            }
            for (i, r) in reqs.iter().enumerate().rev() {
                match c.filter.recv(r.request_id, self.timeout).await {
                    Ok(reply) => {
                        let a = FilterAnswer::of(&reply);
                        let want = baseline.get(i).and_then(|b| b.filter.get(&p.name));
                        self.checks.check("F6", Some(&a) == want, || {
                            format!("plugin {} pod {}: {a:?} with another cycle in flight, {want:?} alone", p.name, f.probes[i].name)
                        });
                    }
                    Err(e) => self.checks.fail("F6", format!("plugin {}: {e}", p.name)),
                }
            }
            for (cy, _) in started {
                let _ = c.end_cycle(cy, false);
            }
        }
    }
}
