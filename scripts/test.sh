#!/usr/bin/env bash
# README's test command: install, run every check in scripts/checks/, then the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bash scripts/install_postgres.sh  # a throwaway PostgreSQL for the store tests
bash scripts/install_chromium.sh  # headless Chromium for the browser tests of the live page and report
export PATH="$PWD/.venv/bin:$PATH"
# The PostgreSQL tests must run here, never skip (tests/conftest.py).
export REMOTE_LEADER_REQUIRE_POSTGRES=1
# ... and so must the browser tests (tests/server/test_live_page_browser.py).
export REMOTE_LEADER_REQUIRE_BROWSER=1
for check in scripts/checks/*.sh; do
  [ -e "$check" ] || continue
  echo "== check: $check"
  bash "$check"
done
echo "== tests"
python -m pytest -q "$@"
