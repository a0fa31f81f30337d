//! Score and NormalizeScore, and the scores a Filter reply brings ahead.

use super::*;

impl Kit {
    pub(super) async fn score(
        &mut self,
        c: &mut Conn,
        p: &pb::PluginInfo,
        pod: &pb::Pod,
        cycle: u64,
        g: u64,
        nodes: &[u32],
    ) -> Result<(i32, Vec<i64>), String> {
        let t = self.timeout;
        let who = format!("plugin {} pod {}", p.name, pod.name);
        let pre = has(p, Ep::PreScore);
        // Score with `normalize` twice (F2), then raw (for NormalizeScore), each after
        // its PreScore as the scheduler sends them.
        let mut results = Vec::new();
        for normalize in [true, true, false] {
            if pre {
                let id = c.id();
                let pr = pb::PreScoreRequest {
                    request_id: id,
                    plugin: p.name.clone(),
                    cycle,
                    generation: g,
                    nodes: nodes.to_vec(),
                    traceparent: String::new(),
                };
                let r = c.pre_score.call(id, pr, t).await?;
                let code = r.status.as_ref().map(|s| s.code).unwrap_or(0);
                self.checks
                    .check("SC1", valid_code(code) && r.generation == g, || {
                        format!(
                            "{who}: PreScore answered code {} at generation {}",
                            code_name(code),
                            r.generation
                        )
                    });
            }
            let id = c.id();
            let req = pb::ScoreRequest {
                request_id: id,
                plugin: p.name.clone(),
                cycle,
                generation: g,
                nodes: nodes.to_vec(),
                normalize,
                after_pre_score: pre,
                traceparent: String::new(),
            };
            results.push(c.score.call(id, req, t).await?);
        }
        let first = &results[0];
        let code = first.status.as_ref().map(|s| s.code).unwrap_or(0);
        let skipped = code == pb::Code::Skip as i32;
        let ok_code = code == pb::Code::Success as i32 || skipped;
        self.checks
            .check("SC1", ok_code && first.generation == g, || {
                format!(
                    "{who}: Score answered {} at generation {} (sent {g})",
                    code_name(code),
                    first.generation
                )
            });
        if ok_code && !skipped {
            self.checks
                .check("SC1", first.scores.len() == nodes.len(), || {
                    format!(
                        "{who}: {} scores for {} nodes",
                        first.scores.len(),
                        nodes.len()
                    )
                });
            let out: Vec<i64> = first
                .scores
                .iter()
                .copied()
                .filter(|s| !(0..=100).contains(s))
                .collect();
            self.checks.check("SC1", out.is_empty(), || {
                format!("{who}: normalized scores out of 0..100: {out:?}")
            });
        }
        let second = &results[1];
        self.checks.check(
            "F2",
            (second.status.clone(), &second.scores) == (first.status.clone(), &first.scores),
            || {
                format!(
                    "{who}: Score answered {:?}, then {:?}",
                    first.scores, second.scores
                )
            },
        );
        let raw = &results[2];
        if ok_code && !skipped {
            if p.normalize_score {
                let id = c.id();
                let nreq = pb::NormalizeScoreRequest {
                    request_id: id,
                    plugin: p.name.clone(),
                    cycle,
                    generation: g,
                    nodes: nodes.to_vec(),
                    scores: raw.scores.clone(),
                    traceparent: String::new(),
                };
                let n = c.normalize.call(id, nreq, t).await?;
                let got = if raw.normalized {
                    raw.scores.clone()
                } else {
                    n.scores.clone()
                };
                self.checks.check("SC2", got == first.scores, || {
                    format!(
                        "{who}: Score then NormalizeScore gave {got:?}, Score with normalize {:?}",
                        first.scores
                    )
                });
            } else {
                let out: Vec<i64> = raw
                    .scores
                    .iter()
                    .copied()
                    .filter(|s| !(0..=100).contains(s))
                    .collect();
                self.checks.check("SC1", out.is_empty(), || {
                    format!("{who}: raw scores out of 0..100 without NormalizeScore: {out:?}")
                });
            }
        }
        Ok((code, first.scores.clone()))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn score_ahead(
        &mut self,
        c: &mut Conn,
        p: &pb::PluginInfo,
        pod: &pb::Pod,
        cycle: u64,
        g: u64,
        nodes: &[u32],
        passing: &[u32],
        score: &(i32, Vec<i64>),
    ) -> Result<(), String> {
        let mut req = c.filter_request(&p.name, cycle, g, nodes);
        req.score_first = passing.len() as u32;
        req.pre_score = has(p, Ep::PreScore);
        let r = c.filter(req).await?;
        let Some(ahead) = r.score else { return Ok(()) };
        let code = ahead.status.as_ref().map(|s| s.code).unwrap_or(0);
        let who = format!("plugin {} pod {}", p.name, pod.name);
        if code == pb::Code::Success as i32 {
            self.checks
                .check("SC3", ahead.scores == score.1 && ahead.normalized, || {
                    format!(
                        "{who}: scored ahead {:?} (normalized {}), Score gave {:?}",
                        ahead.scores, ahead.normalized, score.1
                    )
                });
        } else if code == pb::Code::Skip as i32 {
            self.checks
                .check("SC3", score.0 == pb::Code::Skip as i32, || {
                    format!("{who}: scoring ahead skipped, Score did not")
                });
        }
        Ok(())
    }
}
