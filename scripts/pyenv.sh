# Sourced by scripts/demo.sh and scripts/test.sh: a Python virtual environment in
# target/pyenv with the Python sidecar's dependencies (grpcio, grpcio-tools, protobuf
# from PyPI), created once and refreshed when requirements.txt changes. Sets
# PYENV_PYTHON.
req=plugins/python-energy/requirements.txt
venv=target/pyenv
PYENV_PYTHON="$PWD/$venv/bin/python3"
if [[ ! -x "$PYENV_PYTHON" || "$req" -nt "$venv/.installed" ]]; then
  echo "setting up $venv (grpcio from PyPI) ..." >&2
  mkdir -p target
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
  touch "$venv/.installed"
fi
export PYENV_PYTHON
