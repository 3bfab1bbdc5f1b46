#!/usr/bin/env bash
# Create ./.venv (Python 3.11+) and install remote-leader with its extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[dev,pipeline]"
# An editable install leaves the sources uncompiled, and where PYTHONDONTWRITEBYTECODE is set
# (these machines set it) every process, each `python -m assignor` among them, compiled every
# module it imports again: about 0.14 s of a CLI call. Compiled here once, as pip does for a
# non-editable install (the Dockerfile's); a source edited later is compiled as before, its
# stale bytecode ignored (Python checks each file's timestamp and size).
.venv/bin/python -m compileall -q assignor server client pipeline remote_leader
