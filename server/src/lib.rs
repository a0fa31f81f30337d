//! Switchyard: a Kubernetes pod scheduler whose plugins can live outside it.
//!
//! The crate mirrors kube-scheduler's layout so a reader who knows it finds their way:
//!
//! * [`model`] — the compact view of Pods, Nodes and friends, converted once from the
//!   Kubernetes API types.
//! * [`cluster`] — the `ClusterBackend` boundary and its `embedded` implementation, plus
//!   manifest loading.
//! * [`queue`] — activeQ, backoffQ, unschedulable pods, requeue on cluster events.
//! * [`cache`] — the cluster cache (assumed pods) and the incremental snapshot.
//! * [`framework`] — extension-point traits, `Status`, `CycleState`, the plugin runtime.
//! * [`plugins`] — the built-in plugins, one folder each, named as upstream.
//! * [`scheduler`] — `schedule_one`: one pod's scheduling and binding cycles.
//! * [`config`] — KubeSchedulerConfiguration profiles.
//! * [`simulate`] — the `switchyard simulate` driver: workloads, settling, reports.
#![forbid(unsafe_code)]

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
