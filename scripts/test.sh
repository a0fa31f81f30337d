#!/usr/bin/env bash
# Runs every test of the project, suite by suite, and ends with a summary of each:
# tests run, passed, failed, not run, and a last line `N passed, M failed`. This is
# what CI runs (.ci/run).
#
#   scripts/test.sh
#
# What a suite needs, this installs when it may (Go and its gRPC packages from
# Debian when running as root; the Python SDK into target/pyenv; npm packages) and
# otherwise fails the suite naming what is missing. Nothing passes by skipping. The
# one suite allowed not to run is the real-control-plane suite, whose binaries no
# registry here ships (kube-apiserver): without them it is listed as not run, with
# the reason and how to run it, and never counted as passed.
#
# SWITCHYARD_K8S_BIN     a folder with etcd, kube-apiserver, kube-controller-manager,
#                        kube-scheduler and kubectl for the control-plane suite
#                        (scripts/control-plane.sh starts them), or
# KUBEBUILDER_ASSETS     envtest's assets (etcd, kube-apiserver, kubectl): the tests
#                        that need kube-scheduler beside Switchyard then fail saying so
# K8S_CONTROL_PLANE_DIR  another folder holding a control-plane.sh to use instead
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
logs=target/test-logs
mkdir -p "$logs"
# No incremental caches: this is a one-off build, and they would double its size on disk.
export CARGO_INCREMENTAL=0
# Disk is the first thing a fresh build runs out of: say how much there is, and again
# at the end (the build and test binaries take a few GiB).
df -h . 2>/dev/null | tail -1 | awk '{print "disk free at start: " $4 " of " $2}'

# The tests that need a real Kubernetes control plane (test binaries of tests/).
control_plane_binaries=(control_plane control_plane_volumes k8s_metrics_auth)
control_plane_filter="binary(control_plane) | binary(control_plane_volumes) | binary(k8s_metrics_auth)"

suites=()
declare -A RUN PASSED FAILED NOTRUN NOTE

# record SUITE PASSED FAILED [NOT_RUN] [NOTE]
record() {
  suites+=("$1")
  PASSED[$1]=$2
  FAILED[$1]=$3
  NOTRUN[$1]=${4:-0}
  RUN[$1]=$(($2 + $3))
  NOTE[$1]=${5:-}
}

banner() { printf '\n==== %s\n' "$*"; }

# count PATTERN FILE: lines of FILE matching the extended regex PATTERN.
count() { grep -Ec "$1" "$2" || true; }

# checks: each step one test.
checks_passed=0
checks_failed=0
checks_note=""
check() {
  local name=$1
  shift
  banner "check: $name"
  if "$@" 2>&1 | tee "$logs/check-${name// /-}.log"; then
    checks_passed=$((checks_passed + 1))
  else
    checks_failed=$((checks_failed + 1))
    checks_note+="${checks_note:+; }$name failed"
  fi
}

# ensure_go: Go and Debian's gRPC packages (GOPATH mode, no module proxy here).
ensure_go() {
  if command -v go >/dev/null 2>&1 && [[ -d /usr/share/gocode/src/google.golang.org/grpc ]]; then
    return 0
  fi
  local pkgs=(golang-go golang-google-grpc-dev golang-google-protobuf-dev)
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${pkgs[*]} (Debian)"
    if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null; }; }; then
      echo "FAIL: apt-get could not install ${pkgs[*]}"
      return 1
    fi
    command -v go >/dev/null 2>&1 && return 0
  fi
  echo "FAIL: the Go SDK's suite needs go and Debian's gRPC packages: apt-get install ${pkgs[*]} (as root)"
  return 1
}

# ensure_nextest: cargo-nextest, which the Rust suites run under.
ensure_nextest() {
  cargo nextest --version >/dev/null 2>&1 && return 0
  echo "installing cargo-nextest (crates.io)"
  cargo install --locked --quiet cargo-nextest || {
    echo "FAIL: cargo-nextest is missing and could not be installed: cargo install --locked cargo-nextest"
    return 1
  }
}

# finish SUITE PASSED FAILED RC LOG: records a suite; a non-zero exit with no failed
# test counted (a build or set-up step failed) counts as one failure.
finish() {
  local suite=$1 passed=$2 failed=$3 rc=$4 log=$5 note=""
  if [[ $rc != 0 && $failed == 0 ]]; then
    failed=1
    note="exit status $rc (see $log)"
  fi
  record "$suite" "$passed" "$failed" 0 "$note"
}

# nextest_counts LOG SUITE RC: records the suite from nextest's summary line.
nextest_counts() {
  local log=$1 suite=$2 rc=$3 line passed failed
  line=$(grep -E '^ *Summary \[' "$log" | tail -1)
  passed=$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$line")
  failed=$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$line")
  finish "$suite" "${passed:-0}" "${failed:-0}" "$rc" "$log"
}

# ---------------------------------------------------------------- checks
check "cargo fmt" cargo fmt --all -- --check
check "import circles" python3 scripts/modgraph.py
check "cargo clippy" cargo clippy --workspace --all-targets --quiet -- -D warnings
# End-to-end tests and the SDK suites start these binaries.
check "cargo build" cargo build --workspace --bins --examples --quiet
if [[ -f scripts/doccheck.py ]]; then
  check "docs match the code" python3 scripts/doccheck.py --bin target/debug/switchyard
fi
record checks "$checks_passed" "$checks_failed" 0 "$checks_note"

# ---------------------------------------------------------------- Python SDK
banner "Python plugin SDK (unit tests, the EnergyAware sidecar's self-test)"
log=$logs/python.log
rc=0
{
  # shellcheck source=scripts/pyenv.sh
  source scripts/pyenv.sh &&
    "$PYENV_PYTHON" -m unittest discover -s plugin-sdk/python/tests &&
    "$PYENV_PYTHON" plugins/python-energy/test_sidecar.py
} 2>&1 | tee "$log" || rc=$?
# pyenv.sh ran in a subshell above (the pipe): set it up here for later suites.
source scripts/pyenv.sh >/dev/null 2>&1 || true
# End-to-end tests start the Python sidecar with this interpreter.
export SWITCHYARD_PYTHON="${PYENV_PYTHON:-python3}"
ran=$(sed -nE 's/^Ran ([0-9]+) tests?.*/\1/p' "$log" | tail -1)
ran=${ran:-0}
unit_failed=0
for n in $(sed -nE 's/^FAILED \((.*)\)/\1/p' "$log" | grep -oE '[0-9]+'); do
  unit_failed=$((unit_failed + n))
done
self_passed=$(sed -nE 's/^([0-9]+) passed, ([0-9]+) failed$/\1/p' "$log" | tail -1)
self_failed=$(sed -nE 's/^([0-9]+) passed, ([0-9]+) failed$/\2/p' "$log" | tail -1)
finish "Python SDK" $((ran - unit_failed + ${self_passed:-0})) $((unit_failed + ${self_failed:-0})) "$rc" "$log"

# ---------------------------------------------------------------- Go SDK
banner "Go plugin SDK (unit tests, examples through the conformance kit)"
log=$logs/go.log
rc=0
{ ensure_go && plugin-sdk/go/test.sh; } 2>&1 | tee "$log" || rc=$?
finish "Go SDK" "$(count '^(--- PASS:|PASS: )' "$log")" "$(count '^(--- FAIL:|FAIL: )' "$log")" "$rc" "$log"

# ---------------------------------------------------------------- TypeScript SDK
banner "TypeScript plugin SDK (npm ci, dist/ current, types, unit tests, conformance kit)"
log=$logs/node.log
rc=0
plugin-sdk/node/test.sh 2>&1 | tee "$log" || rc=$?
p=$(($(sed -nE 's/^# pass ([0-9]+)$/\1/p' "$log" | tail -1) + 0 + $(count '^PASS: ' "$log")))
f=$(($(sed -nE 's/^# fail ([0-9]+)$/\1/p' "$log" | tail -1) + 0 + $(count '^FAIL: ' "$log")))
finish "TypeScript SDK" "$p" "$f" "$rc" "$log"

# ---------------------------------------------------------------- deploy
banner "deploy/ manifests (offline schema validation)"
log=$logs/deploy.log
rc=0
scripts/validate-deploy.sh 2>&1 | tee "$log" || rc=$?
finish deploy $((rc == 0 ? 1 : 0)) 0 "$rc" "$log"

# ---------------------------------------------------------------- Rust
banner "Rust: unit, scenario and end-to-end tests (cargo nextest)"
log=$logs/rust.log
rc=0
{ ensure_nextest && cargo nextest run --workspace --no-fail-fast -E "not ($control_plane_filter)"; } 2>&1 |
  tee "$log" || rc=$?
nextest_counts "$log" Rust "$rc"

# ---------------------------------------------------------------- control plane
banner "real Kubernetes control plane (${control_plane_binaries[*]})"
log=$logs/control-plane.log
# The project's launcher starts the user's binaries (SWITCHYARD_K8S_BIN or envtest's
# KUBEBUILDER_ASSETS); K8S_CONTROL_PLANE_DIR names another folder with a
# control-plane.sh.
k8s_script="${K8S_CONTROL_PLANE_DIR:+$K8S_CONTROL_PLANE_DIR/control-plane.sh}"
k8s_script="${k8s_script:-scripts/control-plane.sh}"
# `check` exits 3 only when etcd or kube-apiserver is missing; anything else the
# user gave runs, and a test that lacks something fails saying what.
k8s_rc=0
if [[ -n ${K8S_CONTROL_PLANE_DIR:-} ]]; then
  [[ -f $k8s_script ]] || k8s_rc=3
else
  scripts/control-plane.sh check || k8s_rc=$?
fi
if [[ $k8s_rc != 3 ]]; then
  echo "control plane from $k8s_script"
  rc=0
  cargo nextest run --workspace --no-fail-fast -E "$control_plane_filter" 2>&1 |
    tee "$log" || rc=$?
  nextest_counts "$log" "control plane" "$rc"
else
  n=$(cargo nextest list --workspace -E "$control_plane_filter" --message-format json 2>/dev/null |
    python3 -c 'import json, sys
suites = json.load(sys.stdin)["rust-suites"].values()
print(sum(t["filter-match"]["status"] == "matches" for s in suites for t in s["testcases"].values()))' || echo "?")
  reason="no kube-apiserver here (no registry ships one): set KUBEBUILDER_ASSETS (envtest) or SWITCHYARD_K8S_BIN to a folder with etcd and kube-apiserver (and kube-scheduler, kube-controller-manager, kubectl) and rerun; see docs/testing.md"
  echo "not run: $reason"
  record "control plane" 0 0 "${n:-0}" "$reason"
fi

# ---------------------------------------------------------------- summary
banner "summary"
du -sh target 2>/dev/null | awk '{print "target/ now: " $1}'
df -h . 2>/dev/null | tail -1 | awk '{print "disk free at end: " $4}'
total_passed=0
total_failed=0
printf '%-16s %6s %7s %7s %8s  %s\n' suite run passed failed "not run" note
for s in "${suites[@]}"; do
  printf '%-16s %6s %7s %7s %8s  %s\n' "$s" "${RUN[$s]}" "${PASSED[$s]}" "${FAILED[$s]}" "${NOTRUN[$s]}" "${NOTE[$s]}"
  total_passed=$((total_passed + PASSED[$s]))
  total_failed=$((total_failed + FAILED[$s]))
done
echo "logs: $logs/"
echo "$total_passed passed, $total_failed failed"
[[ $total_failed == 0 ]]
