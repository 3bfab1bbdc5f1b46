#!/usr/bin/env bash
# README's main-job command: install, then run the main job on embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/remote-leader assign examples/scale_out.json --explain --indent 2
