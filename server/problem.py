"""The assignor's input for one generation of a group, captured cheaply and built later.

A group's problem is captured under its lock when the join barrier completes (immutable pieces
only: the topology, a copy of the end offsets, each member's report as ``Lag`` values, the
last assignment) and built by ``build`` off the event loop: building the ``TaskSpec``s and
``ClientState``s of a large group takes about a second in Python, time in which the event loop
would otherwise answer nobody else (docs/security.md, "Bounded work").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from assignor.lag import Lag
from assignor.model import AssignmentConfig, AssignmentProblem, AssignmentResult, ClientState, TaskId
from assignor.topology import Topology
from server.memory import with_remembered_tasks


@dataclass(frozen=True, slots=True)
class ClientReport:
    """One member process as the assignor sees it, copied out of the group's mutable state."""

    process_id: str
    lags: Mapping[TaskId, Lag]
    num_threads: int
    rack: str | None
    client_tags: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class ProblemInputs:
    """Everything ``build`` reads; the group may change after the capture without changing it."""

    topology: Topology
    config: AssignmentConfig
    end_offsets: Mapping[TaskId, int]
    reports: tuple[ClientReport, ...]  # in process-id order
    last: AssignmentResult | None

    def build(self) -> AssignmentProblem:
        """One client per worker process, keyed by its process id."""
        tasks = self.topology.task_specs(self.end_offsets)
        known = {spec.id for spec in tasks}
        previous_owner = self.last.active_owner() if self.last else {}
        lags_by_pid = {r.process_id: {t: lag for t, lag in r.lags.items() if t in known} for r in self.reports}
        # A task claimed as a running active by two processes (a zombie): keep one claim, the
        # previous owner's, else the first process id's; the other becomes a caught-up copy.
        claims: dict[TaskId, list[str]] = {}
        for pid, lags in lags_by_pid.items():
            for task, lag in lags.items():
                if lag.running:
                    claims.setdefault(task, []).append(pid)
        for task, pids in claims.items():
            keep = previous_owner.get(task) if previous_owner.get(task) in pids else pids[0]
            for pid in pids:
                if pid != keep:
                    lags_by_pid[pid][task] = Lag.behind(0)
        clients = tuple(
            ClientState.from_report(r.process_id, lags_by_pid[r.process_id], threads=r.num_threads, rack=r.rack,
                                    tags=r.client_tags)
            for r in self.reports
        )
        clients = with_remembered_tasks(clients, tasks, self.last)
        return AssignmentProblem(tasks=tasks, clients=clients, config=self.config)
