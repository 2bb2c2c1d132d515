#!/usr/bin/env bash
# Make the device machine ready for the scripts beside this one (it reaches no registry):
#   scripts/device/prepare.sh WHEELS_DIR[:WHEELS_DIR...] REQUIREMENT...
# installs REQUIREMENTs into python3's environment (the device's PyTorch venv) from the wheels
# carried in the WHEELS_DIRs, offline; what is already there and satisfies them is kept. Made here
# with `pip download -d DIR --python-version 3.12 --only-binary=:all: --platform
# manylinux2014_x86_64 ... REQUIREMENT...` (the device runs Python 3.12). The CLI needs its
# pyproject dependencies; `notebook` needs `jupyterlab` in the image's Python (on the device
# the container's /opt/torch is the device's own, mounted read-only).
set -euo pipefail
links=()
IFS=: read -r -a dirs <<<"${1:?WHEELS_DIR}"
for d in "${dirs[@]}"; do links+=(--find-links "$d"); done
shift
py=${PYTHON:-python3}
if ! "$py" -m pip --version >/dev/null 2>&1; then
    "$py" -m ensurepip --upgrade >/dev/null 2>&1 || true
fi
if "$py" -m pip --version >/dev/null 2>&1; then
    "$py" -m pip install -q --disable-pip-version-check --no-index "${links[@]}" "$@"
elif command -v uv >/dev/null 2>&1; then
    uv pip install -q --python "$(command -v "$py")" --no-index "${links[@]}" "$@"
else
    echo "prepare.sh: neither pip nor uv for $py" >&2
    exit 1
fi
"$py" -c 'import sys; print("prepared:", sys.executable, sys.version.split()[0])'
