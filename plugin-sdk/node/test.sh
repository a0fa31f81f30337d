#!/usr/bin/env bash
# Checks the Node.js plugin SDK: installs its dependencies (npm ci), checks that the
# committed dist/ is what src/ compiles to, type-checks the examples against the
# shipped declarations, runs the unit tests, then serves each example on a Unix
# socket and runs `switchyard conformance` against it, requiring the clauses each
# exercises to PASS and none to FAIL.
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
node --test test/

if [[ ! -x "$bin" ]]; then
  echo "$bin not found: build it (cargo build) or set SWITCHYARD_BIN" >&2
  exit 1
fi

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
  node - "$tmp/$name.json" "$rc" "$@" <<'JS'
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
  H1 H2 H3 S1 R1 R2 R3 R4 R5 R6 F1 F2 F3 F4 F5 F6 F7 F8 SC1 SC2 SC3 HL1
conformance tenant-quota tenant-quota.js "$repo/examples/conformance/tenant-quota.yaml" \
  H1 H2 H3 S1 R1 R2 R3 R4 R5 R6 P1 F1 F2 F4 F5 F8 Q1 E1 X1 HL1

step "all checks passed"
