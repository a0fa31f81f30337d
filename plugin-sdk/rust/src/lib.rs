//! Write a Switchyard scheduler plugin that runs as a sidecar.
//!
//! Implement [`Plugin`] and the trait of each extension point you need (for example
//! [`FilterPlugin`]), then call [`run`] (or [`serve`]). The SDK owns everything else:
//! the gRPC streams, the replicated snapshot the scheduler streams to the sidecar,
//! waiting for the generation a call names, parallel evaluation of batches,
//! per-cycle state with fork-and-delta for preemption dry runs, Permit decisions and
//! graceful shutdown (SIGTERM, Ctrl-C).
//!
//! ```no_run
//! use switchyard_plugin_sdk::{Cycle, CycleState, FilterPlugin, NodeInfo, Plugin, Status};
//!
//! /// Keeps pods off nodes labelled `maintenance=true`.
//! struct NoMaintenance;
//!
//! impl Plugin for NoMaintenance {
//!     fn name(&self) -> &str { "NoMaintenance" }
//!     fn as_filter(&self) -> Option<&dyn FilterPlugin> { Some(self) }
//! }
//!
//! impl FilterPlugin for NoMaintenance {
//!     fn filter(&self, _cycle: &Cycle, _state: &CycleState, node: &NodeInfo) -> Status {
//!         match node.node.labels.get("maintenance").map(String::as_str) {
//!             Some("true") => Status::unresolvable("node is under maintenance"),
//!             _ => Status::success(),
//!         }
//!     }
//! }
//!
//! fn main() -> Result<(), switchyard_plugin_sdk::Error> {
//!     switchyard_plugin_sdk::run(vec![std::sync::Arc::new(NoMaintenance)])
//! }
//! ```
//!
//! The command line [`run`] reads is [`SidecarArgs`]: `--listen ADDRESS`, `--probe`
//! (an exec health probe) and `--no-optional-capabilities` (offer none of the
//! protocol's optional capabilities, [`ServeOptions::capabilities`], to serve as an
//! older sidecar would; [`CAPABILITIES_ENV`]`=off` is its environment fallback). A
//! sidecar with flags of its own parses them around [`SidecarArgs::accept`].

mod cli;
pub mod harness;
mod health;
mod index;
mod label_score;
mod plugin;
mod serve;
mod service;
mod snapshot;
mod state;
mod status;
pub mod telemetry;
mod waiting;

pub use cli::{resolve_listen, run, run_with, SidecarArgs};
pub use index::{Index, NodeSets, PodCounts, PodLists};
pub use plugin::*;
pub use serve::{
    parse_listen_address, probe, serve, serve_until_signal, serve_until_signal_with,
    shutdown_signal, Error, Listen, ServeOptions, ServerTls, CAPABILITIES_ENV, LISTEN_ENV,
    TLS_CERT_ENV, TLS_CLIENT_CA_ENV, TLS_KEY_ENV,
};
pub use snapshot::{NodeInfo, Snapshot};
pub use state::CycleState;
pub use status::{Code, Status};
pub use switchyard_proto::v1 as pb;
pub use switchyard_proto::PROTOCOL_VERSION;
pub use waiting::Handle;

/// A pod as the scheduler replicates it (quantities as integers: cpu in millicores,
/// memory in bytes).
pub type Pod = pb::Pod;
/// A node as the scheduler replicates it.
pub type Node = pb::Node;
