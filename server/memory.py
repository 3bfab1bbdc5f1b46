"""What the server remembers of who ran what: the group's last assignment as previous tasks.

KIP-441's subscription always carries a member's previous active and standby tasks; in this
protocol its task lags subsume them ("Rebalance Metadata"). A member that reports no lags (a
worker that cannot read its checkpoints, a stateless worker, a caller that is not our library)
would otherwise look brand new, and every task it ran would move. The server holds the last
assignment, so it fills in what the reports leave out (docs/protocol.md, "Previous tasks"):

- stateless tasks are never reported (KIP-441 "Stateless tasks": no lag to report), so their
  previous owner always comes from memory, unless a member claims one as a running active;
- a member that reports no lag at all gets its remembered tasks: actives as previous actives,
  standbys and warm-ups as previous standbys, each stateful one with state of unknown size
  (it ran them, but nobody knows how far behind its disk is now);
- a member that reports lags is believed about its stateful tasks: a task missing from its
  report is state it does not have (scenario.md, "lags"), whatever it ran before;
- a running claim (LATEST) in any report beats memory's active owner of that task.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from types import MappingProxyType

from assignor.model import UNKNOWN, AssignmentResult, ClientState, TaskSpec


def with_remembered_tasks(
    clients: Sequence[ClientState], tasks: Iterable[TaskSpec], last: AssignmentResult | None
) -> tuple[ClientState, ...]:
    """``clients`` with the previous tasks the reports leave out taken from ``last``."""
    if last is None:
        return tuple(clients)
    stateful = {spec.id: spec.stateful for spec in tasks}
    claimed = {task for client in clients for task in client.prev_active}
    remembered = []
    for client in clients:
        ran = last.clients.get(client.id)
        if ran is None:
            remembered.append(client)
            continue
        silent = not client.lags
        prev_active, prev_standby, lags = set(client.prev_active), set(client.prev_standby), dict(client.lags)
        for task in ran.active:
            if task not in stateful or task in claimed:
                continue
            if not stateful[task]:
                prev_active.add(task)
            elif silent:
                prev_active.add(task)
                lags[task] = UNKNOWN
        if silent:
            for task in (*ran.standby, *ran.warmup, *(t for t in ran.active if t in claimed)):
                if stateful.get(task) and task not in prev_active:
                    prev_standby.add(task)
                    lags[task] = UNKNOWN
        remembered.append(replace(client, prev_active=frozenset(prev_active),
                                  prev_standby=frozenset(prev_standby - prev_active),
                                  lags=MappingProxyType(lags)))
    return tuple(remembered)
