#!/usr/bin/env bash
# The in-process benchmark: kube-scheduler's own scheduler_perf suite
# (benchmarks/upstream/, unchanged) through `switchyard simulate` on the embedded
# cluster, release build. One row per workload: pods/s, upstream's CI threshold, the
# ratio, p99 attempt latency, peak memory, invariants; then what was refused and why.
#
#   scripts/bench.sh                      # every workload with a threshold, all areas
#   scripts/bench.sh misc affinity        # chosen areas (folders of scheduler_perf/)
#   scripts/bench.sh --all misc           # every workload that loads, thresholds or not
#   scripts/bench.sh --match 'Gated|Daemonset'   # workloads whose name matches
#   scripts/bench.sh --json out.json      # the rows as JSON too
#
# SWITCHYARD_BIN=path/to/switchyard measures that binary instead of building one (to
# compare two builds, interleaved). Exits non-zero if any run failed or broke an
# invariant.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -n "${SWITCHYARD_BIN:-}" ]]; then
  bin=$SWITCHYARD_BIN
else
  cargo build --release --quiet --bin switchyard
  bin=target/release/switchyard
fi
exec python3 scripts/bench_upstream.py --bin "$bin" "$@"
