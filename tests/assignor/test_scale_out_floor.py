"""One instance joins a settled group: KIP-441's rules need no more rounds, and no more moves,
than the replicas the newcomer must take over.

Every replica the newcomer ends up with has to be warmed up on it first (it has no state), at
most ``max_warmup_replicas`` per probing rebalance, and nothing else needs to move: so the group
settles after ceil(newcomer's stateful replicas / max_warmup_replicas) probing rebalances, every
warm-up is on the newcomer, and every active that changes owner (stateful or stateless) moves to
the newcomer. docs/assignor.md, "Scaling out at the floor", says where this holds.
"""

from __future__ import annotations

import math

import pytest

from assignor import assign, warm_start
from assignor.convergence import caught_up_clients, settle
from assignor.model import AssignmentConfig, ClientState
from bench.workloads import tasks_of
from tests.assignor.invariants import broken_rules

PRODUCTION_MIN_ARCS = warm_start.MIN_ARCS  # read at import, before the conftest's fixture lowers it


def _join_one(old_clients: int, task_count: int, standbys: int, max_warmups: int, subtopologies: int = 10,
              stateful_share: float = 0.8):
    """(probing rebalances, warm-ups off the newcomer, newcomer's stateful replicas, actives
    moved among the old clients, stateless actives moved, newcomer's stateless actives)."""
    specs = tasks_of(task_count, subtopologies=subtopologies, stateful_share=stateful_share)
    stateful = {s.id for s in specs if s.stateful}
    config = AssignmentConfig(num_standby_replicas=standbys, max_warmup_replicas=max_warmups)
    _, members = settle(specs, [ClientState(id=f"c{i:03d}") for i in range(old_clients)], config, max_rounds=100)
    before = {t: c.id for c in members for t in c.prev_active}
    members = [*members, ClientState(id="new")]
    probing = warmups_elsewhere = 0
    for _ in range(1000):
        result = assign(specs, members, config)
        assert broken_rules(specs, members, config, result) == []
        warmups_elsewhere += sum(len(a.warmup) for c, a in result.clients.items() if c != "new")
        members = caught_up_clients(specs, members, result)
        if not result.probing_rebalance_needed:
            break
        probing += 1
    new = next(c for c in members if c.id == "new")
    after = {t: c.id for c in members for t in c.prev_active}
    moved = [t for t in after if after[t] != before[t]]
    return (probing, warmups_elsewhere, sum(1 for t in (*new.prev_active, *new.prev_standby) if t in stateful),
            sum(1 for t in moved if after[t] != "new"), sum(1 for t in moved if t not in stateful),
            sum(1 for t in new.prev_active if t not in stateful))


def test_the_issue_example_settles_in_kip441s_sixteen_rounds():
    """49 settled instances, 1,000 tasks (80% stateful), 1 standby, 2 warm-ups: the newcomer
    takes 16 stateful actives and 16 standbys, 2 per round (it took 19 rounds before)."""
    probing, elsewhere, replicas, shuffled, stateless_moved, stateless_new = _join_one(49, 1000, 1, 2)
    assert replicas == 32
    assert (probing, elsewhere, shuffled) == (16, 0, 0)
    assert stateless_moved == stateless_new == 4  # the newcomer's share; none among the others (10 before)


@pytest.mark.parametrize("old_clients", [3, 5, 9, 19])
@pytest.mark.parametrize("task_count", [50, 100, 200])
@pytest.mark.parametrize("standbys", [0, 1, 2])
def test_one_instance_joining_needs_only_the_warmups_of_its_own_replicas(old_clients, task_count, standbys):
    max_warmups = 2
    probing, elsewhere, replicas, shuffled, stateless_moved, stateless_new = _join_one(
        old_clients, task_count, standbys, max_warmups)
    assert elsewhere == 0
    assert probing == math.ceil(replicas / max_warmups)
    assert shuffled == 0
    assert stateless_moved == stateless_new


@pytest.mark.parametrize("max_warmups", [1, 3])
def test_the_floor_follows_max_warmup_replicas(max_warmups):
    probing, elsewhere, replicas, shuffled, _, _ = _join_one(9, 100, 1, max_warmups)
    assert (elsewhere, shuffled) == (0, 0)
    assert probing == math.ceil(replicas / max_warmups)


def test_the_floor_sweeps_missed_shape():
    """19 settled instances, 50 tasks, 2 standbys, 3 warm-ups: the one shape of
    ``bench/bench_assignor.py --floor-sweep`` that took 3 probing rebalances (floor 2) while
    small graphs were solved whole rather than on the reduced graph (``assignor.flow``)."""
    probing, elsewhere, replicas, shuffled, _, _ = _join_one(19, 50, 2, 3)
    assert (elsewhere, shuffled) == (0, 0)
    assert probing == math.ceil(replicas / 3) == 2


@pytest.mark.parametrize(("task_count", "max_warmups", "subtopologies", "stateful_share"), [
    (120, 1, 25, 0.9),  # 9 rounds for 7 before the seventeenth session
    (300, 1, 25, 0.9),  # 18 for 17
    (120, 4, 5, 0.6),   # a finished warm-up on an active the newcomer must take: 2 for 1 with sparing alone
    (300, 2, 25, 0.9),  # one spare replica counted for two moves (``_overdrawn``): 10 for 9
])
def test_a_newcomer_that_leaves_the_replica_ceiling_where_it_was(task_count, max_warmups, subtopologies,
                                                                 stateful_share, monkeypatch):
    """30 settled instances joined by one, 1 standby (``--floor-sweep-wide`` shapes): the
    replica ceiling is the same with 31 clients, so nobody is above it, and the clients above
    their new floor are the ones with a replica to spare (``assignor.target.chain_prone``).
    Solved as in production, without the warm start below ``MIN_ARCS`` that this directory's
    conftest forces: the targets of equal cost that the two ways reach can differ, and with
    300 tasks the forced one costs a warm-up on an old client (docs/assignor.md, "Scaling out
    at the floor": the rules price each task on its own, so ties still matter)."""
    monkeypatch.setattr(warm_start, "MIN_ARCS", PRODUCTION_MIN_ARCS)
    probing, elsewhere, replicas, shuffled, _, _ = _join_one(30, task_count, 1, max_warmups, subtopologies,
                                                             stateful_share)
    assert shuffled == 0
    assert probing == math.ceil(replicas / max_warmups)
    # a warm-up off the newcomer only in a slot the newcomer's own could not fill (17 replicas,
    # 2 per round: the ninth round has one to spare)
    assert elsewhere <= probing * max_warmups - replicas
