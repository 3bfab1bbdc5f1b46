#!/usr/bin/env bash
# The PostgreSQL server binaries that the tests and benchmarks of the PostgreSQL store start a
# throwaway server from (tests/pg_server.py). Idempotent: does nothing when initdb is present.
# The service itself never needs them: it connects to a database given by --store.
set -euo pipefail
if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install_postgres.sh: PostgreSQL server binaries are missing and this is not root: install the 'postgresql' package" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# The Debian package also creates the 'postgres' user that initdb/pg_ctl run as.
apt-get install -y -qq postgresql >/dev/null
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
