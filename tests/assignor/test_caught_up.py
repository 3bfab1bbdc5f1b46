"""Caught up follows acceptable_recovery_lag for every client (KIP-441 "Parameters").

A client's worst-case restore is its reported lag (never more than the whole changelog), or the
whole changelog when it has no state or state of unknown size. Within acceptable_recovery_lag the client is caught up: it takes the
task directly, a warm-up there would be a wasted replica and a wasted probing rebalance.
"""

from __future__ import annotations

import random
from dataclasses import replace
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignor import assign
from assignor.convergence import caught_up_clients
from assignor.lag import Lag
from assignor.model import (
    LATEST,
    MAX_ACCEPTABLE_RECOVERY_LAG,
    UNKNOWN,
    AssignmentConfig,
    ClientState,
    InvalidInput,
    TaskId,
    TaskSpec,
)
from assignor.ranking import rank_clients
from assignor.target import Group, _CaughtUpTasks
from tests.assignor.invariants import broken_rules, caught_up
from tests.assignor.strategies import configs, groups

PROPERTY_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(group=groups(), config=configs())
def test_no_warmup_on_a_client_whose_worst_case_restore_is_acceptable(group, config):
    tasks, clients = group
    result = assign(tasks, clients, config)
    by_id = {c.id: c for c in clients}
    specs = {s.id: s for s in tasks}
    wasted = [(task, client) for client, roles in result.clients.items() for task in roles.warmup
              if caught_up(specs[task], by_id[client], config.acceptable_recovery_lag)]
    assert wasted == []


@PROPERTY_SETTINGS
@given(group=groups(), config=configs())
def test_no_probing_when_nothing_waits_for_a_client_to_catch_up(group, config):
    """An assignment whose every stateful replica sits on a caught-up client and that warms
    nothing up moves nothing among non-caught-up clients: it needs no probing rebalance."""
    tasks, clients = group
    result = assign(tasks, clients, config)
    by_id = {c.id: c for c in clients}
    specs = {s.id: s for s in tasks}
    waiting = [(task, client) for client, roles in result.clients.items()
               for task in (*roles.active, *roles.standby, *roles.warmup)
               if specs[task].stateful and not caught_up(specs[task], by_id[client], config.acceptable_recovery_lag)]
    if not waiting and not any(roles.warmup for roles in result.clients.values()):
        assert not result.probing_rebalance_needed


@PROPERTY_SETTINGS
@given(group=groups(), config=configs(), data=st.data())
def test_everyone_caught_up_is_balanced_and_final_at_once(group, config, data):
    """At the largest acceptable_recovery_lag (or when every changelog is within it) the
    balanced assignment is reachable in one step: no warm-up, no probing rebalance, and it
    comes back unchanged."""
    tasks, clients = group
    if data.draw(st.booleans(), label="largest acceptable lag"):
        config = replace(config, acceptable_recovery_lag=MAX_ACCEPTABLE_RECOVERY_LAG)
    else:
        tasks = [replace(s, changelog_offsets=data.draw(st.integers(0, config.acceptable_recovery_lag)))
                 if s.stateful else s for s in tasks]
        clients = [replace(c, lags=MappingProxyType({t: lag for t, lag in c.lags.items()
                                                     if lag in (LATEST, UNKNOWN) or lag.offsets <= config.acceptable_recovery_lag}))
                   for c in clients]
    result = assign(tasks, clients, config)
    assert not result.probing_rebalance_needed
    assert all(not roles.warmup for roles in result.clients.values())
    assert broken_rules(tasks, clients, config, result) == []
    again = assign(tasks, caught_up_clients(tasks, clients, result), config)
    assert again.clients == result.clients


@PROPERTY_SETTINGS
@given(group=groups(), config=configs(), data=st.data())
def test_a_probing_rebalance_is_always_a_step(group, config, data):
    """scenario.md: probing is asked for exactly when the assignment is a step towards a better
    one. So once every replica it placed has caught up, the next assignment must move or warm
    up something: a round that ends where it started was a wasted probing rebalance. Half the
    draws restart every client on stale state (every reported lag beyond the acceptable one),
    where no client is caught up and the most caught-up one must take the task."""
    tasks, clients = group
    if data.draw(st.booleans(), label="every client lagging"):
        rng = random.Random(data.draw(st.integers(0, 2**32), label="lags"))
        clients = [replace(c, lags=MappingProxyType({
            task: Lag.behind(config.acceptable_recovery_lag + rng.randint(1, 1_000_000)) for task in sorted(c.lags)}))
            for c in clients]
    result = assign(tasks, clients, config)
    if not result.probing_rebalance_needed:
        return
    after = assign(tasks, caught_up_clients(tasks, clients, result), config)
    placed = {c: (roles.active, roles.standby) for c, roles in result.clients.items()}
    assert {c: (roles.active, roles.standby) for c, roles in after.clients.items()} != placed \
        or any(roles.warmup for roles in after.clients.values())


# One stateful task of 1,000,000 offsets, no client within the acceptable lag (10,000): found by
# fuzzing, the target picked a lagging client by its id or as the previous owner while the
# placement put the active on the most caught-up one, with a warm-up on the other and a
# probing rebalance after which nothing moved.
NOBODY_CAUGHT_UP = [
    # (a's lag, b's lag, previous owner, previous standby holder) -> active
    (500_000, 20_000, None, None, "b"),
    (20_000, 500_000, None, None, "a"),
    (50_000, 20_000, "a", "b", "b"),
    (20_000, 50_000, "a", "b", "a"),
]


@pytest.mark.parametrize(("lag_a", "lag_b", "owner", "holder", "active"), NOBODY_CAUGHT_UP)
def test_with_nobody_caught_up_the_most_caught_up_takes_the_task_at_once(lag_a, lag_b, owner, holder, active):
    task = TaskSpec(TaskId(0, 0), True, 1_000_000)
    lags = {"a": lag_a, "b": lag_b}
    clients = [ClientState(c, prev_active=frozenset({task.id} if owner == c else ()),
                           prev_standby=frozenset({task.id} if holder == c else ()),
                           lags=MappingProxyType({task.id: Lag.behind(lags[c])})) for c in "ab"]
    result = assign([task], clients, AssignmentConfig(acceptable_recovery_lag=10_000))
    assert result.clients[active].active == (task.id,)
    assert all(not roles.warmup for roles in result.clients.values())
    assert not result.probing_rebalance_needed


def _group(changelog: int | None, joiner_lag: int | None) -> tuple[list[TaskSpec], list[ClientState]]:
    """KIP-441 "Scaling Out" shape: a and b run four stateful tasks, c joins."""
    tasks = [TaskSpec(TaskId(0, p), True, changelog) for p in range(4)]
    a = ClientState("a", prev_active=frozenset(t.id for t in tasks[:2]), lags=MappingProxyType({t.id: 0 for t in tasks}))
    b = ClientState("b", prev_active=frozenset(t.id for t in tasks[2:]), lags=MappingProxyType({t.id: 0 for t in tasks}))
    c_lags = {} if joiner_lag is None else {t.id: joiner_lag for t in tasks}
    return tasks, [a, b, ClientState("c", lags=MappingProxyType(c_lags))]


def test_a_fresh_client_on_a_small_changelog_takes_its_share_at_once():
    tasks, clients = _group(changelog=8_000, joiner_lag=None)
    result = assign(tasks, clients, AssignmentConfig(acceptable_recovery_lag=10_000))
    assert len(result.clients["c"].active) == 1
    assert not result.probing_rebalance_needed


def test_unknown_state_counts_as_at_most_the_whole_changelog():
    config = AssignmentConfig(acceptable_recovery_lag=10_000)
    within = assign(*_group(changelog=10_000, joiner_lag=UNKNOWN), config)
    assert len(within.clients["c"].active) == 1 and not within.probing_rebalance_needed
    beyond = assign(*_group(changelog=10_001, joiner_lag=UNKNOWN), config)
    assert beyond.clients["c"].active == () and beyond.probing_rebalance_needed
    assert len(beyond.clients["c"].warmup) == 1


def test_an_unbounded_changelog_is_acceptable_only_at_the_largest_acceptable_lag():
    tasks, clients = _group(changelog=None, joiner_lag=None)
    assert assign(tasks, clients, AssignmentConfig(acceptable_recovery_lag=MAX_ACCEPTABLE_RECOVERY_LAG - 1)) \
        .probing_rebalance_needed
    final = assign(tasks, clients, AssignmentConfig(acceptable_recovery_lag=MAX_ACCEPTABLE_RECOVERY_LAG))
    assert len(final.clients["c"].active) == 1 and not final.probing_rebalance_needed


def test_without_a_changelog_size_any_reported_lag_ranks_before_unknown_and_no_state():
    """scenario.md: with no ``changelog_offsets``, a client without state has an unbounded lag,
    worse than any reported one; "unknown" state is at most that. A lag above the proxy of
    "max long" (2^62) ranked after both."""
    from assignor.lag import MAX_LONG, NO_STATE, UNBOUNDED_OFFSETS, Lag

    no_state, unknown = NO_STATE.rank(None, 100), UNKNOWN.rank(None, 100)
    lags = (101, 2**62 - 1, 2**62, 2**62 + 1, MAX_LONG - 1, MAX_LONG)
    ranks = [Lag.behind(offsets).rank(None, 100) for offsets in lags]
    assert ranks == sorted(set(ranks)), "every reported lag ranks apart, the least behind first"
    assert ranks[-1] < unknown < no_state
    assert MAX_LONG < UNBOUNDED_OFFSETS


def test_the_least_behind_of_two_huge_lags_takes_the_active():
    """A fuzzer's find: with no changelog size, lags from 2^62 up ranked alike (capped below the
    proxy of "max long"), and the client further behind, first by id, took the active."""
    task, stateless = TaskSpec(TaskId(3, 0), stateful=True), TaskSpec(TaskId(1, 4), stateful=False)
    clients = [ClientState("115", lags={task.id: Lag.behind(2**63 - 1)}),
               ClientState("42", lags={task.id: Lag.behind(2**62)})]
    result = assign([task, stateless], clients, AssignmentConfig(acceptable_recovery_lag=100))
    assert result.clients["42"].active == (task.id,) and result.clients["115"].active == (stateless.id,)


def test_acceptable_lag_beyond_the_largest_is_invalid():
    try:
        AssignmentConfig(acceptable_recovery_lag=MAX_ACCEPTABLE_RECOVERY_LAG + 1)
    except InvalidInput as error:
        assert error.field == "config.acceptable_recovery_lag"
    else:
        raise AssertionError("accepted an acceptable_recovery_lag beyond max long")


def test_on_an_empty_changelog_a_reported_lag_is_caught_up_and_the_standbys_stay():
    """Hypothesis's find, under the whole-changelog bound: client-03 reports a lag of 9,558 on a
    changelog of 0 offsets (acceptable lag 0). It kept a standby while a client without state,
    which restores nothing, was caught up: the settled fast path then had to give way. A store
    is rebuilt from its changelog at worst, so client-03 restores nothing either: every client
    is caught up, and the previous standbys stay where they are (sticky; KIP-441 "Assignment
    Algorithm" property 2 has no more caught-up client to prefer)."""
    task = TaskId(0, 0)
    spec = TaskSpec(task, stateful=True, changelog_offsets=0)

    def client(name, threads, *, active=(), standby=(), lags=None):
        return ClientState(name, threads, prev_active=frozenset(active), prev_standby=frozenset(standby),
                           lags=MappingProxyType(lags or {}))

    clients = [client("client-00", 1), client("client-01", 3),
               client("client-03", 3, standby=[task], lags={task: 9_558}),
               client("client-06", 3, active=[task], lags={task: LATEST}),
               client("client-07", 4, standby=[task], lags={task: UNKNOWN})]
    config = AssignmentConfig(acceptable_recovery_lag=0, max_warmup_replicas=1, num_standby_replicas=2)
    result = assign([spec], clients, config)
    assert broken_rules([spec], clients, config, result) == []
    assert result.clients["client-06"].active == (task,)
    assert [c for c, roles in result.clients.items() if task in roles.standby] == ["client-03", "client-07"]
    assert not result.probing_rebalance_needed and all(not roles.warmup for roles in result.clients.values())


AUDITED_BEYOND_THE_CHANGELOG = [
    # (client b's lag on 0_0, whose changelog is 25 offsets; a holds 0_0's standby at 10^12)
    pytest.param(14_260, id="lag-beyond-the-acceptable-lag"),
    pytest.param(10_001, id="lag-just-beyond-the-acceptable-lag"),
]


@pytest.mark.parametrize("lag", AUDITED_BEYOND_THE_CHANGELOG)
def test_a_lag_beyond_the_whole_changelog_counts_as_the_whole_changelog(lag):
    """An audit's find: b runs three stateful tasks and reports on 0_0 a lag beyond both its
    changelog (25 offsets) and the acceptable lag (10,000). Ranked by that lag, b lost to a
    client with no state and was not caught up, so a got a warm-up of 0_0 and a probing
    rebalance, and b kept three tasks; a has no state on 1_0 and 2_0 (30 offsets: caught up)
    and could take one at once. Restoring at most the whole changelog, a and b are caught up on
    every task: balanced and final now (a takes 0_0, whose standby it holds)."""
    tasks = [TaskSpec(TaskId(0, 0), True, 25), TaskSpec(TaskId(1, 0), True, 30), TaskSpec(TaskId(2, 0), True, 30)]
    a = ClientState("a", prev_standby=frozenset({TaskId(0, 0)}), lags=MappingProxyType({TaskId(0, 0): Lag.behind(10**12)}))
    b = ClientState("b", prev_active=frozenset(t.id for t in tasks),
                    lags=MappingProxyType({TaskId(0, 0): Lag.behind(lag), TaskId(1, 0): LATEST, TaskId(2, 0): LATEST}))
    config = AssignmentConfig(num_standby_replicas=0)
    result = assign(tasks, [a, b], config)
    assert broken_rules(tasks, [a, b], config, result) == []
    assert len(result.clients["a"].active) == 1 and len(result.clients["b"].active) == 2
    assert not result.probing_rebalance_needed and all(not roles.warmup for roles in result.clients.values())


@PROPERTY_SETTINGS
@given(group=groups(), config=configs())
def test_the_caught_up_index_lists_each_clients_caught_up_tasks_in_task_order(group, config):
    """``take_by_swap``'s preferred partners (``assignor.target._CaughtUpTasks``) are read from
    the lag reports rather than by asking every task's rank: the same tasks, in the same order."""
    tasks, clients = group
    ranking = rank_clients(tasks, clients, config.acceptable_recovery_lag)
    index = _CaughtUpTasks(Group.of(tasks, clients), ranking)
    stateful = sorted(spec.id for spec in tasks if spec.stateful)
    for client in sorted(clients, key=lambda c: c.id):
        assert list(index.of(client.id)) == [task for task in stateful if ranking.caught_up(task, client.id)]
