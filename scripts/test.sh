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
cargo build --workspace --bins --examples --quiet

echo "== Python environment (the Python plugin SDK, installed with pip)"
source scripts/pyenv.sh
# End-to-end tests start the Python sidecar with this interpreter.
export SWITCHYARD_PYTHON="$PYENV_PYTHON"

echo "== Python plugin SDK unit tests"
"$PYENV_PYTHON" -m unittest discover -s plugin-sdk/python/tests

echo "== Python sidecar self-test"
"$PYENV_PYTHON" plugins/python-energy/test_sidecar.py

echo "== Go plugin SDK (unit tests, examples through the conformance kit; skips without go)"
plugin-sdk/go/test.sh

echo "== TypeScript plugin SDK (npm ci, dist/ current, types, unit tests, examples through the conformance kit)"
plugin-sdk/node/test.sh

echo "== deploy/ manifests (offline schema validation)"
scripts/validate-deploy.sh

echo "== real Kubernetes control plane"
# tests/control_plane.rs and tests/k8s_metrics_auth.rs start it (each its own, on
# its own ports); without it they say SKIPPED and pass.
k8s_dir="${K8S_CONTROL_PLANE_DIR:-$(cd .. && pwd)/shared/k8s}"
if [[ -f "$k8s_dir/control-plane.sh" ]]; then
  echo "found at $k8s_dir: the control-plane tests run against it"
else
  echo "absent ($k8s_dir): the control-plane tests will skip (set K8S_CONTROL_PLANE_DIR)"
fi

echo "== tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast
else
  cargo test --workspace --no-fail-fast
fi
