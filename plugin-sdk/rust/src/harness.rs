//! A test harness for plugins: load the manifests `switchyard simulate` reads and
//! run a plugin's extension points for a pending pod the way the sidecar does
//! (PreFilter → Filter → PreScore → Score → NormalizeScore, one [`CycleState`]), so
//! a plugin's unit tests need no scheduler, no sidecar and no hand-built state.
//!
//! ```no_run
//! # use switchyard_plugin_sdk::harness::Harness;
//! # fn plugin() -> std::sync::Arc<dyn switchyard_plugin_sdk::Plugin> { unimplemented!() }
//! let mut h = Harness::from_manifests(&["tests/cluster.yaml"]).unwrap();
//! let out = h.run(&*plugin(), "default/trainer-0").unwrap();
//! assert!(out.status("node-1").unwrap().is_success());
//! assert_eq!(out.best(), Some("node-1"));
//! ```
//!
//! Manifests are converted by the `switchyard` binary (`switchyard snapshot`: the
//! scheduler's own conversion, so a plugin sees in a test what it sees in a run):
//! `SWITCHYARD_BIN` names it, else `switchyard` on `PATH`.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use prost::Message;

use crate::label_score;
use crate::plugin::{Cycle, Plugin, PreFilterResult};
use crate::service::has_normalize;
use crate::snapshot::{NodeInfo, Snapshot};
use crate::state::CycleState;
use crate::status::{Code, Status};
use crate::{pb, Pod};

/// Why a harness could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("cannot run {bin} (set SWITCHYARD_BIN to the switchyard binary, or put it on PATH): {source}")]
    Binary { bin: String, source: std::io::Error },
    #[error("switchyard snapshot failed: {0}")]
    Convert(String),
    #[error("{0}: {1}")]
    Read(String, std::io::Error),
    #[error("not a snapshot message: {0}")]
    Decode(String),
    #[error("no pending pod {0:?} (pending: {1})")]
    NoSuchPod(String, String),
}

/// A cluster loaded for tests: the replica the sidecar would hold, and the pending
/// pods it would be asked about.
pub struct Harness {
    snapshot: Snapshot,
    pending: Vec<(u64, Arc<Pod>, String)>,
}

/// What one plugin answered for one pod, extension point by extension point. A
/// point the plugin does not implement is `None`; points after a rejection are not
/// run (as in a scheduling attempt).
#[derive(Default)]
pub struct Outcome {
    pub pre_filter: Option<PreFilterResult>,
    /// Each evaluated node's Filter status, in the replica's node order (every node
    /// passes when the plugin has no Filter or its PreFilter skipped).
    pub filter: Vec<(String, Status)>,
    pub pre_score: Option<Status>,
    /// Score's raw answers per feasible node, and after normalization (the same when
    /// the plugin does not normalize): what the scheduler weighs.
    pub raw_scores: Vec<(String, i64)>,
    pub scores: Vec<(String, i64)>,
    /// The error that ended the attempt (a Score or NormalizeScore failure).
    pub error: Option<Status>,
    /// The plugin's state at the end of the attempt.
    pub state: CycleState,
}

impl Outcome {
    /// Node `name`'s Filter status, if it was evaluated.
    pub fn status(&self, name: &str) -> Option<&Status> {
        self.filter.iter().find(|(n, _)| n == name).map(|(_, s)| s)
    }

    /// The nodes that passed Filter, in order.
    pub fn feasible(&self) -> Vec<&str> {
        self.filter
            .iter()
            .filter(|(_, s)| s.is_success())
            .map(|(n, _)| n.as_str())
            .collect()
    }

    /// Node `name`'s final score.
    pub fn score(&self, name: &str) -> Option<i64> {
        self.scores.iter().find(|(n, _)| n == name).map(|(_, s)| *s)
    }

    /// The feasible node this plugin scores highest (the first on a tie); the
    /// feasible node itself when only one passed and nothing scores.
    pub fn best(&self) -> Option<&str> {
        let mut best: Option<(&str, i64)> = None;
        for (n, s) in &self.scores {
            if best.is_none_or(|(_, b)| *s > b) {
                best = Some((n, *s));
            }
        }
        best.map(|(n, _)| n).or_else(|| match self.feasible()[..] {
            [only] => Some(only),
            _ => None,
        })
    }
}

impl Harness {
    /// Loads manifests (files or directories) through `switchyard snapshot`: the
    /// binary `SWITCHYARD_BIN` names, else `switchyard` on `PATH`.
    pub fn from_manifests<P: AsRef<Path>>(paths: &[P]) -> Result<Harness, HarnessError> {
        let bin = std::env::var("SWITCHYARD_BIN").unwrap_or_else(|_| "switchyard".into());
        Self::from_manifests_with(bin, paths)
    }

    /// [`Self::from_manifests`] with the `switchyard` binary at `bin`.
    pub fn from_manifests_with<P: AsRef<Path>>(
        bin: impl AsRef<Path>,
        paths: &[P],
    ) -> Result<Harness, HarnessError> {
        let bin = bin.as_ref().display().to_string();
        let out = Command::new(&bin)
            .arg("snapshot")
            .arg("--output")
            .arg("-")
            .arg("--cluster")
            .args(paths.iter().map(AsRef::as_ref))
            .output()
            .map_err(|source| HarnessError::Binary {
                bin: bin.clone(),
                source,
            })?;
        if !out.status.success() {
            return Err(HarnessError::Convert(
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
        Self::from_bytes(&out.stdout)
    }

    /// Loads a message written by `switchyard snapshot --output FILE`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Harness, HarnessError> {
        let path = path.as_ref();
        let bytes =
            std::fs::read(path).map_err(|e| HarnessError::Read(path.display().to_string(), e))?;
        Self::from_bytes(&bytes)
    }

    fn from_bytes(bytes: &[u8]) -> Result<Harness, HarnessError> {
        let req =
            pb::ReplicateRequest::decode(bytes).map_err(|e| HarnessError::Decode(e.to_string()))?;
        Self::from_request(req)
    }

    /// A harness from the message itself: its full snapshot, then a pending pod per
    /// `CycleStart` in `more`.
    pub fn from_request(req: pb::ReplicateRequest) -> Result<Harness, HarnessError> {
        let Some(pb::replicate_request::Kind::Delta(d)) = req.kind else {
            return Err(HarnessError::Decode(
                "the first message is not a snapshot".into(),
            ));
        };
        if !d.full {
            return Err(HarnessError::Decode(
                "the snapshot is not a full one".into(),
            ));
        }
        let mut snapshot = Snapshot::default();
        snapshot
            .apply(req.generation.max(1), d)
            .map_err(HarnessError::Decode)?;
        let mut pending = Vec::new();
        for m in req.more {
            if let Some(pb::replicate_request::Kind::CycleStart(c)) = m.kind {
                let pod = c
                    .pod
                    .ok_or_else(|| HarnessError::Decode("a CycleStart without a pod".into()))?;
                pending.push((c.cycle, Arc::new(pod), c.profile));
            }
        }
        Ok(Harness { snapshot, pending })
    }

    /// The replica, as the plugin's calls see it.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// The pending pods, as `namespace/name`.
    pub fn pending(&self) -> Vec<String> {
        self.pending.iter().map(|(_, p, _)| key(p)).collect()
    }

    /// Pending pod `name` (`namespace/name`, or a name in `default`).
    pub fn pod(&self, name: &str) -> Option<&Arc<Pod>> {
        self.find(name).map(|(_, p, _)| p)
    }

    fn find(&self, name: &str) -> Option<&(u64, Arc<Pod>, String)> {
        let want = if name.contains('/') {
            name.to_string()
        } else {
            format!("default/{name}")
        };
        self.pending.iter().find(|(_, p, _)| key(p) == want)
    }

    /// Runs `plugin`'s extension points for pending pod `name` as the sidecar does
    /// in one attempt over every node. The plugin's indexes are declared first.
    pub fn run(&mut self, plugin: &dyn Plugin, name: &str) -> Result<Outcome, HarnessError> {
        for i in plugin.indexes() {
            self.snapshot.declare_index(&i);
        }
        let (id, pod, profile) = self
            .find(name)
            .cloned()
            .ok_or_else(|| HarnessError::NoSuchPod(name.to_string(), self.pending().join(", ")))?;
        let cycle = Cycle {
            id,
            pod: &pod,
            profile: &profile,
            snapshot: &self.snapshot,
        };
        Ok(run_cycle(plugin, &cycle))
    }
}

fn key(p: &Pod) -> String {
    let ns = if p.namespace.is_empty() {
        "default"
    } else {
        &p.namespace
    };
    format!("{ns}/{}", p.name)
}

/// One attempt of one plugin: the order and the rules of the sidecar's service.
fn run_cycle(plugin: &dyn Plugin, cycle: &Cycle) -> Outcome {
    let mut out = Outcome::default();
    let mut state = CycleState::default();
    let mut only: Option<Vec<String>> = None;
    let mut filter = true;
    if let Some(p) = plugin.as_pre_filter() {
        let r = p.pre_filter(cycle, &mut state);
        let code = r.status.code;
        only = r.node_names.clone();
        out.pre_filter = Some(r);
        match code {
            Code::Success => {}
            // Skip: this plugin's Filter is not run for the pod.
            Code::Skip => filter = false,
            _ => {
                out.state = state;
                return out;
            }
        }
    }
    let nodes: Vec<&NodeInfo> = cycle
        .snapshot
        .nodes()
        .filter(|n| {
            only.as_ref()
                .is_none_or(|o| o.iter().any(|x| x == n.name()))
        })
        .collect();
    let fp = plugin.as_filter().filter(|_| filter);
    for n in &nodes {
        let s = fp.map_or_else(Status::success, |f| f.filter(cycle, &state, n));
        out.filter.push((n.name().to_string(), s));
    }
    let feasible: Vec<&NodeInfo> = nodes
        .iter()
        .zip(&out.filter)
        .filter(|(_, (_, s))| s.is_success())
        .map(|(n, _)| *n)
        .collect();
    if feasible.is_empty() {
        out.state = state;
        return out;
    }
    if let Some(lp) = plugin.as_label_score() {
        let s = label_score::pre_score(lp, cycle, &mut state);
        let go_on = s.is_success();
        out.pre_score = Some(s);
        if go_on {
            let names = || feasible.iter().map(|n| n.name().to_string());
            match label_score::scores(lp, &state, &feasible, false) {
                Ok((raw, _)) => {
                    let mut scores = raw.clone();
                    switchyard_proto::normalize_scores(lp.score_normalization(), &mut scores);
                    out.raw_scores = names().zip(raw).collect();
                    out.scores = names().zip(scores).collect();
                }
                Err(s) => out.error = Some(s),
            }
        }
        out.state = state;
        return out;
    }
    if let Some(p) = plugin.as_pre_score() {
        let s = p.pre_score(cycle, &mut state, &feasible);
        let go_on = s.is_success();
        out.pre_score = Some(s);
        if !go_on {
            out.state = state;
            return out;
        }
    }
    if let Some(sp) = plugin.as_score() {
        let mut raw = Vec::with_capacity(feasible.len());
        for n in &feasible {
            match sp.score(cycle, &state, n) {
                Ok(v) => raw.push(v),
                Err(s) => {
                    out.error = Some(s);
                    out.state = state;
                    return out;
                }
            }
        }
        let mut scores = raw.clone();
        if has_normalize(sp)
            && !switchyard_proto::normalize_scores(sp.score_normalization(), &mut scores)
        {
            let s = sp.normalize(cycle, &state, &mut scores);
            if !s.is_success() {
                out.error = Some(s);
            }
        }
        let names = || feasible.iter().map(|n| n.name().to_string());
        out.raw_scores = names().zip(raw).collect();
        out.scores = names().zip(scores).collect();
    }
    out.state = state;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::{FilterPlugin, PreFilterPlugin, PreScorePlugin, ScorePlugin};

    /// Rejects nodes labelled `bad`, scores by the node's `score` label, and
    /// normalizes to 100 over the highest (the standard normalization); PreFilter
    /// keeps only nodes labelled `zone=a` for pods labelled `zonal`, skips pods
    /// labelled `skip`, rejects pods labelled `reject`.
    struct Probe;

    impl Plugin for Probe {
        fn name(&self) -> &str {
            "Probe"
        }
        fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
            Some(self)
        }
        fn as_filter(&self) -> Option<&dyn FilterPlugin> {
            Some(self)
        }
        fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
            Some(self)
        }
        fn as_score(&self) -> Option<&dyn ScorePlugin> {
            Some(self)
        }
    }

    impl PreFilterPlugin for Probe {
        fn pre_filter(&self, cycle: &Cycle, state: &mut CycleState) -> PreFilterResult {
            state.write(cycle.pod.name.clone());
            let l = &cycle.pod.labels;
            if l.contains_key("reject") {
                return Status::unresolvable("rejected at PreFilter").into();
            }
            if l.contains_key("skip") {
                return Status::skip().into();
            }
            PreFilterResult {
                status: Status::success(),
                node_names: l.contains_key("zonal").then(|| {
                    cycle
                        .snapshot
                        .nodes()
                        .filter(|n| n.node.labels.get("zone").map(String::as_str) == Some("a"))
                        .map(|n| n.name().to_string())
                        .collect()
                }),
            }
        }
    }

    impl FilterPlugin for Probe {
        fn filter(&self, _: &Cycle, state: &CycleState, node: &NodeInfo) -> Status {
            assert!(
                state.read::<String>().is_some(),
                "Filter sees PreFilter's state"
            );
            if node.node.labels.contains_key("bad") {
                Status::unschedulable("bad node")
            } else {
                Status::success()
            }
        }
    }

    impl PreScorePlugin for Probe {
        fn pre_score(&self, _: &Cycle, state: &mut CycleState, nodes: &[&NodeInfo]) -> Status {
            state.write(format!("{} feasible", nodes.len()));
            Status::success()
        }
    }

    impl ScorePlugin for Probe {
        fn score(&self, _: &Cycle, _: &CycleState, node: &NodeInfo) -> Result<i64, Status> {
            node.node.labels.get("score").map_or(Ok(0), |v| {
                v.parse().map_err(|_| Status::error("bad score label"))
            })
        }
        fn score_normalization(&self) -> pb::ScoreNormalization {
            pb::ScoreNormalization::Default
        }
    }

    fn node(name: &str, labels: &[(&str, &str)]) -> pb::Node {
        pb::Node {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    fn pod(name: &str, label: &str) -> pb::ReplicateRequest {
        pb::ReplicateRequest {
            kind: Some(pb::replicate_request::Kind::CycleStart(pb::CycleStart {
                cycle: 7,
                profile: "default-scheduler".into(),
                pod: Some(pb::Pod {
                    uid: name.into(),
                    name: name.into(),
                    namespace: "ns".into(),
                    labels: [(label.to_string(), String::new())].into(),
                    ..Default::default()
                }),
            })),
            ..Default::default()
        }
    }

    fn harness() -> Harness {
        let mut nodes = vec![
            node("a1", &[("zone", "a"), ("score", "10")]),
            node("a2", &[("zone", "a"), ("score", "40")]),
            node("b1", &[("zone", "b"), ("score", "80")]),
            node("bad", &[("zone", "a"), ("bad", ""), ("score", "99")]),
        ];
        for (i, n) in nodes.iter_mut().enumerate() {
            n.id = i as u32 + 1;
        }
        Harness::from_request(pb::ReplicateRequest {
            generation: 1,
            kind: Some(pb::replicate_request::Kind::Delta(pb::SnapshotDelta {
                full: true,
                upsert_nodes: nodes,
                ..Default::default()
            })),
            ack: false,
            more: vec![
                pod("any", "x"),
                pod("zonal", "zonal"),
                pod("skip", "skip"),
                pod("reject", "reject"),
            ],
        })
        .unwrap()
    }

    #[test]
    fn runs_the_points_in_order_with_one_state() {
        let mut h = harness();
        assert_eq!(h.pending(), ["ns/any", "ns/zonal", "ns/skip", "ns/reject"]);
        let out = h.run(&Probe, "ns/any").unwrap();
        assert_eq!(out.feasible(), ["a1", "a2", "b1"]);
        assert_eq!(out.status("bad").unwrap().code, Code::Unschedulable);
        assert_eq!(
            out.raw_scores.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
            [10, 40, 80]
        );
        // Upstream's DefaultNormalizeScore: times 100 over the highest.
        assert_eq!(out.score("b1"), Some(100));
        assert_eq!(out.score("a2"), Some(50));
        assert_eq!(out.best(), Some("b1"));
        assert_eq!(out.state.read::<String>().unwrap(), "3 feasible");
    }

    #[test]
    fn pre_filter_narrows_skips_and_rejects() {
        let mut h = harness();
        let zonal = h.run(&Probe, "ns/zonal").unwrap();
        assert_eq!(
            zonal
                .filter
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>(),
            ["a1", "a2", "bad"],
            "only the nodes PreFilter named are evaluated"
        );
        assert_eq!(zonal.best(), Some("a2"));
        // Skip: Filter is not run, every node passes (even `bad`).
        let skip = h.run(&Probe, "ns/skip").unwrap();
        assert_eq!(skip.feasible().len(), 4);
        // Rejected at PreFilter: nothing else runs.
        let reject = h.run(&Probe, "ns/reject").unwrap();
        let pf = reject.pre_filter.unwrap();
        assert_eq!(pf.status.code, Code::UnschedulableAndUnresolvable);
        assert!(reject.filter.is_empty() && reject.scores.is_empty());
        match h.run(&Probe, "ns/nobody") {
            Err(HarnessError::NoSuchPod(name, pending)) => {
                assert_eq!(name, "ns/nobody");
                assert!(pending.contains("ns/any"), "{pending}");
            }
            other => panic!("{:?}", other.err()),
        }
    }
}
