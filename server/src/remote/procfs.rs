//! `/proc/<pid>/stat`, as much of it as Switchyard reads: whether a sidecar's
//! processes are still alive (state, process group) and how much CPU a process or
//! thread has used; and this process's peak memory. Linux only: elsewhere the
//! readers return `None` (or 0).

/// `/proc` reports CPU time in clock ticks of 1/100 s on every Linux ABI (USER_HZ).
const TICK: f64 = 0.01;

/// The fields of one `stat` line that are used here.
#[derive(Debug, PartialEq)]
pub struct Stat<'a> {
    /// The command name (it may hold anything, spaces and parentheses included).
    pub comm: &'a str,
    /// `R`, `S`, `Z` (zombie), `X` (dead), …
    pub state: &'a str,
    pub pgrp: u32,
    /// User + system time.
    pub cpu_seconds: f64,
}

impl Stat<'_> {
    /// Whether the process has neither exited nor is waiting to be reaped.
    pub fn running(&self) -> bool {
        self.state != "Z" && self.state != "X"
    }
}

/// Parses "pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
/// cmajflt utime stime …".
pub fn parse(line: &str) -> Option<Stat<'_>> {
    let (open, close) = (line.find('(')?, line.rfind(')')?);
    let f: Vec<&str> = line.get(close + 1..)?.split_whitespace().take(13).collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(Stat {
        comm: line.get(open + 1..close)?,
        state: f.first()?,
        pgrp: f.get(2)?.parse().ok()?,
        cpu_seconds: (utime + stime) as f64 * TICK,
    })
}

/// The `stat` lines of every process.
pub fn processes() -> Option<impl Iterator<Item = String>> {
    let dir = std::fs::read_dir("/proc").ok()?;
    Some(
        dir.flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.parse::<u32>().is_ok())
            })
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok()),
    )
}

/// The `stat` lines of this process's threads.
pub fn own_threads() -> Option<impl Iterator<Item = String>> {
    let dir = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        dir.flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok()),
    )
}

/// This process's `stat` line.
pub fn own_process() -> Option<String> {
    std::fs::read_to_string("/proc/self/stat").ok()
}

/// Peak resident memory of this process so far (Linux), in MiB.
pub fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_past_odd_command_names() {
        let line = "4242 (sidecar-0 (x) y) Z 1 77 77 0 -1 4194560 10 0 0 0 150 25 0 0 20 0";
        let s = parse(line).unwrap();
        assert_eq!(s.comm, "sidecar-0 (x) y");
        assert_eq!((s.state, s.pgrp), ("Z", 77));
        assert!((s.cpu_seconds - 1.75).abs() < 1e-9, "{s:?}");
        assert!(!s.running());
        assert!(parse("garbage").is_none());
        assert!(parse("1 (x) S 1 2").is_none());
    }

    #[test]
    fn this_process_is_listed_and_running() {
        let me = own_process().expect("/proc/self/stat");
        let me = parse(&me).expect("parsable");
        assert!(me.running());
        let pgrp = me.pgrp;
        assert!(processes()
            .expect("/proc")
            .any(|l| parse(&l).is_some_and(|s| s.pgrp == pgrp)));
        assert!(own_threads().expect("/proc/self/task").count() >= 1);
    }
}
