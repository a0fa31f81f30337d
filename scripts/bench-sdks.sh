#!/usr/bin/env bash
# Measures what each plugin SDK costs: `switchyard bench` with the in-process
# baseline, then the Accelerator example plugin of every SDK (Rust, Python, Go,
# TypeScript) as a sidecar over a Unix socket, added to the profile. Prints the
# bench table (pods/s, calls per pod, wire bytes and CPU µs per pod).
# With --racks (first): the RackLocality example (a cluster-aware plugin, the
# topology example) of the Go and Python SDKs instead, on
# examples/workloads/rack-locality.yaml (rack-go, rack-python).
#
#   scripts/bench-sdks.sh [--racks] [switchyard bench options, e.g. --repeat 3 ...]
#
# An SDK whose toolchain is missing (go, node) is left out with a note.
set -euo pipefail
cd "$(dirname "$0")/.."
racks=0
if [[ "${1:-}" == --racks ]]; then
  racks=1
  shift
fi

echo "== build (release)" >&2
cargo build --release --workspace --bins --examples --quiet

source scripts/pyenv.sh
if ((racks)); then
  sdks=(--rack-sidecar "python=$PYENV_PYTHON $PWD/plugin-sdk/python/examples/racklocality.py")
else
  sdks=(--sdk-sidecar "rust=$PWD/target/release/examples/accelerator"
        --sdk-sidecar "python=$PYENV_PYTHON $PWD/plugin-sdk/python/examples/accelerator.py")
fi

if command -v go >/dev/null 2>&1; then
  gowork="$(mktemp -d "${TMPDIR:-/tmp}/switchyard-bench-go.XXXXXX")"
  trap 'rm -rf "$gowork"' EXIT
  module=github.com/switchyard-sched/switchyard/plugin-sdk/go
  mkdir -p "$gowork/gopath/src/$(dirname "$module")"
  ln -s "$PWD/plugin-sdk/go" "$gowork/gopath/src/$module"
  (cd "$gowork/gopath/src/$module" &&
    export GO111MODULE=off GOPATH="$gowork/gopath:/usr/share/gocode" GOFLAGS= &&
    go build -o "$gowork/accelerator" ./examples/accelerator &&
    go build -o "$gowork/racklocality" ./examples/racklocality)
  if ((racks)); then
    sdks=(--rack-sidecar "go=$gowork/racklocality" "${sdks[@]}")
  else
    sdks+=(--sdk-sidecar "go=$gowork/accelerator")
  fi
else
  echo "note: go not found: the Go SDK is left out" >&2
fi

if ((racks)); then
  : # RackLocality is an example of the Go and Python SDKs
elif command -v npm >/dev/null 2>&1; then
  (cd plugin-sdk/node && npm ci --silent --no-audit --no-fund >/dev/null)
  sdks+=(--sdk-sidecar "node=node $PWD/plugin-sdk/node/examples/accelerator.js")
else
  echo "note: node/npm not found: the TypeScript SDK is left out" >&2
fi

target/release/switchyard bench --runs in-process "${sdks[@]}" "$@"
