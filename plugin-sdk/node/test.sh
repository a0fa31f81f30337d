#!/usr/bin/env bash
# Checks the Node.js plugin SDK: installs its dependencies (npm ci), checks that the
# committed dist/ is what src/ compiles to, type-checks the examples against the
# shipped declarations, runs the unit tests, then serves each example on a Unix
# socket and runs `switchyard conformance` against it, requiring the clauses each
# exercises to PASS and none to FAIL; then serves the Accelerator on
# https://127.0.0.1:<free port> with mutual TLS (tests/fixtures/tls) and runs the kit
# over TLS, with and without a client certificate.
#   plugin-sdk/node/test.sh            (SWITCHYARD_BIN: the switchyard binary,
#                                       default <repo>/target/debug/switchyard)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=${SWITCHYARD_BIN:-$repo/target/debug/switchyard}
cd "$here"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-node-sdk.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }

step "npm ci"
npm ci --no-audit --no-fund --loglevel=error

step "dist/ is current (src/ compiled)"
npx --no-install tsc -p tsconfig.json --outDir "$tmp/dist"
if ! diff -r "$tmp/dist" dist >"$tmp/dist.diff"; then
  head -40 "$tmp/dist.diff"
  echo "dist/ differs from what src/ compiles to: run 'npm run build' and commit dist/" >&2
  exit 1
fi
echo "ok"

step "type check (src, and the JavaScript examples against dist/*.d.ts)"
npx --no-install tsc -p tsconfig.json --noEmit
npx --no-install tsc -p examples/tsconfig.json
echo "ok"

step "unit tests"
# The harness tests convert manifests with the scheduler's binary.
SWITCHYARD_BIN="$bin" node --test test/

if [[ ! -x "$bin" ]]; then
  echo "$bin not found: build it (cargo build) or set SWITCHYARD_BIN" >&2
  exit 1
fi

# check_report JSON RC CLAUSES...: prints the kit's JSON report and requires no FAIL,
# each of CLAUSES to PASS and the kit to have exited 0.
check_report() {
  node - "$@" <<'JS'
const [file, rc, ...required] = process.argv.slice(2);
const report = JSON.parse(require('fs').readFileSync(file, 'utf8'));
const by = Object.fromEntries(report.outcomes.map((o) => [o.clause, o]));
let bad = 0;
for (const o of report.outcomes) {
  const mark = { pass: 'PASS', fail: 'FAIL', skip: 'SKIP' }[o.verdict] ?? o.verdict;
  console.log(`${mark.padEnd(4)} ${o.clause.padEnd(4)} ${o.verdict === 'pass' ? '' : o.detail.split('\n')[0]}`);
  if (o.verdict === 'fail') bad++;
}
for (const c of required) {
  if (by[c]?.verdict !== 'pass') {
    console.log(`required clause ${c} did not pass`);
    bad++;
  }
}
const n = (v) => report.outcomes.filter((o) => o.verdict === v).length;
console.log(`${n('pass')} passed, ${n('fail')} failed, ${n('skip')} not exercised; kit exit status ${rc}`);
if (bad > 0 || rc !== '0') process.exit(1);
JS
  echo "PASS: conformance $(basename "$1" .json)"
}

# conformance NAME SCRIPT CLUSTER CLAUSES...: serves examples/SCRIPT, runs the kit,
# requires no FAIL and each of CLAUSES to PASS, then stops the sidecar with SIGTERM
# and requires a clean exit (status 0, socket removed).
conformance() {
  local name=$1 script=$2 cluster=$3
  shift 3
  local sock="$tmp/$name.sock"
  step "conformance: examples/$script (--cluster ${cluster#"$repo"/})"
  node "examples/$script" --listen "unix://$sock" 2>"$tmp/$name.log" &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 100); do
    [[ -S "$sock" ]] && break
    sleep 0.1
  done
  node "examples/$script" --probe --listen "unix://$sock"
  local rc=0
  "$bin" conformance "unix://$sock" --cluster "$cluster" -o json >"$tmp/$name.json" || rc=$?
  check_report "$tmp/$name.json" "$rc" "$@"
  kill -TERM "$pid"
  local status=0
  wait "$pid" || status=$?
  if [[ $status -ne 0 || -e "$sock" ]]; then
    cat "$tmp/$name.log" >&2
    echo "examples/$script did not shut down cleanly on SIGTERM (status $status)" >&2
    exit 1
  fi
}

conformance accelerator accelerator.js "$repo/examples/conformance/accelerator.yaml" \
  H1 H2 H3 S1 S2 R1 R2 R3 R4 R5 R6 F1 F2 F3 F4 F5 F6 F7 F8 SC1 SC2 SC3 HL1
conformance tenant-quota tenant-quota.js "$repo/examples/conformance/tenant-quota.yaml" \
  H1 H2 H3 S1 S2 R1 R2 R3 R4 R5 R6 P1 F1 F2 F4 F5 F8 Q1 E1 X1 HL1

# conformance_tls NAME SCRIPT CLUSTER CLAUSES...: serves examples/SCRIPT on
# https://127.0.0.1:<free port> with mutual TLS (tests/fixtures/tls: the server's
# certificate, client certificates from ca.crt required), runs the kit over TLS with
# the client certificate and checks CLAUSES as conformance does, checks that the kit
# without a client certificate is refused (exit 1, H1 FAIL), then requires a clean
# exit on SIGTERM.
conformance_tls() {
  local name=$1 script=$2 cluster=$3
  shift 3
  local tls="$repo/tests/fixtures/tls"
  local -a tls_env=(SWITCHYARD_PLUGIN_TLS_CERT="$tls/server.crt" SWITCHYARD_PLUGIN_TLS_KEY="$tls/server.key"
    SWITCHYARD_PLUGIN_TLS_CLIENT_CA="$tls/ca.crt")
  local -a kit=(--tls-ca "$tls/ca.crt" --tls-server-name localhost --cluster "$cluster" -o json)
  step "conformance over mutual TLS: examples/$script (--cluster ${cluster#"$repo"/})"
  local addr pid=''
  # The port is free when chosen but may be taken before the sidecar binds it: then
  # the sidecar exits, and another port is tried.
  for _ in 1 2 3; do
    addr="https://127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    env "${tls_env[@]}" node "examples/$script" --listen "$addr" 2>"$tmp/$name.log" &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 50); do
      env "${tls_env[@]}" node "examples/$script" --probe --listen "$addr" 2>/dev/null && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && break
    wait "$pid" || true
    pid=''
  done
  if [[ -z $pid ]]; then
    cat "$tmp/$name.log" >&2
    echo "examples/$script could not serve on https://127.0.0.1 (three free ports tried)" >&2
    exit 1
  fi
  env "${tls_env[@]}" node "examples/$script" --probe --listen "$addr"
  echo "serving on $addr"
  local rc=0
  "$bin" conformance "$addr" "${kit[@]}" --tls-cert "$tls/client.crt" --tls-key "$tls/client.key" \
    >"$tmp/$name.json" || rc=$?
  check_report "$tmp/$name.json" "$rc" "$@"

  step "mutual TLS: the kit without a client certificate is refused"
  rc=0
  "$bin" conformance "$addr" "${kit[@]}" >"$tmp/$name-nocert.json" || rc=$?
  node - "$tmp/$name-nocert.json" "$rc" <<'JS'
const [file, rc] = process.argv.slice(2);
const h1 = JSON.parse(require('fs').readFileSync(file, 'utf8')).outcomes.find((o) => o.clause === 'H1');
console.log(`${h1.verdict.toUpperCase().padEnd(4)} H1   ${h1.detail.split('\n')[0]}`);
if (rc !== '1' || h1.verdict !== 'fail') {
  console.log(`expected the kit to exit 1 with H1 FAIL, got exit status ${rc} and H1 ${h1.verdict}`);
  process.exit(1);
}
console.log('ok: refused without a client certificate (kit exit status 1)');
JS
  echo "PASS: conformance $name refuses a client without a certificate"
  kill -TERM "$pid"
  local status=0
  wait "$pid" || status=$?
  if [[ $status -ne 0 ]]; then
    cat "$tmp/$name.log" >&2
    echo "examples/$script did not shut down cleanly on SIGTERM (status $status)" >&2
    exit 1
  fi
}

conformance_tls accelerator-tls accelerator.js "$repo/examples/conformance/accelerator.yaml" \
  H1 H2 H3 S1 S2 R1 R2 R3 R4 R5 R6 F1 F2 F3 F4 F5 F6 F7 F8 SC1 SC2 SC3 HL1

step "all checks passed"
