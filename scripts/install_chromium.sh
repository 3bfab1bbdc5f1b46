#!/usr/bin/env bash
# Headless Chromium and its chromedriver for the browser tests of the live page and the what-if
# report (tests/server/test_live_page_browser.py). Idempotent: does nothing when both are present.
# The service never needs them.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install_chromium.sh: chromium or chromedriver is missing and this is not root: install Debian's 'chromium' and 'chromium-driver'" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium chromium-driver >/dev/null
command -v chromium >/dev/null && command -v chromedriver >/dev/null
