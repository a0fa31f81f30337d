//! CPU time spent over a measured stretch, from `/proc` (Linux; elsewhere there is
//! none to report): this process, the part of it in sidecar connection threads, and
//! the sidecar process groups the run was given. It is what explains an out-of-process
//! plugin's cost on a machine whose cores are all busy.

use serde::Serialize;

use crate::remote::procfs;

/// CPU seconds (user + system).
#[derive(Serialize, Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuSeconds {
    /// The scheduler process, every thread.
    pub scheduler: f64,
    /// Of which the sidecar connection threads (`sidecar-N`).
    pub connection_threads: f64,
    /// The sidecar process groups watched (none: not measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sidecars: Option<f64>,
}

impl CpuSeconds {
    /// Now, with sidecar process groups `groups`; `None` without `/proc`.
    pub fn now(groups: &[u32]) -> Option<CpuSeconds> {
        let scheduler = procfs::parse(&procfs::own_process()?)?.cpu_seconds;
        let connection_threads = procfs::own_threads()?
            .filter_map(|l| {
                procfs::parse(&l)
                    .filter(|s| s.comm.starts_with("sidecar-"))
                    .map(|s| s.cpu_seconds)
            })
            .sum();
        let sidecars = if groups.is_empty() {
            None
        } else {
            let stats = procfs::processes()?;
            Some(
                stats
                    .filter_map(|l| {
                        procfs::parse(&l)
                            .filter(|s| groups.contains(&s.pgrp))
                            .map(|s| s.cpu_seconds)
                    })
                    .sum(),
            )
        };
        Some(CpuSeconds {
            scheduler,
            connection_threads,
            sidecars,
        })
    }

    /// The same split in µs per pod, over `pods` pods.
    pub fn micros_per(self, pods: usize) -> CpuSeconds {
        let us = |secs: f64| secs * 1e6 / pods.max(1) as f64;
        CpuSeconds {
            scheduler: us(self.scheduler),
            connection_threads: us(self.connection_threads),
            sidecars: self.sidecars.map(us),
        }
    }

    /// The time spent since `earlier`.
    pub fn since(self, earlier: CpuSeconds) -> CpuSeconds {
        CpuSeconds {
            scheduler: (self.scheduler - earlier.scheduler).max(0.0),
            connection_threads: (self.connection_threads - earlier.connection_threads).max(0.0),
            sidecars: self
                .sidecars
                .zip(earlier.sidecars)
                .map(|(b, a)| (b - a).max(0.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_measured() {
        let a = CpuSeconds::now(&[]).expect("/proc/self/stat");
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(60) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let d = CpuSeconds::now(&[]).unwrap().since(a);
        assert!(d.scheduler >= 0.03, "{d:?}");
        assert_eq!(d.sidecars, None);
    }
}
