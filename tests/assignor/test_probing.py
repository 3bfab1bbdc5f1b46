"""The probing policy (``assignor.probing``), as a table of KIP-441 "Probing Rebalances" cases
and the lag-driven early probe of docs/interfaces.md: integers in, integers compared."""

from __future__ import annotations

from types import MappingProxyType

from assignor.lag import RUNNING as LATEST
from assignor.lag import UNKNOWN, Lag
from assignor.model import (
    AssignmentConfig,
    AssignmentResult,
    ClientAssignment,
    Reason,
    ReasonCode,
    Role,
    TaskId,
)
from assignor.probing import Probe, ProbingSettings, Trigger, early_probe, followup_probe, warming_replicas

T0, T1 = TaskId(0, 0), TaskId(0, 1)
CONFIG = AssignmentConfig(acceptable_recovery_lag=10_000, probing_rebalance_interval_ms=600_000)
SETTINGS = ProbingSettings(early_probe=True, min_probe_interval_ms=60_000)
INTERVAL_PROBE = Probe(600_000, Trigger.PROBING_REBALANCE)


def result(probing=True, warmup=(), standby_as_warmup=()) -> AssignmentResult:
    """Client a runs T0 and T1; b warms up ``warmup`` and holds standbys doubling as warm-ups."""
    clients = {"a": ClientAssignment(active=(T0, T1)),
               "b": ClientAssignment(standby=tuple(standby_as_warmup), warmup=tuple(warmup))}
    reasons = tuple(Reason(t, "b", Role.STANDBY, ReasonCode.STANDBY_AS_WARMUP) for t in standby_as_warmup)
    return AssignmentResult(MappingProxyType(clients), probing, 600_000 if probing else None, reasons)


def probe_at(outcome, lags, now_ms=5_000, last_ms=0, scheduled=INTERVAL_PROBE,
             settings=SETTINGS):
    return early_probe(outcome, {"b": lags}, CONFIG.acceptable_recovery_lag, settings, now_ms, last_ms, scheduled)


def test_a_follow_up_only_after_an_assignment_that_needs_one():
    assert followup_probe(result(), CONFIG, 1_000) == Probe(601_000, Trigger.PROBING_REBALANCE)
    assert followup_probe(result(probing=False), CONFIG, 1_000) is None


def test_warming_replicas_are_warm_ups_and_standbys_doubling_as_warm_ups():
    assert warming_replicas(result(warmup=[T1], standby_as_warmup=[T0])) == [("b", T0), ("b", T1)]


def test_the_early_probe_waits_for_every_warming_replica_and_the_minimum_interval():
    outcome = result(warmup=[T0, T1])
    assert probe_at(outcome, {T0: Lag.behind(10_000)}) is None  # T1 has reported nothing
    assert probe_at(outcome, {T0: Lag.behind(10_000), T1: UNKNOWN}) is None
    assert probe_at(outcome, {T0: Lag.behind(10_000), T1: Lag.behind(10_001)}) is None
    ready = {T0: Lag.behind(10_000), T1: LATEST}
    assert probe_at(outcome, ready) == Probe(60_000, Trigger.EARLY_PROBE)  # not before last + 60 s
    assert probe_at(outcome, ready, now_ms=70_000) == Probe(70_000, Trigger.EARLY_PROBE)


def test_no_early_probe_without_warming_replicas_when_off_or_when_not_sooner():
    ready = {T0: Lag.behind(0)}
    assert probe_at(result(), {}) is None  # nothing warms up: nothing to wait for
    assert probe_at(result(warmup=[T0]), ready, settings=ProbingSettings(early_probe=False)) is None
    assert probe_at(result(probing=False, warmup=[T0]), ready) is None
    assert probe_at(result(warmup=[T0]), ready, scheduled=Probe(60_000, Trigger.EARLY_PROBE)) is None
    assert probe_at(result(warmup=[T0]), ready, scheduled=None) == Probe(60_000, Trigger.EARLY_PROBE)


def test_membership_triggers():
    assert {t for t in Trigger if t.membership} == {
        Trigger.MEMBER_JOINED, Trigger.MEMBER_LEFT, Trigger.SESSION_EXPIRED, Trigger.MEMBER_REJOINED}
