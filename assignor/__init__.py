"""remote-leader's assignor: pure task-assignment algorithms over frozen value types.

``assign(tasks, clients, config)`` is the one entry point: the KIP-441 high-availability
assignor or the sticky assignor, by ``config.assignor``, optionally rack-aware (KIP-925).
No I/O, no clock, no global randomness: the same problem gives the same result.
"""

from __future__ import annotations

from collections.abc import Sequence

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


def assign(tasks: Sequence[TaskSpec], clients: Sequence[ClientState], config: AssignmentConfig) -> AssignmentResult:
    from assignor import high_availability, sticky

    if config.assignor == AssignorKind.STICKY:
        return sticky.assign(tasks, clients, config)
    return high_availability.assign(tasks, clients, config)


def solve(problem: AssignmentProblem) -> AssignmentResult:
    return assign(problem.tasks, problem.clients, problem.config)


__all__ = [
    "LATEST", "UNKNOWN", "AssignmentConfig", "AssignmentProblem", "AssignmentResult", "AssignorKind",
    "ClientAssignment", "ClientState", "InvalidInput", "RackAwareStrategy", "Reason", "ReasonCode", "Role",
    "TaskId", "TaskSpec", "TopicPartition", "assign", "solve",
]
