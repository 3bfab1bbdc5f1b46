#!/usr/bin/env bash
# Style and architecture: ruff, and the import-linter contracts in pyproject.toml.
set -euo pipefail
ruff check .
lint-imports
