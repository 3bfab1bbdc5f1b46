"""What the live page remembers that the group state does not: how each warm-up's lag moved
over time, and a short summary of each recent rebalance (from the rebalance log's records).

Both are small, bounded, in memory, and lost on restart: the page shows the recent past; the
rebalance log and ``remote-leader analyze`` keep the long one.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: Samples kept per group (one a second: ten minutes) and rebalances kept per group.
MAX_SAMPLES = 600
MAX_REBALANCES = 20


@dataclass(frozen=True, slots=True)
class WarmupSample:
    time_ms: int
    replica: str  # "task on member", the line it belongs to
    lag: int  # offsets; LATEST (-1) and UNKNOWN (-2) are not sampled


@dataclass(frozen=True, slots=True)
class RebalanceSummary:
    """One rebalance-log record, reduced to what the page shows."""

    group_id: str
    generation: int
    time_ms: int
    trigger: str
    compute_ms: float
    rebalance_ms: int  # the join barrier and the assignor together; 0 when not known
    members: int
    actives_moved: int  # an active that had another owner in the input
    actives_placed: int  # an active that had no owner in the input
    warmups: int
    probing: bool


def summarize(record: Mapping[str, Any]) -> RebalanceSummary:
    """docs/interfaces.md "Rebalance log": clients' ``prev_active`` in the input against their
    ``active`` in the output."""
    document_in = record.get("input") or {}
    document_out = record.get("output") or {}
    previous = {task: client["id"] for client in document_in.get("clients", ()) for task in client.get("prev_active", ())}
    moved = placed = warmups = 0
    for client_id, got in (document_out.get("clients") or {}).items():
        warmups += len(got.get("warmup", ()))
        for task in got.get("active", ()):
            owner = previous.get(task)
            if owner is None:
                placed += 1
            elif owner != client_id:
                moved += 1
    return RebalanceSummary(
        group_id=str(record.get("group_id", "")),
        generation=int(record.get("generation", 0)),
        time_ms=int(record.get("time_ms", 0)),
        trigger=str(record.get("trigger", "")),
        compute_ms=float(record.get("compute_ms") or 0.0),
        rebalance_ms=int(record.get("rebalance_ms") or 0),
        members=len(document_in.get("clients", ())),
        actives_moved=moved,
        actives_placed=placed,
        warmups=warmups,
        probing=bool(document_out.get("probing_rebalance_needed")),
    )


class PageHistory:
    def __init__(self, max_samples: int = MAX_SAMPLES, max_rebalances: int = MAX_REBALANCES) -> None:
        self._samples: dict[str, deque[tuple[int, tuple[WarmupSample, ...]]]] = defaultdict(lambda: deque(maxlen=max_samples))
        self._rebalances: dict[str, deque[RebalanceSummary]] = defaultdict(lambda: deque(maxlen=max_rebalances))

    def record_rebalance(self, record: Mapping[str, Any]) -> None:
        summary = summarize(record)
        self._rebalances[summary.group_id].appendleft(summary)

    def rebalances(self, group_id: str) -> list[RebalanceSummary]:
        return list(self._rebalances.get(group_id, ()))

    def sample(self, group_id: str, now_ms: int, warmups: Iterable[tuple[str, str, int]]) -> None:
        """``warmups``: (task, member, lag) of every warm-up replica now; a group whose warm-ups
        are all done keeps its history (the page shows how they finished)."""
        points = tuple(WarmupSample(now_ms, f"{task} on {member}", lag) for task, member, lag in warmups if lag >= 0)
        if points:
            self._samples[group_id].append((now_ms, points))

    def warmup_lines(self, group_id: str) -> dict[str, list[tuple[int, int]]]:
        """Replica -> [(time_ms, lag)], in time order."""
        lines: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for _, points in self._samples.get(group_id, ()):
            for point in points:
                lines[point.replica].append((point.time_ms, point.lag))
        return dict(sorted(lines.items()))

    def forget(self, live_groups: Iterable[str]) -> None:
        live = set(live_groups)
        for store in (self._samples, self._rebalances):
            for group_id in [g for g in store if g not in live]:
                del store[group_id]
