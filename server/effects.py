"""Effects: what the group state machine asks the runtime to do, handed out as data.

The state machine never touches a clock, a socket, a file or a future (house style, after
etcd-raft's ``Ready`` and Kafka's ``CoordinatorResult``): its handlers return a response and a
list of these, and ``server.runtime`` carries them out in order, persisting before it replies.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from assignor.model import AssignmentProblem, AssignmentResult
from assignor.scenario import problem_to_document, result_to_document
from server.model import GroupSnapshot
from server.problem import ProblemInputs


class TimerKind(enum.StrEnum):
    SESSION = "session"  # session:{group}:{member}: the member's session timeout
    JOIN = "join"  # join:{group}: the join barrier's deadline (rebalance timeout, initial delay)
    PROBE = "probe"  # probe:{group}: the scheduled probing rebalance


@dataclass(frozen=True, slots=True)
class TimerKey:
    """A keyed timer (house style): scheduling a key again replaces it."""

    kind: TimerKind
    group_id: str
    member_id: str = ""

    def __str__(self) -> str:
        if self.member_id:
            return f"{self.kind}:{self.group_id}:{self.member_id}"
        return f"{self.kind}:{self.group_id}"


@dataclass(frozen=True, slots=True)
class ScheduleTimer:
    key: TimerKey
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class CancelTimer:
    key: TimerKey


@dataclass(frozen=True, slots=True)
class Reply:
    """Complete a parked call (a long-polling JoinGroup) with this response."""

    call_id: int
    response: Any


@dataclass(frozen=True, slots=True)
class Persist:
    """Write the group's durable state before any reply of the same outcome goes out. The state
    machine puts the state in (``Group.snapshot``, as the handler left it), so the runtime and
    the store only encode and write it, and a later change of the group cannot leak in.
    ``required`` False: no reply depends on it (a state whose loss a restart recovers from
    safely): the replies still wait for it, so that it is durable once they are out, but do not
    fail with it."""

    snapshot: GroupSnapshot
    required: bool = True

    @property
    def group_id(self) -> str:
        return self.snapshot.group_id


@dataclass(frozen=True, slots=True)
class ComputeAssignment:
    """Run the assignor on this generation's problem, then hand the result back to the group
    (``Group.assignment_computed``, which drops it if the generation moved on meanwhile). The
    runtime builds the problem and runs the assignor off the event loop, once the group's and
    member's locks are released."""

    group_id: str
    generation: int
    inputs: ProblemInputs


@dataclass(frozen=True, slots=True)
class AppendRebalanceLog:
    """One line of the rebalance log (docs/interfaces.md): ``header`` and the generation's
    problem and result, which the writer turns into documents off the event loop (``record``;
    a large group's are megabytes)."""

    header: dict[str, Any]
    problem: AssignmentProblem
    result: AssignmentResult

    def record(self) -> dict[str, Any]:
        return {**self.header, "input": problem_to_document(self.problem),
                "output": result_to_document(self.result, explain=True)}


@dataclass(frozen=True, slots=True)
class Event:
    """Something worth a log line and a metric: ``name`` like ``group.rebalance.completed``."""

    name: str
    fields: dict[str, Any] = field(default_factory=dict)


Effect = ScheduleTimer | CancelTimer | Reply | Persist | ComputeAssignment | AppendRebalanceLog | Event


@dataclass(slots=True)
class Outcome:
    """A handler's result: the immediate response (None when the call is parked) and effects."""

    response: Any = None
    effects: list[Effect] = field(default_factory=list)
