#!/usr/bin/env bash
# SchedulingBasic through a real API server, kube-scheduler and Switchyard side by
# side: for each, a fresh control plane (scripts/control-plane.sh, from the binaries in
# $SWITCHYARD_K8S_BIN; kube-scheduler too), 5000 nodes and 10000 pending pods created before the scheduler
# starts, every binding timed by a pod watch. Prints both throughputs (first to last
# bind), the ratio, the time from start to first bind, and the CPU seconds of the API
# server, etcd and the scheduler per 1000 pods. A benchmark, not a test (about three
# minutes on 2 cores).
#
#   scripts/bench-k8s.sh                               # the standard run
#   scripts/bench-k8s.sh --pods 3000 --repeat 3        # see --help
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin switchyard --bin switchyard-k8s-bench
exec target/release/switchyard-k8s-bench "$@"
