# Sourced by scripts/demo.sh and scripts/test.sh: a Python virtual environment in
# target/pyenv with the Python plugin SDK (plugin-sdk/python, installed with pip as a
# plugin author installs it: grpcio, grpcio-tools, protobuf from PyPI) and the
# EnergyAware sidecar's extras (OpenTelemetry), created once and refreshed when the
# requirements or the SDK change. Sets PYENV_PYTHON.
req=plugins/python-energy/requirements.txt
sdk=plugin-sdk/python
venv=target/pyenv
PYENV_PYTHON="$PWD/$venv/bin/python3"
if [[ ! -x "$PYENV_PYTHON" || "$req" -nt "$venv/.installed" \
  || -n "$(find "$sdk" proto -newer "$venv/.installed" -not -path '*/__pycache__*' -not -path '*/build/*' -not -path '*.egg-info*' 2>/dev/null | head -1)" ]]; then
  echo "setting up $venv (the Python plugin SDK, grpcio from PyPI) ..." >&2
  mkdir -p target
  [[ -x "$PYENV_PYTHON" ]] || python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "./$sdk"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "./$sdk"
  touch "$venv/.installed"
fi
export PYENV_PYTHON
