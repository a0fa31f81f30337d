//! A sidecar for the fault tests, served by the Rust SDK: plugin `FaultyFilter`, whose
//! Filter rejects nodes labelled `faults.switchyard.dev/reject: "true"` and whose Score
//! is 7 everywhere. `FAULTY_MODE=bad-score` makes Score answer 1000, outside 0..=100
//! (a reply the scheduler must reject) in the first attempt of every pod.
//! `FAULTY_MODE=die-in-batch` declares the plugin node-local (so the scheduler sends
//! several pods' Filter calls per message on large clusters) and aborts the process
//! in the middle of a Filter, once it has filtered `FAULTY_DIE_AFTER` nodes (default
//! 40000). Other hangs and crashes are done to it from outside (SIGSTOP, SIGKILL).
//! `FAULTY_MODE=gate` serves plugin `FaultyGate` instead, at Reserve and Permit only:
//! by the pod's label `faults.switchyard.dev/gate`, `reserve` fails Reserve, `permit`
//! is rejected at Permit, `wait` waits at Permit until its 300 ms run out; other pods
//! pass both. It asks to be told of new nodes only.

use std::time::Duration;

use switchyard_plugin_sdk::{
    Cycle, CycleState, FilterPlugin, Handle, NodeInfo, PermitPlugin, Plugin, ReservePlugin,
    ScorePlugin, Status,
};

pub const REJECT_LABEL: &str = "faults.switchyard.dev/reject";

struct Faulty {
    bad_score: bool,
    /// Abort once this many nodes were filtered (die-in-batch).
    die_after: Option<u64>,
    filtered: std::sync::atomic::AtomicU64,
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
    fn node_local(&self) -> bool {
        self.die_after.is_some()
    }
}

impl FilterPlugin for Faulty {
    fn filter(&self, _: &Cycle, _: &CycleState, node: &NodeInfo) -> Status {
        if let Some(limit) = self.die_after {
            let n = self
                .filtered
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if n == limit {
                eprintln!("switchyard-faulty-sidecar: dying after {n} nodes filtered");
                std::process::abort();
            }
        }
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

pub const GATE_LABEL: &str = "faults.switchyard.dev/gate";

struct Gate;

impl Gate {
    fn says<'a>(cycle: &'a Cycle) -> &'a str {
        cycle.pod.labels.get(GATE_LABEL).map_or("", String::as_str)
    }
}

impl Plugin for Gate {
    fn name(&self) -> &str {
        "FaultyGate"
    }
    /// Pods it turned away may pass on a new node (and on nothing else, so a run
    /// ends once they are all turned away).
    fn events(&self) -> Vec<switchyard_plugin_sdk::pb::ClusterEvent> {
        vec![switchyard_plugin_sdk::pb::ClusterEvent {
            resource: "Node".into(),
            actions: vec!["Add".into()],
        }]
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        Some(self)
    }
}

impl ReservePlugin for Gate {
    fn reserve(&self, cycle: &Cycle, _: &mut CycleState, _: &str) -> Status {
        if Self::says(cycle) == "reserve" {
            Status::unschedulable("reserve refused by FaultyGate")
        } else {
            Status::success()
        }
    }
    fn unreserve(&self, _: &Cycle, _: &mut CycleState, _: &str) {}
}

impl PermitPlugin for Gate {
    fn permit(&self, cycle: &Cycle, _: &mut CycleState, _: &str, _: &Handle) -> (Status, Duration) {
        match Self::says(cycle) {
            "permit" => (
                Status::unschedulable("permit refused by FaultyGate"),
                Duration::ZERO,
            ),
            "wait" => (Status::wait(), Duration::from_millis(300)),
            _ => (Status::success(), Duration::ZERO),
        }
    }
}

fn main() {
    let mode = std::env::var("FAULTY_MODE").unwrap_or_default();
    let die_after = (mode == "die-in-batch").then(|| {
        std::env::var("FAULTY_DIE_AFTER")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(40_000)
    });
    let plugin: std::sync::Arc<dyn Plugin> = if mode == "gate" {
        std::sync::Arc::new(Gate)
    } else {
        std::sync::Arc::new(Faulty {
            bad_score: mode == "bad-score",
            die_after,
            filtered: Default::default(),
            spoiled: Default::default(),
        })
    };
    if let Err(e) = switchyard_plugin_sdk::run(vec![plugin]) {
        eprintln!("switchyard-faulty-sidecar: {e}");
        std::process::exit(1);
    }
}
