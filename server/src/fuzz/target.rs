//! What each surface does with an input: parse, load, resolve, decode or simulate it,
//! under `catch_unwind`, timed.

use super::*;

/// What running one input showed.
pub(super) enum Outcome {
    Refused,
    Accepted,
    /// Accepted, simulated, and the simulation broke an invariant (or did not settle).
    Violation(String),
}

pub(super) struct Target {
    pub(super) surface: Surface,
    pub(super) dir: PathBuf,
    pub(super) accepted: u64,
    /// Accepted manifests with at least one object: every SIMULATE_EVERY-th is run.
    pub(super) populated: u64,
    pub(super) simulations: u64,
    /// Time the last input spent simulating: a simulation settles in simulated time
    /// and has its own limit (not settling is a violation), so it is not a hang.
    pub(super) simulated_for: Duration,
}

impl Target {
    pub(super) fn new(surface: Surface, dir: PathBuf) -> Target {
        Target {
            surface,
            dir,
            accepted: 0,
            populated: 0,
            simulations: 0,
            simulated_for: Duration::ZERO,
        }
    }

    /// Runs one input under `catch_unwind`; also returns its time, simulation aside.
    pub(super) fn run_timed(&mut self, text: &str) -> (std::thread::Result<Outcome>, Duration) {
        self.simulated_for = Duration::ZERO;
        let t0 = Instant::now();
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| self.run(text)));
        (result, t0.elapsed().saturating_sub(self.simulated_for))
    }

    pub(super) fn run(&mut self, text: &str) -> Outcome {
        match self.surface {
            Surface::Manifest => {
                let mut objs = Vec::new();
                let mut skipped = crate::cluster::manifest::Skipped::default();
                if crate::cluster::manifest::parse_str(text, "fuzz.yaml", &mut objs, &mut skipped)
                    .is_err()
                {
                    return Outcome::Refused;
                }
                if crate::cluster::embedded::EmbeddedCluster::from_manifests(&objs).is_err() {
                    return Outcome::Refused;
                }
                self.accepted += 1;
                if !objs.is_empty() {
                    self.populated += 1;
                }
                if !objs.is_empty() && self.populated.is_multiple_of(SIMULATE_EVERY) {
                    self.simulations += 1;
                    let opts = crate::simulate::SimulateOptions {
                        objects: objs,
                        timeout: Duration::from_secs(20),
                        threads: 1,
                        ..Default::default()
                    };
                    let t0 = Instant::now();
                    let result = crate::simulate::run(&opts, &crate::plugins::in_tree_registry());
                    self.simulated_for = t0.elapsed();
                    match result {
                        Ok(r) if !r.invariants.ok => {
                            return Outcome::Violation(format!("{:?}", r.invariants))
                        }
                        Ok(r) if r.unsettled.is_some() => {
                            return Outcome::Violation(r.unsettled.unwrap_or_default())
                        }
                        _ => {}
                    }
                }
                Outcome::Accepted
            }
            Surface::Config => match crate::config::SchedulerConfig::from_yaml(text, "fuzz.yaml") {
                Ok(config) => {
                    // Profiles are built as `run` and `simulate` build them: plugin
                    // args are read and checked here.
                    let registry = crate::plugins::in_tree_registry();
                    let client: std::sync::Arc<dyn crate::client::ClusterClient> =
                        std::sync::Arc::new(crate::cluster::embedded::EmbeddedCluster::new());
                    let waiting =
                        std::sync::Arc::new(crate::framework::waiting_pods::WaitingPods::default());
                    for p in &config.profiles {
                        let handle = std::sync::Arc::new(crate::framework::Handle::new(
                            waiting.clone(),
                            client.clone(),
                        ));
                        if crate::framework::Framework::new(p, &registry, handle).is_err() {
                            return Outcome::Refused;
                        }
                    }
                    self.accepted += 1;
                    Outcome::Accepted
                }
                Err(_) => Outcome::Refused,
            },
            Surface::Workload => {
                let f = self.dir.join("workload.yaml");
                if std::fs::write(&f, text).is_err() {
                    return Outcome::Refused;
                }
                match crate::simulate::workload::load(
                    &f,
                    None,
                    crate::model::input::DEFAULT_MAX_INPUT_BYTES,
                    None,
                ) {
                    Ok(_) => {
                        self.accepted += 1;
                        Outcome::Accepted
                    }
                    Err(_) => Outcome::Refused,
                }
            }
            Surface::Watch => {
                use k8s_openapi::api::core::v1 as core;
                let v: Value = match serde_json::from_str(text) {
                    Ok(v) => v,
                    Err(_) => return Outcome::Refused,
                };
                let ok = match v.get("kind").and_then(Value::as_str) {
                    Some("Pod") => serde_json::from_value::<core::Pod>(v)
                        .ok()
                        .is_some_and(|p| {
                            crate::model::convert::pod_from_k8s(
                                &p,
                                &crate::model::convert::SystemPriorities,
                                || "u".into(),
                            )
                            .is_ok()
                        }),
                    Some("Node") => serde_json::from_value::<core::Node>(v)
                        .ok()
                        .is_some_and(|n| {
                            crate::model::convert::node_from_k8s(&n, || "u".into()).is_ok()
                        }),
                    _ => {
                        let mut objs = Vec::new();
                        let mut skipped = crate::cluster::manifest::Skipped::default();
                        crate::cluster::manifest::parse_str(
                            text,
                            "watch.json",
                            &mut objs,
                            &mut skipped,
                        )
                        .is_ok()
                            && crate::cluster::embedded::EmbeddedCluster::from_manifests(&objs)
                                .is_ok()
                    }
                };
                if ok {
                    self.accepted += 1;
                    Outcome::Accepted
                } else {
                    Outcome::Refused
                }
            }
            Surface::Cel => {
                let Ok(p) = switchyard_cel::Program::compile(text) else {
                    return Outcome::Refused;
                };
                for d in cel_devices() {
                    let _ = p.eval_device(d, switchyard_cel::DEFAULT_COST_LIMIT);
                }
                self.accepted += 1;
                Outcome::Accepted
            }
            Surface::Sidecar => {
                if sidecar::run(text) {
                    self.accepted += 1;
                    Outcome::Accepted
                } else {
                    Outcome::Refused
                }
            }
        }
    }
}

/// The devices a fuzzed selector is evaluated on: one with attributes and capacity of
/// every kind, one bare.
fn cel_devices() -> &'static [switchyard_cel::DeviceValue] {
    use switchyard_cel::{AttributeValue as A, DeviceValue, Quantity};
    static DEVICES: std::sync::OnceLock<Vec<DeviceValue>> = std::sync::OnceLock::new();
    DEVICES.get_or_init(|| {
        let q = |s: &str| Quantity::parse(s).unwrap_or(Quantity::from_int(0));
        vec![
            DeviceValue::new(
                "gpu.example.com",
                vec![
                    ("gpu.example.com/model".into(), A::String("a100".into())),
                    ("gpu.example.com/index".into(), A::Int(3)),
                    ("gpu.example.com/nvlink".into(), A::Bool(true)),
                    ("d/a".into(), A::Int(1)),
                    ("d/b".into(), A::Int(2)),
                ],
                vec![("gpu.example.com/memory".into(), q("80Gi"))],
                Some(true),
            ),
            DeviceValue::new("d", Vec::new(), Vec::new(), None),
        ]
    })
}
