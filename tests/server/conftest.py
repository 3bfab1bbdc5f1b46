"""Fixtures for the server tests: a real server per test, on 127.0.0.1 port 0, fake clock."""

from __future__ import annotations

import pytest

from server.observability import configure_logging
from tests.server.harness import running_server


@pytest.fixture(autouse=True, scope="session")
def _quiet_logs():
    configure_logging("warning", "json")


@pytest.fixture
async def leader(tmp_path):
    async with running_server(tmp_path / "state") as running:
        yield running
