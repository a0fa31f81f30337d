//! The scoring pipeline both resource plugins share (upstream `resource_allocation.go`):
//! per configured resource, the node's allocatable and what would be requested with the
//! pod added, then a strategy turns those into 0..=100.

use serde::Deserialize;

use crate::framework::NodeInfo;
use crate::model::resource::{
    is_scalar_resource_name, ResourceName, CPU, EPHEMERAL_STORAGE, MEMORY,
};
use crate::model::Pod;

/// A configured resource, resolved once so the per-node loop does no string matching.
#[derive(Clone, Debug)]
pub enum ResourceKind {
    Cpu,
    Memory,
    EphemeralStorage,
    Scalar(ResourceName),
    /// `pods` or an unaccounted name: never contributes.
    Ignored,
}

#[derive(Clone, Debug)]
pub struct WeightedResource {
    pub kind: ResourceKind,
    pub weight: i64,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceSpec {
    pub name: String,
    #[serde(default)]
    pub weight: Option<i64>,
}

impl WeightedResource {
    pub fn from_spec(r: &ResourceSpec) -> Self {
        let kind = match r.name.as_str() {
            CPU => ResourceKind::Cpu,
            MEMORY => ResourceKind::Memory,
            EPHEMERAL_STORAGE => ResourceKind::EphemeralStorage,
            n if is_scalar_resource_name(n) => ResourceKind::Scalar(n.into()),
            _ => ResourceKind::Ignored,
        };
        WeightedResource {
            kind,
            weight: match r.weight {
                None | Some(0) => 1,
                Some(w) => w,
            },
        }
    }
}

/// The default resources: cpu and memory, weight 1.
pub fn default_resources() -> Vec<ResourceSpec> {
    vec![
        ResourceSpec {
            name: CPU.into(),
            weight: Some(1),
        },
        ResourceSpec {
            name: MEMORY.into(),
            weight: Some(1),
        },
    ]
}

/// The pod's request of one resource; with `non_zero`, CPU and memory use the upstream
/// defaults for containers that request none.
pub fn pod_request(pod: &Pod, kind: &ResourceKind, non_zero: bool) -> i64 {
    let r = &pod.spec.requests;
    match kind {
        ResourceKind::Cpu if non_zero => pod.spec.non_zero_milli_cpu,
        ResourceKind::Memory if non_zero => pod.spec.non_zero_memory,
        ResourceKind::Cpu => r.milli_cpu,
        ResourceKind::Memory => r.memory,
        ResourceKind::EphemeralStorage => r.ephemeral_storage,
        ResourceKind::Scalar(n) => r.scalar.get(n),
        ResourceKind::Ignored => 0,
    }
}

/// `(allocatable, requested with the pod)` for one resource on a node. With
/// `use_requested` the node side is the real requests (BalancedAllocation); without it
/// CPU and memory use the non-zero sums (NodeResourcesFit).
#[inline]
pub fn allocatable_and_requested(
    node: &NodeInfo,
    kind: &ResourceKind,
    pod_req: i64,
    use_requested: bool,
) -> (i64, i64) {
    let a = &node.allocatable;
    match kind {
        ResourceKind::Cpu => {
            let nr = if use_requested {
                node.requested.milli_cpu
            } else {
                node.non_zero_requested.milli_cpu
            };
            (a.milli_cpu, nr.saturating_add(pod_req))
        }
        ResourceKind::Memory => {
            let nr = if use_requested {
                node.requested.memory
            } else {
                node.non_zero_requested.memory
            };
            (a.memory, nr.saturating_add(pod_req))
        }
        ResourceKind::EphemeralStorage => (
            a.ephemeral_storage,
            node.requested.ephemeral_storage.saturating_add(pod_req),
        ),
        ResourceKind::Scalar(n) => {
            if pod_req == 0 || !a.scalar.contains(n) {
                (0, 0)
            } else {
                (
                    a.scalar.get(n),
                    node.requested.scalar.get(n).saturating_add(pod_req),
                )
            }
        }
        ResourceKind::Ignored => (0, 0),
    }
}

/// Utilisation in percent, `requested * 100 / capacity`, without overflow near i64::MAX.
pub fn percent_of(requested: i64, capacity: i64) -> i64 {
    times_100_over(requested, capacity)
}

/// `x * 100 / capacity` as in i128, in i64 arithmetic when `x * 100` fits (always, for
/// real quantities): a 128-bit division is a library call several times slower, in the
/// Score loop over every feasible node.
fn times_100_over(x: i64, capacity: i64) -> i64 {
    match x.checked_mul(100) {
        Some(p) => p / capacity,
        None => (i128::from(x) * 100 / i128::from(capacity)) as i64,
    }
}

/// Upstream `leastRequestedScore`.
pub fn least_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    // Without overflow near i64::MAX (Go's int64 wraps there); requested <= capacity,
    // so the difference is never negative and fits when requested >= 0.
    match capacity.checked_sub(requested) {
        Some(free) => times_100_over(free, capacity),
        None => {
            ((i128::from(capacity) - i128::from(requested)) * 100 / i128::from(capacity)) as i64
        }
    }
}

/// Upstream `mostRequestedScore` (requests above capacity count as full).
pub fn most_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    times_100_over(requested.min(capacity), capacity)
}

/// A piecewise-linear function over utilisation 0..=100 (upstream `BuildBrokenLinearFunction`);
/// points are `(utilization, score×10)`.
#[derive(Clone, Debug)]
pub struct BrokenLinear(pub Vec<(i64, i64)>);

impl BrokenLinear {
    pub fn eval(&self, p: i64) -> i64 {
        let s = &self.0;
        for i in 0..s.len() {
            if p <= s[i].0 {
                if i == 0 {
                    return s[0].1;
                }
                return s[i - 1].1
                    + (s[i].1 - s[i - 1].1) * (p - s[i - 1].0) / (s[i].0 - s[i - 1].0);
            }
        }
        s.last().map_or(0, |l| l.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_equal_the_128_bit_arithmetic_at_the_edges() {
        let wide = |x: i64, c: i64| (i128::from(x) * 100 / i128::from(c)) as i64;
        let edges = [
            0,
            1,
            99,
            4000,
            i64::MAX / 100,
            i64::MAX / 100 + 1,
            i64::MAX - 1,
            i64::MAX,
        ];
        for &c in edges.iter().filter(|c| **c > 0) {
            for &r in &edges {
                assert_eq!(percent_of(r, c), wide(r, c), "{r}/{c}");
                assert_eq!(most_requested_score(r, c), wide(r.min(c), c), "{r}/{c}");
                let least = if r > c { 0 } else { wide(c - r, c) };
                assert_eq!(least_requested_score(r, c), least, "{r}/{c}");
            }
        }
    }

    #[test]
    fn scorers() {
        assert_eq!(least_requested_score(3000, 4000), 25);
        assert_eq!(least_requested_score(5000, 4000), 0);
        assert_eq!(most_requested_score(5000, 4000), 100);
        assert_eq!(most_requested_score(1000, 4000), 25);
        let f = BrokenLinear(vec![(0, 0), (100, 100)]);
        assert_eq!(f.eval(37), 37);
        let g = BrokenLinear(vec![(0, 100), (100, 0)]);
        assert_eq!(g.eval(33), 67);
        assert_eq!(BrokenLinear(vec![(20, 50), (80, 90)]).eval(10), 50);
        assert_eq!(BrokenLinear(vec![(20, 50), (80, 90)]).eval(90), 90);
    }
}
