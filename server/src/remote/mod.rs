//! The client side of the plugin contract (`proto/switchyard/plugin/v1`): a plugin
//! served by a sidecar looks to the framework like any built-in plugin. Each endpoint
//! has one connection with one stream per extension point; the snapshot is replicated
//! to it as generation-numbered deltas at the start of each attempt; Filter and Score
//! go out as one batch per round; failures follow the endpoint's failure policy.

mod alike;
pub mod client;
pub mod convert;
pub mod error;
mod plugin;
pub mod procfs;
pub mod replicate;
pub mod sidecar;

use std::sync::Arc;

pub use client::Endpoint;
pub use plugin::RemotePlugin;

pub use crate::config::remote::{
    EndpointConfig, FailurePolicy, InvalidEndpoint, TlsFiles, DEFAULT_MAX_BATCH_PODS,
    MAX_BATCH_PODS_LIMIT,
};
use crate::framework::{Handle, Plugin, PluginFactory, Registry};
pub use error::SetupError;

/// Starts every endpoint, waits (bounded) for its handshake, and registers its plugins
/// so profiles can enable them by name. A sidecar that does not answer in time is
/// registered from the names its entry lists (its calls fail, and the policy decides,
/// until it comes up); without names that is a start-up error.
pub fn register(
    configs: &[EndpointConfig],
    registry: &mut Registry,
) -> Result<Vec<Endpoint>, SetupError> {
    let mut endpoints = Vec::new();
    for cfg in configs {
        let ep = Endpoint::start(cfg.clone())?;
        let hs = ep.wait_handshake(cfg.startup_timeout);
        let infos: Vec<(String, Option<switchyard_proto::v1::PluginInfo>)> = match &hs {
            Some(h) => {
                for name in &cfg.plugins {
                    if !h.plugins.iter().any(|p| p.name == *name) {
                        return Err(SetupError::NotServed {
                            index: cfg.index,
                            endpoint: cfg.endpoint.clone(),
                            name: name.clone(),
                            served: h.plugins.iter().map(|p| p.name.clone()).collect(),
                        });
                    }
                }
                h.plugins
                    .iter()
                    .map(|p| (p.name.clone(), Some(p.clone())))
                    .collect()
            }
            None if !cfg.plugins.is_empty() => {
                let why = ep
                    .streams()
                    .err()
                    .map_or_else(|| "no handshake".into(), |e| e.to_string());
                tracing::warn!(endpoint = %cfg.endpoint, error = %why, "sidecar not available at start; its plugins fail (policy {:?}) until it is", cfg.failure_policy);
                cfg.plugins.iter().map(|n| (n.clone(), None)).collect()
            }
            None => {
                let why = ep
                    .streams()
                    .err()
                    .map_or_else(|| "no handshake".into(), |e| e.to_string());
                ep.stop();
                return Err(SetupError::NoHandshake {
                    index: cfg.index,
                    endpoint: cfg.endpoint.clone(),
                    timeout: cfg.startup_timeout,
                    why,
                });
            }
        };
        let hooks = Arc::new(plugin::EndpointHooks::new(ep.clone()));
        let names: Vec<&str> = infos.iter().map(|(n, _)| n.as_str()).collect();
        registry.add_source(format!("{} serves {}", cfg.endpoint, names.join(", ")));
        for (name, info) in infos {
            if registry.contains(&name) {
                return Err(SetupError::AlreadyRegistered {
                    index: cfg.index,
                    endpoint: cfg.endpoint.clone(),
                    name,
                });
            }
            let reg_name = name.clone();
            let ep2 = ep.clone();
            let hooks = hooks.clone();
            let factory: PluginFactory = Arc::new(move |args, h: &Arc<Handle>| {
                if args.is_some() {
                    return Err("remote plugins take no pluginConfig args here; configure the sidecar itself".into());
                }
                let _ = ep2.inner.waiting_pods.set(h.waiting_pods().clone());
                let _ = ep2.inner.handle.set(h.clone());
                Ok(Arc::new(RemotePlugin::new(
                    name.clone(),
                    ep2.clone(),
                    hooks.clone(),
                    info.clone(),
                )) as Arc<dyn Plugin>)
            });
            registry.register(&reg_name, factory);
        }
        endpoints.push(ep);
    }
    Ok(endpoints)
}

/// Stops the endpoints (their connection threads) when dropped.
pub struct StopOnDrop(pub Vec<Endpoint>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        for e in &self.0 {
            e.stop();
        }
    }
}
