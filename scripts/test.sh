#!/usr/bin/env bash
# README's test command: install, run every check in scripts/checks/, then the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
for check in scripts/checks/*.sh; do
  [ -e "$check" ] || continue
  echo "== check: $check"
  bash "$check"
done
echo "== tests"
python -m pytest -q "$@"
