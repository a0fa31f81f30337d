//! Resource amounts as the scheduler counts them: milli-CPU, bytes, pod slots and
//! scalar (extended, hugepages, prefixed native) resources by name.

use std::fmt;
use std::sync::Arc;

/// Resource names the scheduler treats specially; everything else is a scalar.
pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const PODS: &str = "pods";
pub const HUGEPAGES_PREFIX: &str = "hugepages-";

/// CPU assumed for a container that requests none, for spreading only (upstream
/// `DefaultMilliCPURequest`).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Memory assumed for a container that requests none, for spreading only (upstream
/// `DefaultMemoryRequest`, 200 MiB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// An interned resource name. Cheap to clone and compare.
pub type ResourceName = Arc<str>;

/// One scalar amount, with its name's hash: a lookup compares hashes and reads the
/// name's text only on a match, so checking a node that lacks the resource touches no
/// memory beyond the node's own (the name lives in a separate allocation).
#[derive(Clone, PartialEq, Eq)]
struct ScalarEntry {
    hash: u64,
    name: ResourceName,
    value: i64,
}

fn name_hash(name: &str) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    h.write(name.as_bytes());
    h.finish()
}

/// Scalar resources as a small vector sorted by name: most pods and nodes have none or
/// one, kept inline, so a vector beats a map and the common case never allocates.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ScalarResources(smallvec::SmallVec<[ScalarEntry; 1]>);

impl ScalarResources {
    /// The entry named `name`, by hash first: a miss reads no name's text.
    fn position(&self, name: &str) -> Option<usize> {
        if self.0.is_empty() {
            return None;
        }
        let h = name_hash(name);
        self.0.iter().position(|e| e.hash == h && *e.name == *name)
    }

    pub fn get(&self, name: &str) -> i64 {
        self.position(name).map_or(0, |i| self.0[i].value)
    }

    /// [`get`](Self::get) with the name's hash worked out once by the caller
    /// ([`ScalarResources::hash_of`]): a filter asking thousands of nodes for one
    /// resource hashes its name once per pod, not twice per node.
    pub fn get_hashed(&self, name: &str, hash: u64) -> i64 {
        self.0
            .iter()
            .find(|e| e.hash == hash && *e.name == *name)
            .map_or(0, |e| e.value)
    }

    /// The hash [`get_hashed`](Self::get_hashed) takes.
    pub fn hash_of(name: &str) -> u64 {
        name_hash(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.position(name).is_some()
    }

    fn entry(&mut self, name: &ResourceName) -> &mut i64 {
        let i = match self.position(name) {
            Some(i) => i,
            None => {
                let i = self.0.partition_point(|e| *e.name < **name);
                self.0.insert(
                    i,
                    ScalarEntry {
                        hash: name_hash(name),
                        name: name.clone(),
                        value: 0,
                    },
                );
                i
            }
        };
        &mut self.0[i].value
    }

    pub fn set(&mut self, name: &ResourceName, value: i64) {
        *self.entry(name) = value;
    }

    pub fn add(&mut self, name: &ResourceName, value: i64) {
        let e = self.entry(name);
        *e = e.saturating_add(value);
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ResourceName, i64)> {
        self.0.iter().map(|e| (&e.name, e.value))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for ScalarResources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|e| (&e.name, e.value)))
            .finish()
    }
}

/// Resource amounts in the units the scheduler compares: milli-CPU, bytes of memory and
/// ephemeral storage, a count of pods, and scalar values as `Quantity.Value()` gives them.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct Resource {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub allowed_pod_number: i64,
    pub scalar: ScalarResources,
}

impl Resource {
    /// Adds `other` to `self`.
    pub fn add(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.saturating_add(other.milli_cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        self.allowed_pod_number = self
            .allowed_pod_number
            .saturating_add(other.allowed_pod_number);
        for (n, v) in other.scalar.iter() {
            self.scalar.add(n, v);
        }
    }

    /// Subtracts `other` from `self`.
    pub fn sub(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.saturating_sub(other.milli_cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_sub(other.ephemeral_storage);
        self.allowed_pod_number = self
            .allowed_pod_number
            .saturating_sub(other.allowed_pod_number);
        for (n, v) in other.scalar.iter() {
            self.scalar.add(n, v.saturating_neg());
        }
    }

    /// Raises every amount of `self` to at least the one in `other`.
    pub fn set_max(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.max(other.allowed_pod_number);
        for (n, v) in other.scalar.iter() {
            let e = self.scalar.entry(n);
            *e = (*e).max(v);
        }
    }

    /// The amount of one resource by its Kubernetes name.
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.milli_cpu,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.allowed_pod_number,
            _ => self.scalar.get(name),
        }
    }

    /// Whether every amount is zero (scalars included).
    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.allowed_pod_number == 0
            && self.scalar.iter().all(|(_, v)| v == 0)
    }
}

/// Whether a resource name is a scalar resource the scheduler accounts: an extended
/// resource (`example.com/foo`), hugepages, or a `kubernetes.io/`-prefixed native one.
/// Upstream `schedutil.IsScalarResourceName`.
pub fn is_scalar_resource_name(name: &str) -> bool {
    is_extended_resource_name(name)
        || name.starts_with(HUGEPAGES_PREFIX)
        || is_prefixed_native_resource(name)
        || name.starts_with("attachable-volumes-")
}

/// Upstream `IsExtendedResourceName`: a fully-qualified name outside `kubernetes.io/`
/// (and not `requests.`-prefixed quota names).
pub fn is_extended_resource_name(name: &str) -> bool {
    if is_native_resource(name) || name.starts_with("requests.") {
        return false;
    }
    name.contains('/')
}

/// Upstream `IsDRAExtendedResourceName`: an extended resource name, or the implicit
/// name every DeviceClass serves (`deviceclass.resource.kubernetes.io/<class>`).
pub fn is_dra_extended_resource_name(name: &str) -> bool {
    is_extended_resource_name(name)
        || name.starts_with(crate::model::dra::DEVICE_CLASS_RESOURCE_PREFIX)
}

/// Upstream `IsNativeResource`: no domain, or the `kubernetes.io/` domain.
pub fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || is_prefixed_native_resource(name)
}

fn is_prefixed_native_resource(name: &str) -> bool {
    name.contains("kubernetes.io/")
}

/// Upstream `IsHugePageResourceName`.
pub fn is_hugepage_resource_name(name: &str) -> bool {
    name.starts_with(HUGEPAGES_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_hashed_reads_as_get() {
        let mut s = ScalarResources::default();
        for (n, v) in [("example.com/gpu", 2), ("hugepages-2Mi", 7), ("a/b", 1)] {
            s.set(&ResourceName::from(n), v);
        }
        for n in [
            "example.com/gpu",
            "hugepages-2Mi",
            "a/b",
            "example.com/fpga",
            "",
        ] {
            assert_eq!(
                s.get_hashed(n, ScalarResources::hash_of(n)),
                s.get(n),
                "{n}"
            );
        }
        assert_eq!(s.get_hashed("a/b", ScalarResources::hash_of("a/b")), 1);
        // A hash that is not the name's finds nothing.
        assert_eq!(s.get_hashed("a/b", ScalarResources::hash_of("a/c")), 0);
    }

    #[test]
    fn add_sub_max_keep_scalars_sorted() {
        let gpu: ResourceName = Arc::from("nvidia.com/gpu");
        let hp: ResourceName = Arc::from("hugepages-2Mi");
        let mut a = Resource {
            milli_cpu: 100,
            memory: 10,
            ..Default::default()
        };
        a.scalar.set(&gpu, 1);
        let mut b = Resource {
            milli_cpu: 50,
            ..Default::default()
        };
        b.scalar.set(&hp, 4);
        b.scalar.set(&gpu, 3);
        a.add(&b);
        assert_eq!(a.milli_cpu, 150);
        assert_eq!(a.get("nvidia.com/gpu"), 4);
        assert_eq!(a.get("hugepages-2Mi"), 4);
        let names: Vec<_> = a.scalar.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(names, ["hugepages-2Mi", "nvidia.com/gpu"]);
        a.sub(&b);
        assert_eq!(a.get("nvidia.com/gpu"), 1);
        let mut c = Resource {
            milli_cpu: 10,
            memory: 99,
            ..Default::default()
        };
        c.set_max(&a);
        assert_eq!(
            (c.milli_cpu, c.memory, c.get("nvidia.com/gpu")),
            (100, 99, 1)
        );
    }

    #[test]
    fn classifies_resource_names_like_upstream() {
        assert!(is_scalar_resource_name("nvidia.com/gpu"));
        assert!(is_scalar_resource_name("hugepages-1Gi"));
        assert!(is_scalar_resource_name("kubernetes.io/something"));
        assert!(!is_scalar_resource_name("cpu"));
        assert!(!is_scalar_resource_name("foo"));
        assert!(!is_extended_resource_name("requests.example.com/foo"));
    }
}
