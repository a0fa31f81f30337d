//! The Switchyard plugin contract, version 1: the messages and the `Plugin` service
//! (client for the scheduler, server for sidecars). The design is in `proto/README.md`.

#![allow(clippy::all, missing_docs)]

pub mod v1 {
    tonic::include_proto!("switchyard.plugin.v1");
}

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: &str = "v1";

/// The environment variable a sidecar reads its listen address from when it has no
/// `--listen` flag; the scheduler sets it for sidecars it starts itself.
pub const LISTEN_ENV: &str = "SWITCHYARD_PLUGIN_LISTEN";
