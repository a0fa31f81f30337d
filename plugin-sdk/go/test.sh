#!/usr/bin/env bash
# Builds the Go plugin SDK and its examples offline, runs the unit tests (with the
# race detector when cgo works), starts each example sidecar on a Unix socket in a
# temporary directory, and runs `switchyard conformance` against it; runs the
# Accelerator again exporting spans over OTLP/gRPC to the kit's receiver (clause T1);
# then serves the Accelerator on https://127.0.0.1:<free port> with mutual TLS
# (tests/fixtures/tls) and runs the kit over TLS, with and without a client
# certificate. Exits 0 only when everything passes and every clause the examples
# exercise is PASS.
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
  echo "FAIL: go not found (apt-get install golang-go golang-google-grpc-dev golang-google-protobuf-dev; scripts/test.sh installs them when run as root)"
  exit 1
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

bin="${SWITCHYARD_BIN:-$repo/target/debug/switchyard}"
# The harness tests (examples/tenantquota/main_test.go) convert manifests with it.
export SWITCHYARD_BIN="$bin"
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

unformatted="$(gofmt -l . | grep -v -e '^pb/' -e '^otlp/pb/' || true)"
if [ -n "$unformatted" ]; then
  echo "FAIL: not gofmt-clean: $unformatted"
  exit 1
fi
go vet ./...
go build ./...
go build -o "$work/accelerator" ./examples/accelerator
go build -o "$work/tenantquota" ./examples/tenantquota
go build -o "$work/racklocality" ./examples/racklocality
echo "ok: SDK and examples build; gofmt and go vet clean"

if [ -d /usr/share/gocode/src/google.golang.org/grpc ]; then
  # The README's offline module-mode recipe: a plugin module outside this tree
  # (the TenantQuota example as example.com/tenantquota), vendored by
  # vendor-offline.py, built and vetted in module mode with no proxy. Its binary is
  # the one the conformance run below checks.
  step "module mode, offline: vendor-offline.py"
  mkdir -p "$work/modplugin"
  cp "$here/examples/tenantquota/main.go" "$work/modplugin/"
  (
    cd "$work/modplugin"
    unset GOPATH
    export GO111MODULE=on GOPROXY=off GOFLAGS=
    go mod init example.com/tenantquota >/dev/null 2>&1
    python3 "$here/vendor-offline.py"
    go vet ./...
    go build -o "$work/tenantquota" .
  )
  echo "ok: a plugin module builds and vets offline in module mode (vendor/ from the SDK checkout and /usr/share/gocode)"
fi

step "unit tests"
go test -v -count=1 ./... | grep -vE "^(=== (RUN|PAUSE|CONT)|    --- PASS)"
if [ "${SWITCHYARD_GO_RACE:-1}" != 0 ]; then
  if CGO_ENABLED=1 go test -race -count=1 -run XXX_none . >/dev/null 2>&1; then
    echo "race detector:"
    go test -race -count=1 . ./otlp
  else
    echo "note: the race detector is unavailable here (needs cgo and a C compiler); skipped"
  fi
fi

if [ ! -x "$bin" ]; then
  echo "FAIL: $bin not found: build the scheduler (cargo build) or set SWITCHYARD_BIN"
  exit 1
fi

# check_report JSON RC CLAUSES...: prints the kit's JSON report and checks that no
# clause failed, that each of CLAUSES passed and that the kit exited 0.
check_report() {
  python3 - "$@" <<'PY'
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
  echo "PASS: conformance $(basename "$1" .json)"
}

# free_port: a TCP port on 127.0.0.1 that is free now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# conformance NAME BINARY CLUSTER CLAUSES...: runs the kit against the sidecar and
# checks that no clause failed and that each of CLAUSES passed. The sidecar gets
# the environment of sidecar_env (VAR=value items), the kit the arguments of
# kit_args (both empty unless set).
sidecar_env=()
kit_args=()
conformance() {
  local name="$1" sidecar="$2" cluster="$3"
  shift 3
  local sock="$work/$name.sock"
  step "conformance: $name ($cluster)${kit_args[*]:+ ${kit_args[*]}}"
  env ${sidecar_env[@]+"${sidecar_env[@]}"} "$sidecar" --listen "unix://$sock" >"$work/$name.log" 2>&1 &
  pids+=("$!")
  local i
  for i in $(seq 1 100); do
    "$sidecar" --listen "unix://$sock" --probe >/dev/null 2>&1 && break
    sleep 0.1
  done
  local rc=0
  "$bin" conformance "unix://$sock" --cluster "$cluster" ${kit_args[@]+"${kit_args[@]}"} -o json >"$work/$name.json" || rc=$?
  check_report "$work/$name.json" "$rc" "$@"
}

# conformance_tls NAME BINARY CLUSTER CLAUSES...: serves the sidecar on
# https://127.0.0.1:<free port> with mutual TLS (tests/fixtures/tls: the server's
# certificate, client certificates from ca.crt required), runs the kit over TLS with
# the client certificate and checks CLAUSES as conformance does; then checks that
# the kit without a client certificate is refused (exit 1, H1 FAIL).
conformance_tls() {
  local name="$1" sidecar="$2" cluster="$3"
  shift 3
  local tls="$repo/tests/fixtures/tls"
  local -a tls_env=(SWITCHYARD_PLUGIN_TLS_CERT="$tls/server.crt" SWITCHYARD_PLUGIN_TLS_KEY="$tls/server.key"
    SWITCHYARD_PLUGIN_TLS_CLIENT_CA="$tls/ca.crt")
  local -a kit=(--tls-ca "$tls/ca.crt" --tls-server-name localhost --cluster "$cluster" -o json)
  step "conformance over mutual TLS: $name ($cluster)"
  local addr="" pid="" i
  # The port is free when chosen but may be taken before the sidecar binds it: then
  # the sidecar exits, and another port is tried.
  for _ in 1 2 3; do
    addr="https://127.0.0.1:$(free_port)"
    env "${tls_env[@]}" "$sidecar" --listen "$addr" >"$work/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    for i in $(seq 1 100); do
      env "${tls_env[@]}" "$sidecar" --listen "$addr" --probe >/dev/null 2>&1 && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && break
    wait "$pid" || true
    unset 'pids[${#pids[@]}-1]'
    pid=""
  done
  if [ -z "$pid" ]; then
    cat "$work/$name.log"
    echo "FAIL: $name could not serve on https://127.0.0.1 (three free ports tried)"
    exit 1
  fi
  echo "serving on $addr"
  local rc=0
  "$bin" conformance "$addr" "${kit[@]}" --tls-cert "$tls/client.crt" --tls-key "$tls/client.key" \
    >"$work/$name.json" || rc=$?
  check_report "$work/$name.json" "$rc" "$@"

  step "mutual TLS: the kit without a client certificate is refused"
  rc=0
  "$bin" conformance "$addr" "${kit[@]}" >"$work/$name-nocert.json" || rc=$?
  python3 - "$work/$name-nocert.json" "$rc" <<'PY'
import json, sys
path, rc = sys.argv[1], int(sys.argv[2])
h1 = next(o for o in json.load(open(path))["outcomes"] if o["clause"] == "H1")
print(f'{h1["verdict"].upper():4} H1   {h1["detail"].splitlines()[0] if h1["detail"] else ""}')
if rc != 1 or h1["verdict"] != "fail":
    print(f"FAIL: expected the kit to exit 1 with H1 FAIL, got exit status {rc} and H1 {h1['verdict']}")
    sys.exit(1)
print("ok: refused without a client certificate (kit exit status 1)")
PY
  echo "PASS: conformance $name refuses a client without a certificate"
}

conformance accelerator "$work/accelerator" "$repo/examples/conformance/accelerator.yaml" \
  H1 H2 H3 S1 S2 R1 R2 R3 R4 R5 R6 F1 F2 F3 F4 F5 F6 F7 F8 SC1 SC2 SC3 HL1
conformance tenantquota "$work/tenantquota" "$here/examples/tenantquota/cluster.yaml" \
  H1 H2 H3 S1 S2 R1 R2 R3 R4 R5 R6 P1 F1 F2 F4 F5 F8 Q1 E1 X1 HL1
conformance racklocality "$work/racklocality" "$here/examples/racklocality/cluster.yaml" \
  H1 H2 H3 S1 S2 R1 R2 R3 R4 R5 R6 F2 SC1 SC2 SC4 L2 HL1
# T1: the Accelerator exports a span per traced call over OTLP/gRPC; the kit runs the
# OTLP receiver and checks each span's parent is the call's traceparent.
otlp_port="$(free_port)"
sidecar_env=(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$otlp_port" OTEL_BSP_SCHEDULE_DELAY=200)
kit_args=(--otlp-listen "127.0.0.1:$otlp_port")
conformance accelerator-otlp "$work/accelerator" "$repo/examples/conformance/accelerator.yaml" \
  H1 H2 H3 S1 S2 R1 R2 R3 R4 R5 R6 F1 F2 F3 F4 F5 F6 F7 F8 SC1 SC2 SC3 HL1 T1
sidecar_env=()
kit_args=()
conformance_tls accelerator-tls "$work/accelerator" "$repo/examples/conformance/accelerator.yaml" \
  H1 H2 H3 S1 S2 R1 R2 R3 R4 R5 R6 F1 F2 F3 F4 F5 F6 F7 F8 SC1 SC2 SC3 HL1

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
echo "PASS: every sidecar stopped cleanly on SIGTERM and removed its socket"
echo
echo "ok: Go plugin SDK, every check passed"
