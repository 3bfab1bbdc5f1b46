"""Builders for the situations of Apache Kafka's assignor tests, written as scenario documents
(shared/spec/scenario.md) and run through ``python -m assignor``'s code path.

A client is written as a row: ``client("c1", threads=2, active="0_0 0_1", standby="1_0")``.
Unless ``lags`` says otherwise, a previous active of a stateful task runs caught up ("latest"),
a previous standby has lag 0 (Kafka's tests report a caught-up offset sum for both), and any
other stateful task has no state: the task's whole changelog to restore, as Kafka's
``Long.MAX_VALUE`` / end-offset lags mean.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from assignor import solve
from assignor.model import AssignmentProblem, AssignmentResult
from assignor.scenario import parse_problem, result_to_document
from tests.assignor.invariants import broken_rules

# A client with no state restores this much: far beyond any acceptable_recovery_lag used here.
CHANGELOG = 1_000_000


def tasks(ids: str, *, stateful: bool = True, changelog: int | None = CHANGELOG) -> list[dict]:
    """Task documents for space-separated ids."""
    out = []
    for task_id in ids.split():
        document: dict[str, Any] = {"id": task_id, "stateful": stateful}
        if stateful and changelog is not None:
            document["changelog_offsets"] = changelog
        out.append(document)
    return out


def client(client_id: str, threads: int = 1, *, active: str = "", standby: str = "",
           lags: dict[str, Any] | None = None, **extra: Any) -> dict:
    """A client row; ``extra`` takes ``rack`` and ``tags``. Default lags are filled in by
    ``scenario`` (it knows which tasks are stateful)."""
    return {"id": client_id, "threads": threads, "prev_active": active.split(), "prev_standby": standby.split(),
            "lags": dict(lags or {}), **extra}


def scenario(task_documents: list[dict], clients: list[dict], **config: Any) -> dict:
    stateful = {t["id"] for t in task_documents if t["stateful"]}
    filled = []
    for row in clients:
        lags = {t: "latest" for t in row["prev_active"] if t in stateful}
        lags.update({t: 0 for t in row["prev_standby"] if t in stateful})
        lags.update(row["lags"])
        filled.append({**row, "lags": lags})
    return {"version": 1, "config": config, "tasks": task_documents, "clients": filled}


@dataclass(frozen=True)
class Outcome:
    """One assignment: the scenario, the problem and result, and the output document."""

    document: dict
    problem: AssignmentProblem
    result: AssignmentResult
    output: dict

    def active(self, client_id: str) -> list[str]:
        return self.output["clients"][client_id]["active"]

    def standby(self, client_id: str) -> list[str]:
        return self.output["clients"][client_id]["standby"]

    def warmup(self, client_id: str) -> list[str]:
        return self.output["clients"][client_id]["warmup"]

    def assigned(self, client_id: str) -> list[str]:
        """Every replica on the client, warm-ups included (Kafka counts them as standbys)."""
        return self.active(client_id) + self.standby(client_id) + self.warmup(client_id)

    @property
    def probing(self) -> bool:
        return self.output["probing_rebalance_needed"]

    @property
    def clients(self) -> list[str]:
        return list(self.output["clients"])

    def owner(self, task: str) -> str:
        (owner,) = [c for c in self.clients if task in self.active(c)]
        return owner

    def standby_holders(self, task: str) -> set[str]:
        return {c for c in self.clients if task in self.standby(c)}

    def warmups(self) -> int:
        return sum(len(self.warmup(c)) for c in self.clients)

    def broken(self) -> list[str]:
        """What ``tests/assignor/invariants.py`` finds broken (every KIP-441 and scenario.md rule)."""
        return broken_rules(self.problem.tasks, self.problem.clients, self.problem.config, self.result)

    def subtopology_skew(self) -> int:
        """Kafka's ``analyzeTaskAssignmentBalance``: the largest spread, over subtopologies, between
        the clients running most and fewest of its active tasks."""
        per: dict[str, Counter] = {}
        for c in self.clients:
            for task in self.active(c):
                per.setdefault(task.split("_")[0], Counter())[c] += 1
        return max((max(n.values()) - min(n[c] for c in self.clients) for n in per.values()), default=0)

    def locations(self, task: str, key: str) -> list[str]:
        """The ``key`` tag of every client holding an active or standby of ``task``."""
        tags = {row["id"]: row.get("tags", {}) for row in self.document["clients"]}
        holders = [self.owner(task), *sorted(self.standby_holders(task))]
        return [tags[c].get(key, "") for c in holders]


def run(document: dict) -> Outcome:
    problem = parse_problem(document)
    result = solve(problem)
    return Outcome(document, problem, result, result_to_document(result))
