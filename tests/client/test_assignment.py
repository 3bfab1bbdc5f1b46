"""Assignment diffing: what a worker revokes and starts when a new assignment arrives."""

from __future__ import annotations

import pytest

from assignor.cluster import MemberAssignment
from assignor.model import HostInfo, InvalidInput, TaskId
from client.assignment import EMPTY_ASSIGNMENT, diff

T1, T2, T3, T4 = (TaskId(0, p) for p in range(1, 5))


@pytest.mark.parametrize(("previous", "current", "expected"), [
    pytest.param(
        EMPTY_ASSIGNMENT, MemberAssignment(1, active=(T1, T3), standby=(T2,)),
        dict(revoked_active=(), assigned_active=(T1, T3), revoked_standby=(), assigned_standby=(T2,), released=()),
        id="first-assignment"),
    pytest.param(
        # KIP-441 Scaling Out, I1: T1,T3 active + T2 standby -> T1 active + T2 standby
        MemberAssignment(2, active=(T1, T3), standby=(T2,)), MemberAssignment(3, active=(T1,), standby=(T2,)),
        dict(revoked_active=(T3,), assigned_active=(), revoked_standby=(), assigned_standby=(), released=(T3,)),
        id="kip441-scale-out-i1-gives-up-t3"),
    pytest.param(
        # KIP-441 Scaling Out, I3: warm-ups T1,T3 -> active T3, standby T1
        MemberAssignment(2, standby=(T1, T3), warmup=frozenset({T1, T3})), MemberAssignment(3, active=(T3,), standby=(T1,)),
        dict(revoked_active=(), assigned_active=(T3,), revoked_standby=(T3,), assigned_standby=(), released=()),
        id="kip441-scale-out-i3-warmup-promoted"),
    pytest.param(
        MemberAssignment(4, active=(T4,)), MemberAssignment(5, standby=(T4,)),
        dict(revoked_active=(T4,), assigned_active=(), revoked_standby=(), assigned_standby=(T4,), released=()),
        id="active-demoted-to-standby"),
])
def test_diff(previous, current, expected):
    change = diff(previous, current)
    assert {name: getattr(change, name) for name in expected} == expected


def test_warmups_are_flagged_and_travel_as_standbys():
    current = MemberAssignment(2, active=(T2,), standby=(T1, T3), warmup=frozenset({T3}), next_rebalance_ms=1234)
    change = diff(EMPTY_ASSIGNMENT, current)
    assert change.assigned_standby == (T1, T3)
    assert change.warmups == (T3,)
    assert current.configured_standby == (T1,)
    assert change.next_rebalance_ms == 1234


def test_unchanged_notices_a_warmup_becoming_a_standby():
    before = MemberAssignment(2, standby=(T1,), warmup=frozenset({T1}))
    assert not diff(before, MemberAssignment(3, standby=(T1,))).unchanged
    assert diff(before, MemberAssignment(3, standby=(T1,), warmup=frozenset({T1}))).unchanged


@pytest.mark.parametrize("text", ["", "host", "host:", ":80", "h:0", "h:70000", "h:x"])
def test_host_info_rejects_bad_endpoints(text):
    with pytest.raises(InvalidInput, match="endpoint"):
        HostInfo.parse(text)


def test_host_info_parses_ipv6_style_last_colon():
    assert HostInfo.parse("::1:8080") == HostInfo("::1", 8080)
