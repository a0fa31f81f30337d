#!/usr/bin/env bash
# Builds the Go plugin SDK and its examples offline, runs the unit tests (with the
# race detector when cgo works), starts each example sidecar on a Unix socket in a
# temporary directory, and runs `switchyard conformance` against it. Exits 0 only
# when everything passes and every clause the examples exercise is PASS.
#
#   plugin-sdk/go/test.sh
#
# SWITCHYARD_BIN   the switchyard binary (default: <repo>/target/debug/switchyard)
# SWITCHYARD_GO_RACE=0       skip `go test -race`
# SWITCHYARD_GO_MODULES=1    build in module mode (needs the modules: network or a
#                            module cache) instead of GOPATH mode over Debian's
#                            /usr/share/gocode
set -euo pipefail

if ! command -v go >/dev/null 2>&1; then
  echo "SKIPPED: go not found (apt-get install golang-go golang-google-grpc-dev golang-google-protobuf-dev)"
  exit 0
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

bin="${SWITCHYARD_BIN:-$repo/target/debug/switchyard}"
module=github.com/switchyard-sched/switchyard/plugin-sdk/go
work="$(mktemp -d "${TMPDIR:-/tmp}/switchyard-go-sdk.XXXXXX")"
pids=()
cleanup() {
  for p in "${pids[@]:-}"; do
    [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }

if [ "${SWITCHYARD_GO_MODULES:-0}" != 1 ] && [ -d /usr/share/gocode/src/google.golang.org/grpc ]; then
  # Offline: GOPATH mode over the Debian packages, with this module linked at its
  # import path.
  mkdir -p "$work/gopath/src/$(dirname "$module")"
  ln -s "$here" "$work/gopath/src/$module"
  export GO111MODULE=off GOPATH="$work/gopath:/usr/share/gocode" GOFLAGS=
  cd "$work/gopath/src/$module"
  step "build (GOPATH mode over /usr/share/gocode, $(go version | cut -d' ' -f3))"
else
  cd "$here"
  step "build (module mode, $(go version | cut -d' ' -f3))"
fi

unformatted="$(gofmt -l . | grep -v '^pb/' || true)"
if [ -n "$unformatted" ]; then
  echo "FAIL: not gofmt-clean: $unformatted"
  exit 1
fi
go vet ./...
go build ./...
go build -o "$work/accelerator" ./examples/accelerator
go build -o "$work/tenantquota" ./examples/tenantquota
echo "ok: SDK and examples build; gofmt and go vet clean"

step "unit tests"
go test -count=1 ./...
if [ "${SWITCHYARD_GO_RACE:-1}" != 0 ]; then
  if CGO_ENABLED=1 go test -race -count=1 -run XXX_none . >/dev/null 2>&1; then
    echo "race detector:"
    go test -race -count=1 .
  else
    echo "note: the race detector is unavailable here (needs cgo and a C compiler); skipped"
  fi
fi

if [ ! -x "$bin" ]; then
  echo "FAIL: $bin not found: build the scheduler (cargo build) or set SWITCHYARD_BIN"
  exit 1
fi

# conformance NAME BINARY CLUSTER CLAUSES...: runs the kit against the sidecar and
# checks that no clause failed and that each of CLAUSES passed.
conformance() {
  local name="$1" sidecar="$2" cluster="$3"
  shift 3
  local sock="$work/$name.sock"
  step "conformance: $name ($cluster)"
  "$sidecar" --listen "unix://$sock" >"$work/$name.log" 2>&1 &
  pids+=("$!")
  local i
  for i in $(seq 1 100); do
    "$sidecar" --listen "unix://$sock" --probe >/dev/null 2>&1 && break
    sleep 0.1
  done
  local rc=0
  "$bin" conformance "unix://$sock" --cluster "$cluster" -o json >"$work/$name.json" || rc=$?
  python3 - "$work/$name.json" "$rc" "$@" <<'PY'
import json, sys
path, rc, want = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
report = json.load(open(path))
verdicts = {o["clause"]: o["verdict"] for o in report["outcomes"]}
for o in report["outcomes"]:
    line = f'{o["verdict"].upper():4} {o["clause"]:4} {o["title"]}'
    print(line if not o["detail"] else f'{line}\n          {o["detail"]}')
bad = [c for c, v in verdicts.items() if v == "fail"]
missing = [c for c in want if verdicts.get(c) != "pass"]
print(f'{sum(v == "pass" for v in verdicts.values())} passed, {len(bad)} failed, '
      f'{sum(v == "skip" for v in verdicts.values())} not exercised (kit exit status {rc})')
if bad or missing or rc != 0:
    print(f"FAIL: failed {bad}, expected PASS but not {missing}")
    sys.exit(1)
PY
}

conformance accelerator "$work/accelerator" "$repo/examples/conformance/accelerator.yaml" \
  H1 H2 H3 S1 R1 R2 R3 R4 R5 R6 F1 F2 F3 F4 F5 F6 F7 F8 SC1 SC2 SC3 HL1
conformance tenantquota "$work/tenantquota" "$here/examples/tenantquota/cluster.yaml" \
  H1 H2 H3 S1 R1 R2 R3 R4 R5 R6 P1 F1 F2 F4 F5 F8 Q1 E1 X1 HL1

step "shutdown on SIGTERM"
for p in "${pids[@]}"; do
  kill -TERM "$p"
  wait "$p" || { echo "FAIL: sidecar $p exited with status $? on SIGTERM"; exit 1; }
done
pids=()
if ls "$work"/*.sock >/dev/null 2>&1; then
  echo "FAIL: a socket was left behind"
  exit 1
fi
echo "ok: both sidecars stopped cleanly and removed their sockets"
echo
echo "PASS: Go plugin SDK"
