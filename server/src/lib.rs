//! Switchyard: a Kubernetes pod scheduler whose plugins can live outside it.
//!
//! The crate mirrors kube-scheduler's layout so a reader who knows it finds their way.
//! Modules bottom-up; each imports only from those above it in this list (checked by
//! `scripts/modgraph.py` in the test command):
//!
//! * [`model`] — the compact view of Pods, Nodes and friends, converted once from the
//!   Kubernetes API types; reading input files within their size bound.
//! * [`yaml`], [`clock`], [`rand`] — bounded YAML, time, seedable tie-breaking.
//! * [`client`] — the boundary with a cluster (client-go's place): the
//!   `ClusterClient`/`ClusterBackend` traits and watch events.
//! * [`config`] — KubeSchedulerConfiguration profiles and the `remotePlugins` entries.
//! * [`telemetry`] — metrics, traces, health endpoints: a leaf the layers write to.
//! * [`framework`] — extension-point traits, `Status`, `CycleState`, `NodeInfo`, the
//!   snapshot; and `framework::runtime`, which runs a profile's plugins.
//! * [`cache`], [`queue`] — the cluster cache (assumed pods, snapshot updates);
//!   activeQ, backoffQ, unschedulable pods, requeue on cluster events.
//! * [`plugins`] — the built-in plugins, one folder each, named as upstream.
//! * [`remote`] — plugins served by sidecars, behind the same traits.
//! * [`preemption`] — the preemption evaluator DefaultPreemption runs.
//! * [`scheduler`] — `schedule_one`: one pod's scheduling and binding cycles.
//! * [`invariants`] — the checks recomputed from the input after every run.
//! * [`cluster`] — the backends: `embedded` (in memory) and `kubernetes`, manifest
//!   loading, Lease leader election.
//! * [`simulate`] — the `switchyard simulate` driver: workloads, settling, reports.
//! * [`run`] — `switchyard run` against an API server, and its `/metrics` page.
//! * [`conformance`] — the kit that checks a sidecar against the plugin contract.
//! * [`fuzz`] — structure-aware fuzzing of every input surface.
//! * [`testing`] — builders for tests (nodes, pods, frameworks).
// No unsafe code but one audited prefetch hint (`framework::node_info::prefetch`).
#![deny(unsafe_code)]

pub mod cache;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod conformance;
pub mod framework;
pub mod fuzz;
pub mod invariants;
pub mod model;
pub mod plugins;
pub mod preemption;
pub mod queue;
pub mod rand;
pub mod remote;
pub mod run;
pub mod scheduler;
pub mod simulate;
pub mod telemetry;
pub mod testing;
pub mod yaml;
