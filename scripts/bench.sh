#!/usr/bin/env bash
# The benchmark: scheduler_perf-style workloads through `switchyard simulate` on the
# embedded cluster, release build. Prints one row per workload: measured pods/s next to
# kube-scheduler's CI floor (which has an API server in the loop; ours does not).
#
#   scripts/bench.sh            # the standard set (a few minutes on 2 cores)
#   scripts/bench.sh --quick    # the 500-node variants only
#
# SWITCHYARD_BIN=path/to/switchyard measures that binary instead of building one (to
# compare two builds, interleaved).
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
[[ "${1:-}" == "--quick" ]] && quick=1

if [[ -n "${SWITCHYARD_BIN:-}" ]]; then
  bin=$SWITCHYARD_BIN
else
  cargo build --release --quiet --bin switchyard
  bin=target/release/switchyard
fi

if [[ $quick == 1 ]]; then
  runs=(
    "scheduling-basic.yaml SchedulingBasic/500Nodes"
    "topology-spreading.yaml TopologySpreading/500Nodes"
    "topology-spreading.yaml PreferredTopologySpreading/500Nodes"
    "affinity.yaml SchedulingPodAffinity/500Nodes"
    "affinity.yaml SchedulingPodAntiAffinity/500Nodes"
    "affinity.yaml SchedulingPreferredPodAffinity/500Nodes"
    "preemption.yaml PreemptionBasic/500Nodes"
    "preemption.yaml PreemptionAsync/500Nodes"
  )
else
  runs=(
    "scheduling-basic.yaml SchedulingBasic/5000Nodes_10000Pods"
    "topology-spreading.yaml TopologySpreading/5000Nodes_5000Pods"
    "topology-spreading.yaml PreferredTopologySpreading/5000Nodes_5000Pods"
    "affinity.yaml SchedulingPodAffinity/5000Nodes_5000Pods"
    "affinity.yaml SchedulingPodAntiAffinity/5000Nodes_2000Pods"
    "affinity.yaml SchedulingPreferredPodAffinity/5000Nodes_5000Pods"
    "preemption.yaml PreemptionAsync/5000Nodes"
    "preemption.yaml PreemptionBasic/1000Nodes"
  )
fi

printf '| %-50s | %10s | %10s | %12s | %s\n' workload "pods/s" "floor" "p99 cycle" "invariants"
printf '|%s|%s|%s|%s|%s\n' "$(printf -- '-%.0s' {1..52})" "------------" "------------" "--------------" "-----------"
for r in "${runs[@]}"; do
  read -r file name <<<"$r"
  out=$("$bin" simulate --workload "examples/workloads/$file" --workload-name "$name" --no-progress 2>&1) || true
  rate=$(sed -n 's/^Measured .* = \([0-9]*\) pods\/s.*/\1/p' <<<"$out")
  floor=$(sed -n 's/.*upstream scheduler_perf floor: \([0-9]*\) pods\/s.*/\1/p' <<<"$out")
  p99=$(sed -n 's/.*p99 \([0-9.]*\) ms.*/\1 ms/p' <<<"$out" | head -1)
  inv=$(grep -q '^Invariants: ok' <<<"$out" && echo ok || echo FAILED)
  printf '| %-50s | %10s | %10s | %12s | %s\n' "$name" "${rate:-error}" "${floor:--}" "${p99:--}" "$inv"
done
