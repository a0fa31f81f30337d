//! A sidecar for the fault tests, served by the Rust SDK: plugin `FaultyFilter`, whose
//! Filter rejects nodes labelled `faults.switchyard.dev/reject: "true"` and whose Score
//! is 7 everywhere. `FAULTY_MODE=bad-score` makes Score answer 1000, outside 0..=100
//! (a reply the scheduler must reject) in the first attempt of every pod. Hangs and crashes are done to it from outside
//! (SIGSTOP, SIGKILL).

use switchyard_plugin_sdk::{
    Cycle, CycleState, FilterPlugin, NodeInfo, Plugin, ScorePlugin, Status,
};

pub const REJECT_LABEL: &str = "faults.switchyard.dev/reject";

struct Faulty {
    bad_score: bool,
    /// Pods whose first attempt got the bad score (the cycle that did).
    spoiled: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

impl Plugin for Faulty {
    fn name(&self) -> &str {
        "FaultyFilter"
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl FilterPlugin for Faulty {
    fn filter(&self, _: &Cycle, _: &CycleState, node: &NodeInfo) -> Status {
        if node.node.labels.get(REJECT_LABEL).map(String::as_str) == Some("true") {
            Status::unresolvable("node rejected by FaultyFilter")
        } else {
            Status::success()
        }
    }
}

impl ScorePlugin for Faulty {
    fn score(&self, cycle: &Cycle, _: &CycleState, _: &NodeInfo) -> Result<i64, Status> {
        if !self.bad_score {
            return Ok(7);
        }
        let mut spoiled = self
            .spoiled
            .lock()
            .map_err(|_| Status::error("state poisoned"))?;
        let first = *spoiled.entry(cycle.pod.uid.clone()).or_insert(cycle.id);
        Ok(if first == cycle.id { 1000 } else { 7 })
    }
}

fn main() {
    let bad_score = std::env::var("FAULTY_MODE").is_ok_and(|m| m == "bad-score");
    if let Err(e) = switchyard_plugin_sdk::run(vec![std::sync::Arc::new(Faulty {
        bad_score,
        spoiled: Default::default(),
    })]) {
        eprintln!("switchyard-faulty-sidecar: {e}");
        std::process::exit(1);
    }
}
