//! CPU time spent over a measured stretch, from `/proc` (Linux; elsewhere there is
//! none to report): this process, the part of it in sidecar connection threads, and
//! the sidecar process groups the run was given. It is what explains an out-of-process
//! plugin's cost on a machine whose cores are all busy.

use serde::Serialize;

/// `/proc` reports CPU time in clock ticks of 1/100 s on every Linux ABI (USER_HZ).
const TICK: f64 = 0.01;

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
        let (scheduler, _) = times(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
        let connection_threads = std::fs::read_dir("/proc/self/task")
            .ok()?
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
            .filter(|s| comm(s).is_some_and(|c| c.starts_with("sidecar-")))
            .filter_map(|s| times(&s).map(|(t, _)| t))
            .sum();
        let sidecars = if groups.is_empty() {
            None
        } else {
            let procs = std::fs::read_dir("/proc").ok()?;
            Some(
                procs
                    .flatten()
                    .filter(|e| {
                        e.file_name()
                            .to_str()
                            .is_some_and(|n| n.parse::<u32>().is_ok())
                    })
                    .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
                    .filter_map(|s| times(&s))
                    .filter(|(_, pgrp)| groups.contains(pgrp))
                    .map(|(t, _)| t)
                    .sum(),
            )
        };
        Some(CpuSeconds {
            scheduler,
            connection_threads,
            sidecars,
        })
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

/// The command name in a `stat` line: "pid (comm) state …" (comm may hold anything,
/// spaces and parentheses included).
fn comm(stat: &str) -> Option<&str> {
    Some(&stat[stat.find('(')? + 1..stat.rfind(')')?])
}

/// User + system seconds, and the process group, from a `stat` line.
fn times(stat: &str) -> Option<(f64, u32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().take(13).collect();
    // After the command: state ppid pgrp session tty tpgid flags minflt cminflt
    // majflt cmajflt utime stime.
    let pgrp = f.get(2)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(((utime + stime) as f64 * TICK, pgrp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_past_odd_command_names() {
        let line = "4242 (sidecar-0 (x) y) S 1 77 77 0 -1 4194560 10 0 0 0 150 25 0 0 20 0";
        assert_eq!(comm(line), Some("sidecar-0 (x) y"));
        let (t, pgrp) = times(line).unwrap();
        assert!((t - 1.75).abs() < 1e-9, "{t}");
        assert_eq!(pgrp, 77);
        assert!(times("garbage").is_none());
        assert!(times("1 (x) S 1 2").is_none());
    }

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
