//! When Filter and Score go to the thread pool: only when the projected work pays
//! for waking it.

use std::time::{Duration, Instant};

use rayon::prelude::*;

/// Whether per-node work may go to the thread pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parallelism {
    /// On the calling thread, in order.
    Serial,
    /// On the pool when the projected work pays ([`filter_map_adaptive`]).
    Adaptive,
}

impl Parallelism {
    /// `Adaptive` from [`PARALLEL_THRESHOLD`] nodes up.
    pub fn for_nodes(n: usize) -> Self {
        if n >= PARALLEL_THRESHOLD {
            Parallelism::Adaptive
        } else {
            Parallelism::Serial
        }
    }
}

/// Below this many nodes, Filter and Score run on the calling thread: handing work to
/// the pool costs more than it saves.
pub const PARALLEL_THRESHOLD: usize = 64;
/// Smallest unit of work a pool thread takes.
pub const PARALLEL_CHUNK: usize = 16;
/// Work projected below this stays on the calling thread even over many nodes: waking
/// pool threads and letting them spin down costs tens of µs of CPU (more on small
/// VMs) and takes a core that the binding thread or a plugin sidecar may need. On 2
/// cores, SchedulingBasic's cheap filters over 641 nodes ran no faster in parallel
/// but used a quarter more CPU per pod.
pub const PARALLEL_MIN_WORK: Duration = Duration::from_micros(100);
/// Nodes evaluated (and timed) on the calling thread before deciding.
const PROBE_NODES: usize = 32;

/// Whether the `rest` items after `probe` items that took `elapsed` are worth a pool
/// of `threads`.
pub(super) fn worth_parallel(elapsed: Duration, probe: usize, rest: usize, threads: usize) -> bool {
    if probe == 0 || rest < 2 * PARALLEL_CHUNK || threads < 2 {
        return false;
    }
    // Nanoseconds fit u64 for any realistic run; saturate rather than wrap.
    let per = elapsed.as_nanos() / probe as u128;
    per.saturating_mul(rest as u128) >= PARALLEL_MIN_WORK.as_nanos()
}

/// `(0..n).filter_map(f)` in order, in parallel only when it pays: the first nodes run
/// on the calling thread, timed, and the rest go to the pool only if their projected
/// time reaches [`PARALLEL_MIN_WORK`]. Results never depend on the choice.
pub fn filter_map_adaptive<T, F>(n: usize, f: F) -> Vec<T>
where
    T: Send,
    F: Fn(usize) -> Option<T> + Sync + Send,
{
    let mut out = Vec::new();
    filter_map_adaptive_into(n, f, &mut out);
    out
}

/// [`filter_map_adaptive`], appending to `out`: a caller that keeps its vector across
/// pods writes results once, into capacity it already has (the filter loop keeps a
/// status per rejected node; when a pod rejects thousands, copying them from vector to
/// vector cost more than the checks).
pub fn filter_map_adaptive_into<T, F>(n: usize, f: F, out: &mut Vec<T>)
where
    T: Send,
    F: Fn(usize) -> Option<T> + Sync + Send,
{
    let probe = PROBE_NODES.min(n);
    let t0 = Instant::now();
    out.extend((0..probe).filter_map(&f));
    if worth_parallel(t0.elapsed(), probe, n - probe, rayon::current_num_threads()) {
        let min_len = ((n - probe) / (rayon::current_num_threads().max(1) * 4)).max(PARALLEL_CHUNK);
        out.par_extend(
            (probe..n)
                .into_par_iter()
                .with_min_len(min_len)
                .filter_map(&f),
        );
    } else {
        out.extend((probe..n).filter_map(&f));
    }
}
