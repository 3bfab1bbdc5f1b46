"""remote-leader's assignor: pure task-assignment algorithms over frozen value types.

``assign(tasks, clients, config)`` is the one entry point: the KIP-441 high-availability
assignor or the sticky assignor, by ``config.assignor``, optionally rack-aware (KIP-925).
No I/O, no clock, no global randomness: the same problem gives the same result.
"""

from __future__ import annotations

import gc
import importlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import MappingProxyType
from typing import TYPE_CHECKING

from assignor.lag import Lag
from assignor.model import (
    LATEST,
    UNKNOWN,
    AssignmentConfig,
    AssignmentProblem,
    AssignmentResult,
    AssignorKind,
    ClientAssignment,
    ClientState,
    InvalidInput,
    RackAwareStrategy,
    Reason,
    ReasonCode,
    Role,
    TaskId,
    TaskSpec,
    TopicPartition,
)

if TYPE_CHECKING:
    from assignor.target import StandbyChoice


def assign(tasks: Sequence[TaskSpec], clients: Sequence[ClientState], config: AssignmentConfig,
           standby_choice: StandbyChoice | None = None) -> AssignmentResult:
    """``standby_choice`` overrides how standby targets are formulated
    (``assignor.target.standby_formulations``, the default); tests force one."""
    from assignor.target import standby_formulations

    strategy = STRATEGIES[config.assignor]
    with _collector_paused():
        return strategy.assign(tasks, clients, config, standby_choice or standby_formulations)


class _Strategy:
    """An assignor kind's implementation, by module name, imported on first use (the package
    stays cheap to import for callers that only read its model)."""

    def __init__(self, module: str) -> None:
        self._module = module

    @property
    def assign(self):
        return importlib.import_module(self._module).assign


# The assignment strategies, registered once: ``config.assignor`` picks one; the gRPC edge,
# the worker's codec and the scenario contract accept exactly these kinds.
STRATEGIES: Mapping[AssignorKind, _Strategy] = MappingProxyType({
    AssignorKind.HIGH_AVAILABILITY: _Strategy("assignor.high_availability"),
    AssignorKind.STICKY: _Strategy("assignor.sticky"),
})


_pause_lock = threading.Lock()
_pause_depth = 0
_resume_collector = False


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Keep Python's cyclic garbage collector off while any ``assign`` runs.

    An assignment allocates hundreds of thousands of short-lived containers, and each full
    collection walks every live object: at 20,000 tasks x 500 clients that was a quarter of
    the call (docs/benchmarks.md, "Rack awareness"). Nothing here needs cycles collected
    mid-call (reference counting frees the rest), so the collector resumes, as the caller
    had it, when the last concurrent call returns; cycles made meanwhile are collected then.
    """
    global _pause_depth, _resume_collector
    with _pause_lock:
        if _pause_depth == 0:
            _resume_collector = gc.isenabled()
            gc.disable()
        _pause_depth += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pause_depth -= 1
            if _pause_depth == 0 and _resume_collector:
                gc.enable()


def solve(problem: AssignmentProblem) -> AssignmentResult:
    return assign(problem.tasks, problem.clients, problem.config)


def preload() -> None:
    """Import now what the assignor loads only when a call first needs it: scipy, for the warm
    start of a large settled group that changed a little (``assignor.warm_start``). For
    long-lived processes, such as the server's workers, so that no assignment pays it; not for
    ``python -m assignor``, most of whose runs never need it."""
    from assignor import warm_start

    warm_start.preload()


__all__ = [
    "LATEST", "UNKNOWN", "Lag", "AssignmentConfig", "AssignmentProblem", "AssignmentResult", "AssignorKind",
    "ClientAssignment", "ClientState", "InvalidInput", "RackAwareStrategy", "Reason", "ReasonCode", "Role",
    "STRATEGIES", "TaskId", "TaskSpec", "TopicPartition", "assign", "preload", "solve",
]
