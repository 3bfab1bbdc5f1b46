#!/usr/bin/env bash
# README's main-job command: install, then run the live demo on loopback (docs/client.md):
# a remote-leader server and simulated workers playing KIP-441's Scaling Out and Scaling In
# scenarios. Exits 0 once both settled as the KIP says, within about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/remote-leader demo "$@"
