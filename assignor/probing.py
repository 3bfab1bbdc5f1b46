"""The probing policy: when the rebalance after an assignment is due, and when it may come early.

KIP-441 "Probing Rebalances": an assignment that moved work to replicas still restoring asks
for a follow-up rebalance (``followup_probe``); once balanced, none. Beyond the KIP, the
leader may probe *early*, as soon as every replica warming up for a move is within
``acceptable_recovery_lag``, but never sooner than ``min_probe_interval_ms`` after the last
rebalance: the KIP's "Rejected Alternatives" worry (rebalance storms) answered by deciding
centrally (``early_probe``). With no replica warming up there is nothing to wait for and no
early probe.

Pure, like the rest of the package: the caller passes the time and the lags. The server's
group state machine and the what-if simulator both decide here, in integer milliseconds
and integer offsets, so that a threshold is never missed by a rounding error.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from assignor.lag import MAX_LONG, Lag
from assignor.model import AssignmentConfig, AssignmentResult, ReasonCode, TaskId


class Trigger(enum.StrEnum):
    """Why a rebalance began: the rebalance log's ``trigger`` (docs/interfaces.md)."""

    MEMBER_JOINED = "member_joined"
    MEMBER_LEFT = "member_left"
    SESSION_EXPIRED = "session_expired"
    PROBING_REBALANCE = "probing_rebalance"
    EARLY_PROBE = "early_probe"
    TOPOLOGY_CHANGED = "topology_changed"
    CONFIG_CHANGED = "config_changed"
    MEMBER_REJOINED = "member_rejoined"
    RESTORED_MID_SYNC = "restored_mid_sync"

    @property
    def membership(self) -> bool:
        """A member came, went or came back (as opposed to a probe or a metadata change)."""
        return self in _MEMBERSHIP


_MEMBERSHIP = frozenset({Trigger.MEMBER_JOINED, Trigger.MEMBER_LEFT, Trigger.SESSION_EXPIRED, Trigger.MEMBER_REJOINED})


@dataclass(frozen=True, slots=True)
class ProbingSettings:
    """The leader's side of probing (server flags ``--early-probe``, ``--min-probe-interval-ms``)."""

    early_probe: bool = True
    min_probe_interval_ms: int = 60_000


@dataclass(frozen=True, slots=True)
class Probe:
    """A probing rebalance scheduled at ``at_ms``."""

    at_ms: int
    trigger: Trigger


def followup_probe(result: AssignmentResult, config: AssignmentConfig, now_ms: int) -> Probe | None:
    """KIP-441 "Probing Rebalances": one after an assignment that needs it, at the result's
    ``followup_rebalance_ms`` (else ``probing_rebalance_interval_ms``); none once balanced.
    The interval may be any long, as Kafka's config: the time stops at the largest one the
    wire's int64 carries (never, in practice) rather than overflow it."""
    if not result.probing_rebalance_needed:
        return None
    interval = result.followup_rebalance_ms or config.probing_rebalance_interval_ms
    return Probe(min(now_ms + interval, MAX_LONG), Trigger.PROBING_REBALANCE)


def warming_replicas(result: AssignmentResult) -> list[tuple[str, TaskId]]:
    """(client, task) of every replica placed to catch up for a move, sorted: the warm-ups, and
    standbys doubling as warm-ups (the assignor's STANDBY_AS_WARMUP reasons)."""
    replicas = {(client, task) for client, assignment in result.clients.items() for task in assignment.warmup}
    for reason in result.reasons:
        if reason.code == ReasonCode.STANDBY_AS_WARMUP and reason.client is not None:
            replicas.add((reason.client, reason.task))
    return sorted(replicas)


def early_probe(
    result: AssignmentResult,
    lags: Mapping[str, Mapping[TaskId, Lag]],
    acceptable_recovery_lag: int,
    settings: ProbingSettings,
    now_ms: int,
    last_rebalance_ms: int,
    scheduled: Probe | None,
) -> Probe | None:
    """The early probe the lags allow now, if it comes before the ``scheduled`` one; else None.

    Every warming replica must report a lag within ``acceptable_recovery_lag`` (``lags`` by
    client, as last reported); the probe is then due at once, but not before
    ``min_probe_interval_ms`` after the last rebalance.
    """
    if not settings.early_probe or not result.probing_rebalance_needed:
        return None
    warming = warming_replicas(result)
    if not warming:
        return None
    for client, task in warming:
        lag = lags.get(client, {}).get(task)
        if lag is None or not lag.within(acceptable_recovery_lag):
            return None
    at = max(now_ms, last_rebalance_ms + settings.min_probe_interval_ms)
    if scheduled is not None and scheduled.at_ms <= at:
        return None
    return Probe(at, Trigger.EARLY_PROBE)
