//! DefaultBinder: binds through the cluster backend (the `pods/binding` subresource).

use std::sync::Arc;

use crate::framework::interface::{BindPlugin, BoxFuture, Plugin};
use crate::framework::{CycleState, Handle, PluginFactory, Status};
use crate::model::Pod;

pub const NAME: &str = "DefaultBinder";

pub struct DefaultBinder {
    handle: Arc<Handle>,
}

impl Plugin for DefaultBinder {
    fn name(&self) -> &str {
        NAME
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        Some(self)
    }
}

impl BindPlugin for DefaultBinder {
    fn bind<'a>(
        &'a self,
        _state: &'a CycleState,
        pod: &'a Arc<Pod>,
        node: &'a str,
    ) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            match self.handle.client.bind(pod, node).await {
                Ok(()) => Status::success(),
                Err(e) => Status::error(e.to_string()),
            }
        })
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|_args, h: &Arc<Handle>| Ok(Arc::new(DefaultBinder { handle: h.clone() })))
}
