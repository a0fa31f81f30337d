#!/usr/bin/env bash
# The demo on a fresh machine: builds the scheduler and its sidecar plugins (release),
# installs the Python sidecar's dependencies (grpcio, from PyPI) into target/pyenv,
# then runs `switchyard simulate` on the built-in demo cluster, which starts the
# Coscheduling (Rust) and EnergyAware (Python) sidecars itself. Extra arguments go to
# `switchyard simulate`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pyenv.sh
cargo build --release --workspace --bins --quiet
SWITCHYARD_PYTHON="$PYENV_PYTHON" exec target/release/switchyard simulate "$@"
