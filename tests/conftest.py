"""Shared fixtures: the KIP worked scenarios copied from shared/scenarios (read-only inputs), and a
real PostgreSQL server for the tests of the PostgreSQL store."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def load_worked_scenarios() -> list[tuple[str, dict]]:
    return [(path.stem, json.loads(path.read_text())) for path in sorted((FIXTURES / "scenarios").glob("*.json"))]


# ---- a real PostgreSQL for the store tests (tests/pg_server.py) ----------------------------------

_databases = itertools.count(1)


@pytest.fixture(scope="session")
def postgres_server():
    """One throwaway PostgreSQL server on 127.0.0.1 for the session. Skips only where no server
    can be started at all; scripts/test.sh (CI) sets REMOTE_LEADER_REQUIRE_POSTGRES=1, which
    turns that skip into a failure."""
    from tests.pg_server import PostgresUnavailable, ThrowawayPostgres

    try:
        server = ThrowawayPostgres().start()
    except PostgresUnavailable as error:
        message = f"PostgreSQL cannot be started here ({error}); scripts/install_postgres.sh installs it"
        if os.environ.get("REMOTE_LEADER_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    yield server
    server.stop()


@pytest.fixture
def postgres_dsn(postgres_server) -> str:
    """A fresh, empty database on the session's server for one test."""
    import psycopg

    name = f"t{os.getpid()}_{next(_databases)}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return postgres_server.dsn.rsplit("/", 1)[0] + f"/{name}"
