"""A lag: how far one client's state for one task is behind, and the KIP-441 rank defined on it.

KIP-441 "Rebalance Metadata": members report a lag per task with local state. It is one of
four things (scenario.md, "lags"):

- *running*: a restored active, processing ("latest" in JSON; KIP-535 reports it as lag 0);
- a number of *offsets* behind the changelog end, >= 0;
- *unknown*: the client has state of unknown size (better than none, never caught up);
- *no state*: nothing on disk; in a ``ClientState`` it is the task's absence from ``lags``.

Every edge turns its encoding into a ``Lag`` once (scenario JSON, the gRPC edge, the
simulator, the worker's lag sources); inside, lags are compared only through these methods.
On the wire (``TaskLag.lag``) running is -1 and unknown is -2 (``to_wire``, ``from_wire``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final

# "max long as a proxy" for an unknown changelog size, one above the largest lag a client may
# report, so that every reported lag ranks apart and before it (ranks are Python ints)
UNBOUNDED_OFFSETS: Final = 1 << 63
# Java's long (an int64 on the wire): the largest lag, offset count or interval a scenario may give
MAX_LONG: Final = (1 << 63) - 1
# The largest acceptable_recovery_lag: "max long". At this value every client is caught up on
# every task, even one whose changelog size is unknown.
MAX_ACCEPTABLE_RECOVERY_LAG: Final = MAX_LONG

_WIRE_RUNNING: Final = -1
_WIRE_UNKNOWN: Final = -2


class LagKind(enum.Enum):
    RUNNING = "latest"
    OFFSETS = "offsets"
    UNKNOWN = "unknown"
    NO_STATE = "no_state"


# The kinds as module globals: an enum member read through its class costs a descriptor call,
# and ranks are computed once per reported lag of every assignment.
_RUNNING, _OFFSETS, _UNKNOWN, _NO_STATE = LagKind.RUNNING, LagKind.OFFSETS, LagKind.UNKNOWN, LagKind.NO_STATE


@dataclass(frozen=True, slots=True)
class Lag:
    """One task's lag on one client: ``kind``, and ``offsets`` behind when that is the kind."""

    kind: LagKind
    offsets: int = 0

    @staticmethod
    def behind(offsets: int) -> Lag:
        """``offsets`` behind the changelog end (>= 0)."""
        if isinstance(offsets, bool) or not isinstance(offsets, int) or offsets < 0:
            raise ValueError(f"a lag in offsets must be an integer >= 0, got {offsets!r}")
        return Lag(_OFFSETS, offsets)

    @staticmethod
    def coerce(value: Lag | int) -> Lag:
        """A ``Lag`` as is; a plain integer as a number of offsets (never a sentinel)."""
        return value if isinstance(value, Lag) else Lag.behind(value)

    # ---- the encodings ---------------------------------------------------------------------

    @staticmethod
    def from_wire(value: int) -> Lag:
        if value == _WIRE_RUNNING:
            return RUNNING
        if value == _WIRE_UNKNOWN:
            return UNKNOWN
        return Lag.behind(value)

    def to_wire(self) -> int:
        if self.kind is _RUNNING:
            return _WIRE_RUNNING
        if self.kind is _UNKNOWN:
            return _WIRE_UNKNOWN
        if self.kind is _NO_STATE:
            raise ValueError("no state is not reported: the task is left out")
        return self.offsets

    @staticmethod
    def from_json(value: Any) -> Lag:
        """scenario.md "lags": an integer >= 0, "latest" or "unknown"; ValueError otherwise.
        (An exact int in range first: most reports of a large group are numbers.)"""
        if type(value) is int and 0 <= value <= MAX_LONG:
            return Lag(_OFFSETS, value)
        if value == "latest":
            return RUNNING
        if value == "unknown":
            return UNKNOWN
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a non-negative integer, 'latest' or 'unknown', got {value!r}")
        if value < 0:
            raise ValueError(f"lag must be >= 0, got {value}")
        if value > MAX_LONG:
            raise ValueError(f"lag must be <= {MAX_LONG}, got {value}")
        return Lag(_OFFSETS, value)

    def to_json(self) -> int | str:
        if self.kind is _OFFSETS:
            return self.offsets
        if self.kind is _NO_STATE:
            raise ValueError("no state is not reported: the task is left out")
        return self.kind.value

    # ---- what a lag means --------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.kind is _RUNNING

    @property
    def known_offsets(self) -> int | None:
        """Offsets left to restore: 0 when running, None when unknown or without state."""
        if self.kind is _OFFSETS:
            return self.offsets
        return 0 if self.kind is _RUNNING else None

    def within(self, acceptable_recovery_lag: int) -> bool:
        """Running, or a known lag within ``acceptable_recovery_lag`` offsets of the end: what
        a warming replica reports once it may take over (the early probe's test)."""
        kind = self.kind
        return kind is _RUNNING or (kind is _OFFSETS and self.offsets <= acceptable_recovery_lag)

    def rank(self, changelog_offsets: int | None, acceptable_recovery_lag: int) -> int:
        """KIP-441 "Computing the most-caught-up instances": 0 when caught up, else the
        worst-case restore in offsets, ordered so that "unknown" ranks after every known lag but
        before no state. Lower is better.

        Caught up means the worst-case restore is "acceptable for immediate assignment" (KIP-441
        "Parameters"): the reported lag, or the whole changelog when that is less (a store
        further behind than its changelog holds is rebuilt from the changelog, as with no
        state; ranked by its lag, such a client lost to a client with no state and was never
        caught up where the whole changelog is); the whole changelog with no state; at most
        the whole changelog with state of "unknown" size. So no state or unknown state is caught up on a
        task whose changelog is within ``acceptable_recovery_lag`` (always on a changelog of 0,
        every store unlogged: KIP-441 revision, "State with logging disabled"); on a changelog
        of unknown size ("max long as a proxy") only at the largest acceptable lag.

        Scaled by 4 so that the tiers interleave exactly (``ranking.Tier``): lag L -> 4L,
        unknown -> 4C+1, no state -> 4C+2 (C the changelog size)."""
        kind = self.kind
        if kind is _OFFSETS:
            restore = self.offsets
            if changelog_offsets is not None and changelog_offsets < restore:
                restore = changelog_offsets
            if restore <= acceptable_recovery_lag:
                return 0
            # with no changelog size, no state is unbounded: worse than any lag reported
            return 4 * (restore if changelog_offsets is not None else min(restore, MAX_LONG))
        if kind is _RUNNING or whole_changelog_acceptable(changelog_offsets, acceptable_recovery_lag):
            return 0
        size = UNBOUNDED_OFFSETS if changelog_offsets is None else changelog_offsets
        return 4 * size + (1 if kind is _UNKNOWN else 2)

    def __str__(self) -> str:
        return str(self.offsets) if self.kind is _OFFSETS else self.kind.value


def whole_changelog_acceptable(changelog_offsets: int | None, acceptable_recovery_lag: int) -> bool:
    """Is restoring the whole changelog within the acceptable lag? An unknown size is unbounded:
    acceptable only at the largest ``acceptable_recovery_lag``."""
    if changelog_offsets is None:
        return acceptable_recovery_lag >= MAX_ACCEPTABLE_RECOVERY_LAG
    return changelog_offsets <= acceptable_recovery_lag


RUNNING: Final = Lag(_RUNNING)
UNKNOWN: Final = Lag(_UNKNOWN)
NO_STATE: Final = Lag(_NO_STATE)
