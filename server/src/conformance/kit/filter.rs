//! Filter: every pod over every node, answers in the contract's shape and grouping, batched and what-if Filters agreeing with plain ones.

use super::*;

/// A Filter answer as compared: the failing items with their codes and reasons, or
/// the call's error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum FilterAnswer {
    Failures(Vec<(u32, i32, Vec<String>)>),
    Error(String),
}

impl FilterAnswer {
    pub(super) fn of(r: &pb::FilterResponse) -> FilterAnswer {
        if let Some(e) = &r.error {
            return FilterAnswer::Error(e.reasons.join("; "));
        }
        let mut f: Vec<(u32, i32, Vec<String>)> = switchyard_proto::failures(r)
            .map(|(i, s)| {
                let s = s.cloned().unwrap_or_default();
                (i, s.code, s.reasons)
            })
            .collect();
        f.sort();
        FilterAnswer::Failures(f)
    }

    fn passing(&self, nodes: &[u32]) -> Vec<u32> {
        match self {
            FilterAnswer::Error(_) => vec![],
            FilterAnswer::Failures(f) => nodes
                .iter()
                .enumerate()
                .filter(|(i, _)| !f.iter().any(|(j, ..)| *j as usize == *i))
                .map(|(_, n)| *n)
                .collect(),
        }
    }
}

/// Everything one pod's cycle answered, per plugin, for comparisons between runs.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct PodAnswers {
    pub(super) pre_filter: BTreeMap<String, (i32, Vec<String>)>,
    pub(super) filter: BTreeMap<String, FilterAnswer>,
    pub(super) score: BTreeMap<String, (i32, Vec<i64>)>,
}

impl Kit {
    /// P2: a plugin declaring `pre_filter_pod_only` gives each probe the PreFilter
    /// verdict it gave before the change (the last probe, which the change places, is
    /// left out).
    pub(super) fn pre_filter_pod_only(
        &mut self,
        hs: &pb::HandshakeResponse,
        f: &Fixture,
        before: &[PodAnswers],
        after: &[PodAnswers],
    ) {
        let unchanged = f.probes.len().saturating_sub(1);
        for p in hs
            .plugins
            .iter()
            .filter(|p| p.pre_filter_pod_only && has(p, Ep::PreFilter))
        {
            for (i, pod) in f.probes.iter().enumerate().take(unchanged) {
                let code = |a: &[PodAnswers]| {
                    a.get(i)
                        .and_then(|x| x.pre_filter.get(&p.name))
                        .map(|x| x.0)
                };
                let (b, a) = (code(before), code(after));
                self.checks.check("P2", b == a, || {
                    format!(
                        "plugin {} pod {}: PreFilter {} before the change, {} after",
                        p.name,
                        pod.name,
                        b.map_or("no answer".into(), code_name),
                        a.map_or("no answer".into(), code_name)
                    )
                });
            }
        }
    }

    /// One cycle per probe pod, every declared extension point in the scheduler's
    /// order; validates each answer (P1, F1, F2, F4, SC1-SC3, X1, E1).
    pub(super) async fn all_pods(
        &mut self,
        c: &mut Conn,
        f: &Fixture,
        run: &str,
    ) -> Vec<PodAnswers> {
        let mut out = Vec::new();
        for pod in &f.probes {
            match self.one_pod(c, f, pod).await {
                Ok(a) => out.push(a),
                Err(e) => {
                    self.checks
                        .fail("F1", format!("{run}: pod {}: {e}", pod.name));
                    out.push(PodAnswers::default());
                }
            }
        }
        out
    }

    pub(super) async fn one_pod(
        &mut self,
        c: &mut Conn,
        f: &Fixture,
        pod: &pb::Pod,
    ) -> Result<PodAnswers, String> {
        let plugins = c.hs.plugins.clone();
        let t = self.timeout;
        let mut nodes = capped(f, c);
        for p in plugins.iter().filter(|p| has(p, Ep::PreEnqueue)) {
            let id = c.id();
            let r = c
                .pre_enqueue
                .call(
                    id,
                    pb::PreEnqueueRequest {
                        request_id: id,
                        plugin: p.name.clone(),
                        pod: Some(pod.clone()),
                    },
                    t,
                )
                .await;
            let ok = matches!(&r, Ok(r) if r.status.as_ref().is_none_or(|s| valid_code(s.code)));
            self.checks.check("E1", ok, || {
                format!("plugin {}: pod {}: {:?}", p.name, pod.name, r.err())
            });
        }
        let (cycle, g) = c.start_cycle(pod)?;
        let mut answers = PodAnswers::default();
        let mut skip_filter = std::collections::HashSet::new();
        let mut rejected = false;
        for p in plugins.iter().filter(|p| has(p, Ep::PreFilter)) {
            let r = c.pre_filter_call(&p.name, cycle, g).await?;
            let code = r.status.as_ref().map(|s| s.code).unwrap_or(0);
            let unknown: Vec<&String> = r
                .node_names
                .iter()
                .filter(|n| !f.nodes.iter().any(|x| &x.name == *n))
                .collect();
            self.checks.check("P1", r.generation == g && valid_code(code) && unknown.is_empty(), || {
                format!(
                    "plugin {} pod {}: generation {} (sent {g}), code {}, unknown nodes {unknown:?}",
                    p.name, pod.name, r.generation, code_name(code)
                )
            });
            let mut names = r.node_names.clone();
            names.sort();
            answers.pre_filter.insert(p.name.clone(), (code, names));
            // As the scheduler: Skip skips the plugin's Filter, a rejection ends the
            // cycle's filtering, node names narrow the nodes.
            if code == pb::Code::Skip as i32 {
                skip_filter.insert(p.name.clone());
            } else if code != pb::Code::Success as i32 {
                rejected = true;
            } else if r.has_node_names {
                nodes.retain(|id| {
                    f.nodes
                        .iter()
                        .any(|n| n.id == *id && r.node_names.contains(&n.name))
                });
            }
        }
        let filters: Vec<&pb::PluginInfo> = plugins
            .iter()
            .filter(|p| has(p, Ep::Filter) && !rejected && !skip_filter.contains(&p.name))
            .collect();
        for p in filters {
            let req = c.filter_request(&p.name, cycle, g, &nodes);
            let r = c.filter(req.clone()).await?;
            self.check_filter(p, pod, &req, &r);
            let a = FilterAnswer::of(&r);
            // Same input, same answer.
            let mut again = req.clone();
            again.request_id = c.id();
            let r2 = c.filter(again).await?;
            let a2 = FilterAnswer::of(&r2);
            self.checks.check("F2", a == a2, || {
                format!(
                    "plugin {} pod {}: Filter answered {a:?}, then {a2:?}",
                    p.name, pod.name
                )
            });
            // The same call answered node by node: the same answer.
            if !r.failure_groups.is_empty() {
                let mut listed = req.clone();
                listed.request_id = c.id();
                listed.group_failures = false;
                let r3 = c.filter(listed).await?;
                let a3 = FilterAnswer::of(&r3);
                self.checks.check("F8", a == a3, || {
                    format!(
                        "plugin {} pod {}: Filter answered {a:?} grouped, {a3:?} node by node",
                        p.name, pod.name
                    )
                });
            }
            answers.filter.insert(p.name.clone(), a);
        }
        let feasible: Vec<u32> = nodes
            .iter()
            .copied()
            .filter(|n| {
                answers
                    .filter
                    .values()
                    .all(|a| a.passing(&nodes).contains(n))
            })
            .collect();
        for p in plugins.iter().filter(|p| has(p, Ep::Score) && !rejected) {
            let passing = match answers.filter.get(&p.name) {
                Some(a) => a.passing(&nodes),
                None => nodes.clone(),
            };
            if passing.is_empty() {
                continue;
            }
            let s = self
                .score(c, p, pod, (cycle, g), &passing, &f.nodes)
                .await?;
            if has(p, Ep::Filter) {
                self.score_ahead(c, p, pod, cycle, g, &nodes, &passing, &s)
                    .await?;
            }
            answers.score.insert(p.name.clone(), s);
        }
        self.binding_points(c, &plugins, pod, cycle, g, &f.nodes, &feasible)
            .await;
        // F4: once the CycleEnd is applied (acknowledged), the cycle's calls are refused.
        let end = c.end_cycle(cycle, true)?;
        c.acked(end).await?;
        if let Some(p) = plugins.iter().find(|p| has(p, Ep::Filter)) {
            let mut req = c.filter_request(&p.name, cycle, g, &nodes);
            if p.node_local {
                req.generation = end;
            }
            let r = c.filter(req).await?;
            self.checks.check("F4", r.error.is_some(), || {
                format!(
                    "plugin {} answered a Filter of cycle {cycle} after its CycleEnd: {:?}",
                    p.name,
                    FilterAnswer::of(&r)
                )
            });
        }
        Ok(answers)
    }

    pub(super) fn check_filter(
        &mut self,
        p: &pb::PluginInfo,
        pod: &pb::Pod,
        req: &pb::FilterRequest,
        r: &pb::FilterResponse,
    ) {
        let who = format!("plugin {} pod {}", p.name, pod.name);
        if let Some(e) = &r.error {
            self.checks.fail(
                "F1",
                format!("{who}: the call failed: {}", e.reasons.join("; ")),
            );
            return;
        }
        let n = req.nodes.len();
        self.checks.check("F1", r.request_id == req.request_id, || {
            format!("{who}: request_id {} for {}", r.request_id, req.request_id)
        });
        self.checks.check("F1", r.generation == req.generation, || {
            format!(
                "{who}: answered at generation {} for a call at {}",
                r.generation, req.generation
            )
        });
        self.checks.check("F1", r.evaluated as usize == n, || {
            format!("{who}: evaluated {} of {n} nodes", r.evaluated)
        });
        self.check_grouping(&who, req, r);
        let mut seen = std::collections::HashSet::new();
        for (index, status) in switchyard_proto::failures(r) {
            let code = status.map(|s| s.code).unwrap_or(0);
            self.checks
                .check("F1", (index as usize) < n && seen.insert(index), || {
                    format!("{who}: failure index {index} (of {n} items, or repeated)")
                });
            self.checks.check(
                "F1",
                valid_code(code) && code != pb::Code::Success as i32,
                || {
                    format!(
                        "{who}: failure of item {index} with code {}",
                        code_name(code)
                    )
                },
            );
        }
    }

    /// F8: with `group_failures`, each distinct status travels once.
    pub(super) fn check_grouping(
        &mut self,
        who: &str,
        req: &pb::FilterRequest,
        r: &pb::FilterResponse,
    ) {
        if !req.group_failures || (r.failures.is_empty() && r.failure_groups.is_empty()) {
            return;
        }
        self.checks.check("F8", r.failures.is_empty(), || {
            format!(
                "{who}: {} failures listed node by node although the call set group_failures",
                r.failures.len()
            )
        });
        let mut seen = Vec::new();
        let mut repeated = Vec::new();
        for g in &r.failure_groups {
            let s = g.status.clone().unwrap_or_default();
            if seen.contains(&s) {
                repeated.push(s);
            } else {
                seen.push(s);
            }
        }
        self.checks.check("F8", repeated.is_empty(), || {
            format!("{who}: several groups carry the same status {repeated:?}")
        });
    }

    /// F7: every node-local Filter plugin's calls for several pods in one message.
    pub(super) async fn filter_batch(
        &mut self,
        c: &mut Conn,
        f: &Fixture,
        baseline: &[PodAnswers],
    ) {
        if c.filter_batch.is_none() {
            return;
        }
        let nodes = capped(f, c);
        let plugins: Vec<pb::PluginInfo> = Self::filter_plugins(c)
            .into_iter()
            .filter(|p| p.node_local)
            .collect();
        if plugins.is_empty() {
            return;
        }
        let pods: Vec<(usize, pb::Pod)> = f.probes.iter().cloned().enumerate().take(4).collect();
        let mut calls = Vec::new();
        let mut cycles = Vec::new();
        for (i, pod) in &pods {
            let Ok((cy, g)) = c.start_cycle(pod) else {
                return;
            };
            cycles.push(cy);
            for p in &plugins {
                calls.push((*i, p.name.clone(), c.filter_request(&p.name, cy, g, &nodes)));
            }
        }
        let id = c.id();
        let req = pb::FilterBatchRequest {
            request_id: id,
            calls: calls.iter().map(|(_, _, r)| r.clone()).collect(),
        };
        let t = self.timeout;
        let Some(lane) = c.filter_batch.as_mut() else {
            return;
        };
        match lane.call(id, req, t).await {
            Ok(r) => {
                self.checks.check("F7", r.replies.len() == calls.len(), || {
                    format!("{} replies for {} calls", r.replies.len(), calls.len())
                });
                for ((i, plugin, call), reply) in calls.iter().zip(&r.replies) {
                    let a = FilterAnswer::of(reply);
                    let want = baseline.get(*i).and_then(|b| b.filter.get(plugin));
                    self.checks.check(
                        "F7",
                        reply.request_id == call.request_id && Some(&a) == want,
                        || {
                            format!(
                            "plugin {plugin} pod {}: reply {} for call {}: {a:?}, alone {want:?}",
                            f.probes[*i].name, reply.request_id, call.request_id
                        )
                        },
                    );
                }
            }
            Err(e) => self.checks.fail("F7", e),
        }
        for cy in cycles {
            let _ = c.end_cycle(cy, false);
        }
    }

    /// F5: items with what-if deltas against a fresh snapshot holding the change.
    pub(super) async fn what_if(&mut self, c: &mut Conn, f: &Fixture) {
        let plugins: Vec<pb::PluginInfo> = Self::filter_plugins(c)
            .into_iter()
            .filter(|p| p.node_local || p.pre_filter_extensions)
            .collect();
        if plugins.is_empty() || f.probes.len() < 2 {
            return;
        }
        // On the first node: its pods removed, and another probe pod added.
        let node = f.nodes[0].clone();
        let remove: Vec<String> = f
            .placed
            .iter()
            .filter(|p| p.node_name == node.name)
            .map(|p| p.uid.clone())
            .collect();
        let mut added = f.probes[f.probes.len() - 1].clone();
        added.node_name = node.name.clone();
        let delta = pb::NodeDelta {
            index: 0,
            remove_pods: remove.clone(),
            add_pods: vec![],
            add_pod_objects: vec![added.clone()],
        };
        let pod = f.probes[0].clone();
        let what_if = match self
            .filter_with(c, &plugins, &pod, &[node.id], Some(delta))
            .await
        {
            Ok(a) => a,
            Err(e) => {
                self.checks.fail("F5", e);
                return;
            }
        };
        let mut fresh = f.clone();
        fresh.placed.retain(|p| !remove.contains(&p.uid));
        fresh.placed.push(added);
        let Some(mut d) = self.reconnect().await else {
            return;
        };
        if self.full_snapshot(&mut d, &fresh).await.is_err() {
            return;
        }
        match self
            .filter_with(&mut d, &plugins, &pod, &[node.id], None)
            .await
        {
            Ok(want) => {
                for (name, a) in &what_if {
                    let w = want.get(name);
                    self.checks.check("F5", Some(a) == w, || {
                        format!("plugin {name} pod {} on {}: with a delta {a:?}, on a fresh snapshot {w:?}", pod.name, node.name)
                    });
                }
            }
            Err(e) => self.checks.fail("F5", e),
        }
    }

    /// One cycle for `pod`: PreFilter of every PreFilter plugin, then the Filter of
    /// `plugins` over `nodes` (one delta at most).
    pub(super) async fn filter_with(
        &mut self,
        c: &mut Conn,
        plugins: &[pb::PluginInfo],
        pod: &pb::Pod,
        nodes: &[u32],
        delta: Option<pb::NodeDelta>,
    ) -> Result<BTreeMap<String, FilterAnswer>, String> {
        let (cycle, g) = c.start_cycle(pod)?;
        let mut skip = std::collections::HashSet::new();
        for p in
            c.hs.plugins
                .clone()
                .iter()
                .filter(|p| has(p, Ep::PreFilter))
        {
            let r = c.pre_filter_call(&p.name, cycle, g).await?;
            let code = r.status.map(|s| s.code).unwrap_or(0);
            if code != pb::Code::Success as i32 {
                skip.insert(p.name.clone());
            }
        }
        let mut out = BTreeMap::new();
        for p in plugins.iter().filter(|p| !skip.contains(&p.name)) {
            let mut req = c.filter_request(&p.name, cycle, g, nodes);
            req.deltas = delta.iter().cloned().collect();
            out.insert(p.name.clone(), FilterAnswer::of(&c.filter(req).await?));
        }
        c.end_cycle(cycle, false)?;
        Ok(out)
    }
}
