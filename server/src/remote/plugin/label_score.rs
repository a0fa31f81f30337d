//! Plugins that score by a node label (`PluginInfo.score_node_label`): their PreScore
//! reads no node list, so it is sent as the cycle starts and travels while Filter
//! runs; its reply carries a raw score per label value, and Score is computed here
//! from each node's label, normalised as the plugin declared, without a call.

use super::score::{check_scores, AheadResult};
use super::*;

/// This attempt's PreScore call to a label-scored plugin.
#[derive(Clone)]
enum LabelCall {
    /// Sent as the cycle started; PreScore waits for its reply.
    Sent(Arc<Mutex<Option<Pending>>>),
    /// The reply's raw scores by label value.
    Scored(Arc<HashMap<String, i64>>),
}

/// Each node's value of the plugin's label, kept across attempts: scoring 500 nodes
/// by looking each label up in its Node object costs three cache misses a node
/// (about 300 µs a pod, measured), this a read of a dense array by node id.
#[derive(Default)]
pub(super) struct LabelDomains {
    /// Label values seen, numbered from 1 (0: the node has no such label).
    values: HashMap<Arc<str>, u32>,
    /// By node id: the NodeInfo generation the value was read at (generations are
    /// process-wide and never reused, so an equal one means the same Node object),
    /// and the value's number.
    by_node: Vec<(u64, u32)>,
}

impl LabelDomains {
    /// The number of `node`'s value of label `key`.
    fn domain(&mut self, key: &str, node: &NodeInfo) -> u32 {
        let id = node.id as usize;
        if let Some(&(g, d)) = self.by_node.get(id) {
            if g == node.generation {
                return d;
            }
        }
        let d = match node.node().labels.get(key) {
            None => 0,
            Some(v) => match self.values.get(v) {
                Some(&d) => d,
                None => {
                    let d = self.values.len() as u32 + 1;
                    self.values.insert(Arc::from(v), d);
                    d
                }
            },
        };
        if self.by_node.len() <= id {
            self.by_node.resize(id + 1, (0, 0));
        }
        self.by_node[id] = (node.generation, d);
        d
    }

    /// Raw scores by value number (0 and values not in `table` score 0).
    fn scores(&self, table: &HashMap<String, i64>) -> Vec<i64> {
        let mut out = vec![0; self.values.len() + 1];
        for (v, &d) in &self.values {
            if let Some(&s) = table.get(&**v) {
                out[d as usize] = s;
            }
        }
        out
    }
}

impl RemotePlugin {
    /// The node label this plugin scores by, when the scheduler can score for it: it
    /// declared one, has PreScore and Score and no PreFilter (its PreScore goes out
    /// before PreFilter would), and normalises (if at all) in one of the standard
    /// ways this scheduler applies itself. Otherwise it is called as any plugin.
    pub(super) fn score_label(&self) -> Option<&str> {
        let i = self.info.as_ref()?;
        let custom = i.normalize_score
            && pb::ScoreNormalization::try_from(i.score_normalization)
                .map_or(true, |k| k == pb::ScoreNormalization::Custom);
        let ok = !i.score_node_label.is_empty()
            && !custom
            && self.implements(pb::ExtensionPoint::PreScore)
            && self.implements(pb::ExtensionPoint::Score)
            && !self.implements(pb::ExtensionPoint::PreFilter);
        ok.then_some(i.score_node_label.as_str())
    }

    fn label_pre_score_request(&self, state: &CycleState) -> Result<Pending, Status> {
        let (cycle, g, streams) = self.cycle(state)?;
        let (_span, traceparent) = self.call_trace(state, "PreScore", 0);
        self.send(&streams, |id| {
            Outbound::PreScore(pb::PreScoreRequest {
                request_id: id,
                plugin: self.meta.name.to_string(),
                cycle,
                generation: g,
                nodes: Vec::new(),
                traceparent,
            })
        })
    }

    /// Sends this cycle's PreScore now (the cycle has started; Filter has not run).
    /// A failure to send is met again, and judged by the policy, at PreScore.
    pub(super) fn start_label_pre_score(&self, state: &mut CycleState) {
        if let Ok(p) = self.label_pre_score_request(state) {
            let sent = LabelCall::Sent(Arc::new(Mutex::new(Some(p))));
            ByPlugin::<LabelCall>::set(state, &self.meta.name, sent);
        }
    }

    /// PreScore of a label-scored plugin: waits for the call sent as the cycle
    /// started (or sends it now) and keeps the reply's scores for Score.
    pub(super) fn label_pre_score(&self, state: &mut CycleState) -> Status {
        let sent = match ByPlugin::<LabelCall>::get(state, &self.meta.name) {
            Some(LabelCall::Sent(p)) => p.lock().ok().and_then(|mut p| p.take()),
            _ => None,
        };
        let r = (|| {
            let (_, g, _) = self.cycle(state)?;
            let pending = match sent {
                Some(p) => p,
                None => self.label_pre_score_request(state)?,
            };
            let reply = pending
                .wait()
                .map_err(|e| self.meta.call_failed("PreScore", e))?;
            let Reply::PreScore(r) = reply else {
                return Err(self.meta.unexpected(reply));
            };
            self.meta.check_generation(r.generation, g)?;
            let s = convert::status_from_pb(r.status.as_ref());
            if s.code() == Code::Error {
                return Err(self.meta.plugin_failed("plugin error", s.message()));
            }
            if !s.is_success() {
                return Ok(s);
            }
            let table = r.label_scores.unwrap_or_default();
            if table.values.len() != table.scores.len() {
                return Err(self.meta.bad_reply(format!(
                    "label_scores has {} values and {} scores",
                    table.values.len(),
                    table.scores.len()
                )));
            }
            let table: HashMap<String, i64> = table.values.into_iter().zip(table.scores).collect();
            ByPlugin::<LabelCall>::set(state, &self.meta.name, LabelCall::Scored(Arc::new(table)));
            Ok(s)
        })();
        match self.policy(Some(state), "PreScore", r, Status::skip) {
            Ok(s) | Err(s) => s,
        }
    }

    /// This cycle's raw scores by label value, once its PreScore reply is in.
    pub(super) fn label_table(&self, state: &CycleState) -> Option<Arc<HashMap<String, i64>>> {
        match ByPlugin::<LabelCall>::get(state, &self.meta.name)? {
            LabelCall::Scored(t) => Some(t),
            LabelCall::Sent(_) => None,
        }
    }

    /// The scores of `nodes` from this cycle's PreScore reply, normalised as the
    /// plugin declared; `None` when there is no reply to score from (the call is
    /// then made as for any plugin).
    pub(super) fn label_scores(
        &self,
        state: &CycleState,
        key: &str,
        nodes: &[Arc<NodeInfo>],
    ) -> Option<AheadResult> {
        let table = self.label_table(state)?;
        let mut scores: Vec<i64> = {
            let mut domains = self.meta.label_domains.lock().ok()?;
            let domain: Vec<u32> = nodes.iter().map(|n| domains.domain(key, n)).collect();
            let by_domain = domains.scores(&table);
            domain.iter().map(|&d| by_domain[d as usize]).collect()
        };
        let info = self.info.as_ref()?;
        if info.normalize_score {
            let kind = pb::ScoreNormalization::try_from(info.score_normalization)
                .unwrap_or(pb::ScoreNormalization::Custom);
            if !switchyard_proto::normalize_scores(kind, &mut scores) {
                return None;
            }
        }
        self.ep()
            .inner
            .stats
            .label_scored
            .fetch_add(1, Ordering::Relaxed);
        Some(check_scores(&self.meta, &scores, true).map(|()| Some((scores, true))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::node;

    #[test]
    fn domains_follow_node_changes() {
        let mut d = LabelDomains::default();
        let mut a = NodeInfo::new(node("a").label("rack", "r1").build());
        a.id = 0;
        let mut b = NodeInfo::new(node("b").label("rack", "r2").build());
        b.id = 3;
        let mut c = NodeInfo::new(node("c").build());
        c.id = 1;
        let table = HashMap::from([("r1".to_string(), 5), ("r9".to_string(), 7)]);
        let score = |d: &mut LabelDomains, n: &NodeInfo| {
            let x = d.domain("rack", n);
            d.scores(&table)[x as usize]
        };
        assert_eq!(
            [score(&mut d, &a), score(&mut d, &b), score(&mut d, &c)],
            [5, 0, 0]
        );
        // Relabelled: a new Node object, a new generation; the old value is not kept.
        a.set_node(node("a").label("rack", "r9").build());
        assert_eq!(score(&mut d, &a), 7);
        assert_eq!(d.domain("rack", &b), d.domain("rack", &b));
        assert_eq!(d.domain("rack", &c), 0);
    }
}
