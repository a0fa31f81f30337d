#!/usr/bin/env bash
# Runs every test of the project: formatting and lint checks, unit tests, scenario
# tests (manifests in, placements out) and end-to-end tests that start the real
# binaries. This is what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings

echo "== build binaries (end-to-end tests start them)"
cargo build --workspace --bins --quiet

echo "== Python sidecar environment"
source scripts/pyenv.sh
# End-to-end tests start the Python sidecar with this interpreter.
export SWITCHYARD_PYTHON="$PYENV_PYTHON"

echo "== Python sidecar self-test"
"$PYENV_PYTHON" plugins/python-energy/test_sidecar.py

echo "== deploy/ manifests (offline schema validation)"
scripts/validate-deploy.sh

echo "== tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast
else
  cargo test --workspace --no-fail-fast
fi
