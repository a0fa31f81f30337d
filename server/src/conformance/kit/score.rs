//! Score and NormalizeScore, and the scores a Filter reply brings ahead.

use super::*;

impl Kit {
    pub(super) async fn score(
        &mut self,
        c: &mut Conn,
        p: &pb::PluginInfo,
        pod: &pb::Pod,
        (cycle, g): (u64, u64),
        nodes: &[u32],
        replica: &[pb::Node],
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
                let pr = pre_score_request(id, p, (cycle, g), nodes.to_vec());
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
        if pre && !p.score_node_label.is_empty() {
            let labels: Vec<Option<&str>> = nodes
                .iter()
                .map(|&id| {
                    let n = replica.iter().find(|n| n.id == id)?;
                    n.labels.get(&p.score_node_label).map(String::as_str)
                })
                .collect();
            self.label_scores(c, p, &who, (cycle, g), &labels, code, &first.scores)
                .await?;
        }
        Ok((code, first.scores.clone()))
    }

    /// SC4: the PreScore a scheduler that knows `score_node_label` sends (no nodes),
    /// and the Score of nodes whose label values are `labels` (`scores`, answered
    /// with `code`) against its table.
    #[allow(clippy::too_many_arguments)]
    async fn label_scores(
        &mut self,
        c: &mut Conn,
        p: &pb::PluginInfo,
        who: &str,
        (cycle, g): (u64, u64),
        labels: &[Option<&str>],
        code: i32,
        scores: &[i64],
    ) -> Result<(), String> {
        let id = c.id();
        let pr = pre_score_request(id, p, (cycle, g), Vec::new());
        let r = c.pre_score.call(id, pr, self.timeout).await?;
        let got = r.status.as_ref().map(|s| s.code).unwrap_or(0);
        if got != pb::Code::Success as i32 {
            self.checks.check("SC4", got == code, || {
                format!(
                    "{who}: PreScore without nodes answered {}, Score {}",
                    code_name(got),
                    code_name(code)
                )
            });
            return Ok(());
        }
        let table = r.label_scores.unwrap_or_default();
        let unique: std::collections::HashSet<&String> = table.values.iter().collect();
        let well_formed =
            table.values.len() == table.scores.len() && unique.len() == table.values.len();
        self.checks.check("SC4", well_formed, || {
            format!(
                "{who}: label_scores has {} values ({} distinct) and {} scores",
                table.values.len(),
                unique.len(),
                table.scores.len()
            )
        });
        if !well_formed || code != pb::Code::Success as i32 {
            return Ok(());
        }
        let by_value: HashMap<&str, i64> = table
            .values
            .iter()
            .map(String::as_str)
            .zip(table.scores.iter().copied())
            .collect();
        let mut want: Vec<i64> = labels
            .iter()
            .map(|v| v.and_then(|v| by_value.get(v)).copied().unwrap_or(0))
            .collect();
        if p.normalize_score {
            let kind = pb::ScoreNormalization::try_from(p.score_normalization)
                .unwrap_or(pb::ScoreNormalization::Custom);
            switchyard_proto::normalize_scores(kind, &mut want);
        }
        self.checks.check("SC4", want == scores, || {
            format!("{who}: Score gave {scores:?}; its label_scores give {want:?}")
        });
        Ok(())
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

/// A PreScore call of plugin `p` in cycle `cycle` at generation `g`, untraced.
fn pre_score_request(
    request_id: u64,
    p: &pb::PluginInfo,
    (cycle, g): (u64, u64),
    nodes: Vec<u32>,
) -> pb::PreScoreRequest {
    pb::PreScoreRequest {
        request_id,
        plugin: p.name.clone(),
        cycle,
        generation: g,
        nodes,
        traceparent: String::new(),
    }
}
