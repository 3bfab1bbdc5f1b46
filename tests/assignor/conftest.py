"""Fixtures for every assignor test."""

import pytest

from assignor import warm_start


@pytest.fixture(autouse=True)
def _warm_start_at_any_size(monkeypatch):
    """The warm start (``assignor.warm_start``) for every group whose shape qualifies, however
    small: production skips it below ``warm_start.MIN_ARCS`` only to spare loading scipy, and the
    per-task optimum and convergence tests must see it complete on the groups where conflicts
    are likeliest."""
    monkeypatch.setattr(warm_start, "MIN_ARCS", 0)
