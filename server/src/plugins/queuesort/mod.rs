//! PrioritySort: higher priority first, then whoever entered the queue first.

use std::sync::Arc;

use crate::framework::interface::{Plugin, QueueSortPlugin, QueuedPodInfo};
use crate::framework::{Handle, PluginFactory};

pub const NAME: &str = "PrioritySort";

pub struct PrioritySort;

impl Plugin for PrioritySort {
    fn name(&self) -> &str {
        NAME
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        Some(self)
    }
}

impl QueueSortPlugin for PrioritySort {
    /// Upstream `Less`: priority, then the queue timestamp (reset each time the pod is
    /// requeued, so a retried pod goes behind peers that waited longer).
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        let (pa, pb) = (a.pod.priority(), b.pod.priority());
        pa > pb || (pa == pb && a.timestamp < b.timestamp)
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|_args, _h: &Arc<Handle>| Ok(Arc::new(PrioritySort)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;
    use std::time::{Duration, Instant};

    #[test]
    fn priority_then_timestamp() {
        let t = Instant::now();
        let hi = QueuedPodInfo::new(pod("hi").priority(10).build(), t + Duration::from_secs(5));
        let lo = QueuedPodInfo::new(pod("lo").priority(1).build(), t);
        let lo_later =
            QueuedPodInfo::new(pod("lo2").priority(1).build(), t + Duration::from_secs(1));
        assert!(PrioritySort.less(&hi, &lo));
        assert!(!PrioritySort.less(&lo, &hi));
        assert!(PrioritySort.less(&lo, &lo_later));
        assert!(!PrioritySort.less(&lo, &lo));
    }
}
