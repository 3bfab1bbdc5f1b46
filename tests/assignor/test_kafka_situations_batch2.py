"""Kafka's assignor test situations not yet ported by tests/assignor/test_kafka_situations.py,
test_kafka_rack_situations.py or test_kafka_convergence.py (batch 2).

Sources (apache/kafka, streams/src/test/java/org/apache/kafka/streams/processor/internals/
assignment/ unless said otherwise): HighAvailabilityTaskAssignorTest, FallbackPriorTaskAssignorTest,
StickyTaskAssignorTest, TaskMovementTest, ClientStateTest, ClientTagAwareStandbyTaskAssignorTest,
the default standby assignment of KIP-441, RackAwareTaskAssignorTest, TaskAssignorConvergenceTest,
AssignorConfigurationTest / StreamsConfigTest (config validation) and StreamsPartitionAssignorTest
(processor/internals/), each re-expressed as a scenario document (shared/spec/scenario.md) and run
through ``python -m assignor``'s code path (``kafka_situations.run``), or through the CLI itself
where the contract is the exit code.

Each test asserts the property Kafka's test asserts, or the KIP rule behind it; where
docs/assignor.md, docs/rack-awareness.md or scenario.md decide otherwise than Kafka's code, the
test follows our documented rule and says so. Every result is also checked against every rule of
``tests/assignor/invariants.py``.
"""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest

from assignor.convergence import settle
from assignor.model import UNKNOWN, AssignmentConfig, ClientState, TaskId
from assignor.scenario import parse_problem, problem_to_document, result_to_document
from tests.assignor.kafka_situations import CHANGELOG, Outcome, client, run, scenario, tasks
from tests.assignor.test_kafka_convergence import converge, kafka_tasks, new_client

ROOT = Path(__file__).resolve().parent
NINE = "0_0 0_1 0_2 1_0 1_1 1_2 2_0 2_1 2_2"
SIX = "0_0 0_1 0_2 1_0 1_1 1_2"
FOUR = "0_0 0_1 0_2 0_3"
THREE = "0_0 0_1 0_2"
MAX_LONG = 2**63 - 1
HA = {"acceptable_recovery_lag": 100, "max_warmup_replicas": 2}


def each(ids: str, value) -> dict:
    return {t: value for t in ids.split()}


def valid(outcome: Outcome) -> Outcome:
    assert outcome.broken() == [], (outcome.broken(), outcome.output)
    return outcome


def shuffled(document: dict, seed: int) -> dict:
    """The same input listed in another order (scenario.md: same output)."""
    out = copy.deepcopy(document)
    rng = random.Random(seed)
    rng.shuffle(out["tasks"])
    rng.shuffle(out["clients"])
    for row in out["clients"]:
        rng.shuffle(row["prev_active"])
        rng.shuffle(row["prev_standby"])
        row["lags"] = dict(sorted(row["lags"].items(), key=lambda _: rng.random()))
    return out


def settled(document: dict, rounds: int = 12) -> Outcome:
    """Run the group until it stops probing (every assigned replica catching up in between)."""
    first = valid(run(document))
    results, _ = settle(first.problem.tasks, first.problem.clients, first.problem.config, max_rounds=rounds)
    assert not results[-1].probing_rebalance_needed, f"not settled within {rounds} rounds"
    return Outcome(document, first.problem, results[-1], result_to_document(results[-1]))


# ---- HighAvailabilityTaskAssignorTest -------------------------------------------------------------


def test_more_threads_than_tasks_still_spreads_over_clients():
    """shouldAssignActiveStatefulTasksEvenlyOverClientsAndStreamThreadsWithMoreStreamThreadsThanTasks:
    nine tasks, three clients of 60 threads, all equally behind (lag 10, acceptable 0): three
    each, one of each subtopology, final at once."""
    outcome = valid(run(scenario(tasks(NINE), [client(f"c{i}", 60, lags=each(NINE, 10)) for i in range(3)],
                                 acceptable_recovery_lag=0, max_warmup_replicas=1)))
    assert [len(outcome.active(f"c{i}")) for i in range(3)] == [3, 3, 3]
    assert outcome.subtopology_skew() == 0
    assert not outcome.probing and outcome.warmups() == 0


@pytest.mark.parametrize("assignor", ["high_availability", "sticky"])
@pytest.mark.parametrize(("balance_factor", "kept"), [(1, False), (2, True), (3, True)])
def test_balance_factor_decides_whether_stickiness_may_outweigh_balance(assignor, balance_factor, kept):
    """StickyTaskAssignorTest / FallbackPriorTaskAssignorTest.shouldViolateBalanceToPreserveActive
    TaskStickiness: c1 ran all three tasks, c2 just joined. Kafka keeps them on c1 by a "preserve
    actives" mode; the contract's knob for that is KIP-441's balance_factor (scenario.md
    "Balance"): with b >= 2, 3 against 0 is balanced ((3 - b) < (0 + b)), so the previous
    assignment is kept and final; with b = 1 it is not, and c2 must get (or warm up) a task."""
    outcome = valid(run(scenario(tasks(THREE), [client("c1", active=THREE), client("c2")], assignor=assignor,
                                 acceptable_recovery_lag=0, max_warmup_replicas=1, balance_factor=balance_factor)))
    if kept:
        assert outcome.active("c1") == THREE.split() and outcome.assigned("c2") == []
        assert not outcome.probing
    else:
        assert outcome.assigned("c2") != []
        assert outcome.probing == (assignor == "high_availability")


def test_without_lags_the_previous_actives_stay_and_a_probe_follows():
    """FallbackPriorTaskAssignorTest.shouldViolateBalanceToPreserveActiveTaskStickiness: when the
    leader cannot read changelog end offsets, Kafka keeps every previous active and schedules a
    follow-up rebalance. In the contract that is a changelog of unknown size (no
    ``changelog_offsets``): only the running owner is caught up, so it keeps all three, the
    newcomer warms up one (max_warmup_replicas 1) and a probing rebalance is asked for."""
    outcome = valid(run(scenario(tasks(THREE, changelog=None), [client("c1", active=THREE), client("c2")],
                                 max_warmup_replicas=1)))
    assert outcome.active("c1") == THREE.split() and outcome.active("c2") == []
    assert len(outcome.warmup("c2")) == 1
    assert outcome.probing and outcome.output["followup_rebalance_ms"] == 600_000


def test_the_follow_up_is_the_configured_probing_interval():
    """StreamsPartitionAssignorTest.shouldGetNextProbingRebalanceMs / KIP-441
    probing.rebalance.interval.ms: a probing result schedules its follow-up after the configured
    interval (here the smallest allowed, 60 s), and a final one schedules none."""
    probing = valid(run(scenario(tasks(FOUR), [client("c1", active=FOUR), client("c2")], **HA,
                                 probing_rebalance_interval_ms=60_000)))
    assert probing.probing and probing.output["followup_rebalance_ms"] == 60_000
    final = valid(run(scenario(tasks(FOUR), [client("c1", active="0_0 0_1"), client("c2", active="0_2 0_3")], **HA,
                               probing_rebalance_interval_ms=60_000)))
    assert not final.probing and final.output["followup_rebalance_ms"] is None


def test_standbys_prefer_the_next_most_caught_up_clients():
    """KIP-441 "Assignment Algorithm" property 2 (HighAvailabilityTaskAssignorTest's standby
    placement): c1 runs 0_0; c2 is caught up (lag 50 <= 100), c3 lags 5000, c4 has no state. Two
    standbys go to c2 and c3, never to c4; listed in another order (c4 and c2 renamed), they
    follow the lags, not the names."""
    outcome = valid(run(scenario(tasks("0_0"), [client("c1", active="0_0"), client("c2", lags={"0_0": 50}),
                                                client("c3", lags={"0_0": 5000}), client("c4")],
                                 **HA, num_standby_replicas=2)))
    assert outcome.standby_holders("0_0") == {"c2", "c3"} and not outcome.probing
    renamed = valid(run(scenario(tasks("0_0"), [client("c1", active="0_0"), client("c4", lags={"0_0": 50}),
                                                client("c3", lags={"0_0": 5000}), client("c2")],
                                 **HA, num_standby_replicas=2)))
    assert renamed.standby_holders("0_0") == {"c3", "c4"}


@pytest.mark.parametrize("assignor", ["high_availability", "sticky"])
def test_more_standbys_than_clients_can_hold(assignor):
    """HighAvailabilityTaskAssignorTest / StickyTaskAssignorTest, standbys beyond capacity
    (shouldNotAssignStandbyTaskReplicasWhenNoClientAvailableWithoutHavingTheTaskAssigned,
    generalised): five standbys configured, three clients: each task gets one replica on every
    other client (two standbys), never two on one client, and the result is final."""
    outcome = valid(run(scenario(tasks(THREE), [client(f"c{i}", active=f"0_{i}") for i in range(3)],
                                 assignor=assignor, **HA, num_standby_replicas=5)))
    for i in range(3):
        assert outcome.active(f"c{i}") == [f"0_{i}"]
        assert outcome.standby(f"c{i}") == [f"0_{j}" for j in range(3) if j != i]
    assert not outcome.probing


def test_a_newcomer_with_state_for_every_task_takes_its_share_at_once():
    """A client caught up on every task (StickyTaskAssignorTest.shouldAssignTasksNotPreviously
    ActiveToNewClient's c4, under the high-availability assignor): c1 ran six tasks, c2 joins with
    lag 0 on all six. c2 is caught up everywhere, so the balanced split is final at once: three
    actives each, one standby of every task on the other client, no warm-up, no probe."""
    outcome = valid(run(scenario(tasks(SIX), [client("c1", active=SIX), client("c2", lags=each(SIX, 0))],
                                 **HA, num_standby_replicas=1)))
    assert len(outcome.active("c1")) == len(outcome.active("c2")) == 3
    assert set(outcome.active("c1")) == set(outcome.standby("c2"))
    assert set(outcome.active("c2")) == set(outcome.standby("c1"))
    assert outcome.warmups() == 0 and not outcome.probing


def test_one_big_client_and_one_small_one():
    """HighAvailabilityTaskAssignorTest's uneven thread counts, at the extreme (16 threads and 1):
    seventeen stateless tasks are shared by thread share (16 and 1); seventeen stateful tasks that
    only the big client ran stay with it while the small one warms up its one task."""
    ids = " ".join(f"{s}_{p}" for s in range(2) for p in range(8)) + " 2_0"
    fresh = valid(run(scenario(tasks(ids, stateful=False), [client("big", 16), client("small", 1)], **HA)))
    assert (len(fresh.active("big")), len(fresh.active("small"))) == (16, 1) and not fresh.probing
    moving = valid(run(scenario(tasks(ids), [client("big", 16, active=ids), client("small", 1)], **HA)))
    assert len(moving.active("big")) == 17 and moving.active("small") == []
    assert len(moving.warmup("small")) == 1 and moving.probing


# ---- TaskMovementTest -----------------------------------------------------------------------------


def test_nothing_moves_when_every_client_is_caught_up_on_everything():
    """TaskMovementTest.shouldAssignTasksToClientsAndReturnFalseWhenAllClientsCaughtUp: six tasks,
    three clients each running two and caught up on all six, an unlimited warm-up budget: no
    task moves, no warm-up, no probing rebalance."""
    rows = {"c1": "0_0 1_0", "c2": "0_1 1_1", "c3": "0_2 1_2"}
    outcome = valid(run(scenario(tasks(SIX), [client(c, active=a, lags={**each(SIX, 0), **each(a, "latest")})
                                              for c, a in rows.items()],
                                 acceptable_recovery_lag=100, max_warmup_replicas=2**31 - 1)))
    assert {c: " ".join(outcome.active(c)) for c in rows} == rows
    assert outcome.warmups() == 0 and not outcome.probing


def test_with_nobody_caught_up_owners_that_are_least_behind_keep_their_tasks():
    """TaskMovementTest (moves only towards more caught-up clients): nobody is within the
    acceptable lag, but each owner is the least behind on its own task (500 against 900): no
    task moves and, nobody being closer, there is nothing to warm up."""
    outcome = valid(run(scenario(tasks("0_0 0_1"), [client("c1", active="0_0", lags={"0_0": 500, "0_1": 900}),
                                                    client("c2", active="0_1", lags={"0_0": 900, "0_1": 500})],
                                 **HA)))
    assert outcome.active("c1") == ["0_0"] and outcome.active("c2") == ["0_1"]
    assert outcome.warmups() == 0 and not outcome.probing


def test_a_large_budget_places_only_the_warm_ups_balance_needs():
    """TaskMovementTest / HighAvailabilityTaskAssignorTest.shouldNotAssignMoreThanMaxWarmupReplicas,
    the other way round: with a budget of 10, the newcomer warms up exactly the two tasks its
    share needs, and nothing else moves."""
    outcome = valid(run(scenario(tasks(FOUR), [client("c1", active=FOUR), client("c2")],
                                 acceptable_recovery_lag=100, max_warmup_replicas=10)))
    assert outcome.active("c1") == FOUR.split()
    assert len(outcome.warmup("c2")) == 2 and outcome.warmups() == 2 and outcome.probing


# ---- ClientStateTest: what a lag means ------------------------------------------------------------


def test_a_running_active_is_caught_up_even_at_acceptable_lag_zero():
    """ClientStateTest.shouldReturnLatestOffsetForLagOfPreviousActiveRunningTask (Task.LATEST_OFFSET,
    "caught up by definition"): c1 runs 0_0 ("latest"), acceptable_recovery_lag 0, c2 holds a
    standby one offset behind. c1 keeps the task with no warm-up and no probe; c2 keeps its
    standby (one offset behind is not caught up, but it is the only other client)."""
    outcome = valid(run(scenario(tasks("0_0"), [client("c1", active="0_0"), client("c2", standby="0_0",
                                                                                 lags={"0_0": 1})],
                                 acceptable_recovery_lag=0, max_warmup_replicas=1, num_standby_replicas=1)))
    assert outcome.owner("0_0") == "c1" and outcome.standby("c2") == ["0_0"]
    assert outcome.warmups() == 0 and not outcome.probing


@pytest.mark.parametrize(("changelog", "direct"), [(50, True), (100, True), (101, False), (None, False)])
def test_no_state_means_the_whole_changelog(changelog, direct):
    """ClientStateTest.shouldReturnEndOffsetSumForLagOfTaskWeDidNotPreviouslyOwn: a client with no
    state lags by the changelog's end offset sum. With changelogs within the acceptable lag
    (100) a newcomer is caught up and takes its two tasks at once; above it, or unbounded (no
    changelog_offsets), it warms them up first."""
    outcome = valid(run(scenario(tasks(FOUR, changelog=changelog), [client("c1", active=FOUR), client("c2")], **HA)))
    if direct:
        assert len(outcome.active("c2")) == 2 and outcome.warmups() == 0 and not outcome.probing
    else:
        assert outcome.active("c2") == [] and len(outcome.warmup("c2")) == 2 and outcome.probing


def test_a_lag_beyond_the_changelog_counts_as_the_changelog():
    """ClientStateTest.shouldReturnEndOffsetSumIfOffsetSumIsGreaterThanEndOffsetSum: a store that
    claims more than the changelog holds is worth the whole changelog, no more (docs/assignor.md
    "Ranks"). The owner reports lag 500 on a changelog of 50 (acceptable 100): it is caught up
    (worst case 50), so it keeps the task, without a warm-up or probe."""
    outcome = valid(run(scenario(tasks("0_0", changelog=50), [client("c1", active="0_0", lags={"0_0": 500}),
                                                              client("c2", lags={"0_0": 0})],
                                 **HA, num_standby_replicas=1)))
    assert outcome.owner("0_0") == "c1" and outcome.standby("c2") == ["0_0"]
    assert outcome.warmups() == 0 and not outcome.probing


@pytest.mark.parametrize(("changelog", "owner"), [(50, "c1"), (CHANGELOG, "c2"), (None, "c2")])
def test_an_unknown_offset_sum_is_at_most_the_whole_changelog(changelog, owner):
    """ClientStateTest.shouldReturnUnknownOffsetSumForLagOfTaskWithUnknownOffset (the SENTINEL
    offset sum): c1 ran 0_0 but reports state of unknown size, c2 a caught-up standby. On a
    changelog within the acceptable lag, unknown state is caught up (scenario.md) and c1 keeps
    the task; on a large or unbounded one it is not, so c2 takes the active and c1 keeps its
    state as the standby: no warm-up either way."""
    outcome = valid(run(scenario(tasks("0_0", changelog=changelog), [
        client("c1", active="0_0", lags={"0_0": "unknown"}), client("c2", standby="0_0")], **HA, num_standby_replicas=1)))
    assert outcome.owner("0_0") == owner
    assert outcome.standby_holders("0_0") == ({"c1", "c2"} - {owner})
    assert outcome.warmups() == 0 and not outcome.probing


def test_unknown_state_is_a_better_standby_than_none():
    """ClientStateTest's UNKNOWN_OFFSET_SUM ranked (scenario.md): nobody is caught up besides the
    owner; c2 reports state of unknown size, c3 none. The standby goes to c2."""
    outcome = valid(run(scenario(tasks("0_0"), [client("c1", active="0_0"), client("c2", lags={"0_0": "unknown"}),
                                                client("c3")], **HA, num_standby_replicas=1)))
    assert outcome.standby_holders("0_0") == {"c2"}


def states(outcome: Outcome) -> dict[str, ClientState]:
    return {state.id: state for state in outcome.problem.clients}


def test_a_task_reported_latest_is_the_clients_previous_active():
    """ClientStateTest.shouldAddTasksWithLatestOffsetToPrevActiveTasks: a lag of "latest" means
    the client runs the task as a caught-up active (scenario.md "lags"), so it counts among its
    previous actives even where ``prev_active`` leaves it out (KIP-441 "Rebalance Metadata": the
    lags subsume the previous tasks). A balanced, caught-up group then keeps every active where
    it runs, as the group protocol's path (``ClientState.from_report``) does."""
    document = scenario(tasks(FOUR), [client("c2", lags={"0_0": "latest", "0_1": "latest", "0_2": 0, "0_3": 0}),
                                      client("c1", lags={"0_0": 0, "0_1": 0, "0_2": "latest", "0_3": "latest"})],
                        num_standby_replicas=1, **HA)
    outcome = valid(run(document))
    assert outcome.active("c2") == ["0_0", "0_1"] and outcome.active("c1") == ["0_2", "0_3"]
    assert outcome.standby("c2") == ["0_2", "0_3"] and not outcome.probing
    alone = valid(run(scenario(tasks("0_0"), [client("c1", lags={"0_0": "latest"}),
                                               client("c2", standby="0_0", lags={"0_0": 0})], **HA)))
    assert alone.active("c1") == ["0_0"]


def test_who_keeps_a_task_several_clients_claim():
    """A task listed in one client's ``prev_active`` stays that client's, whoever else reports it
    "latest"; reported "latest" by several clients and listed by none, the first by id keeps the
    claim (``Group.of``'s rule for a group that split), in any listing order, and the others hold
    a caught-up standby of it (as the group protocol's path makes a zombie's copy); a task listed
    as a standby but reported "latest" counts as an active."""
    listed = run(scenario(tasks("0_0"), [client("b", active="0_0"), client("a", lags={"0_0": "latest"})]))
    assert states(listed)["b"].prev_active == {TaskId(0, 0)}
    assert states(listed)["a"].prev_active == frozenset() and states(listed)["a"].prev_standby == {TaskId(0, 0)}
    both = scenario(tasks("0_0"), [client("b", lags={"0_0": "latest"}), client("a", lags={"0_0": "latest"})])
    for seed in range(3):
        claimed = states(run(shuffled(both, seed)))
        assert claimed["a"].prev_active == {TaskId(0, 0)} and claimed["b"].prev_active == frozenset()
        assert claimed["b"].prev_standby == {TaskId(0, 0)} and claimed["a"].prev_standby == frozenset()
    standby = states(run(scenario(tasks("0_0"), [client("a", standby="0_0", lags={"0_0": "latest"})])))["a"]
    assert standby.prev_active == {TaskId(0, 0)} and standby.prev_standby == frozenset()


def test_a_parsed_problem_written_back_reads_the_same():
    """``problem_to_document`` writes the claims ``parse_problem`` inferred as ``prev_active``: the
    rebalance log and the simulator read back the same problem, never an invalid document."""
    document = scenario(tasks(FOUR), [client("b", lags={"0_0": "latest", "0_1": "latest"}),
                                      client("a", lags={"0_0": "latest", "0_2": "latest"})])
    problem = run(document).problem
    assert parse_problem(problem_to_document(problem)) == problem


# ---- lag ties -------------------------------------------------------------------------------------


def test_a_lag_tie_is_broken_the_same_way_whatever_the_listing_order():
    """Ties in Kafka's ranking (shouldRankNotCaughtUpClientsAccordingToLag with equal lags): c2 and
    c3 both lag 5000, c1 has no state. The active and the standby go to c2 and c3 (one each,
    KIP-441 properties 1 and 2), and the same input listed in any order gives the same output
    (scenario.md)."""
    document = scenario(tasks("0_0"), [client("c1"), client("c2", lags={"0_0": 5000}),
                                       client("c3", lags={"0_0": 5000})], **HA, num_standby_replicas=1)
    outcome = valid(run(document))
    assert {outcome.owner("0_0")} | outcome.standby_holders("0_0") == {"c2", "c3"}
    assert not outcome.probing
    for seed in range(5):
        assert run(shuffled(document, seed)).output == outcome.output


@pytest.mark.parametrize("owner", ["c1", "c2"])
def test_an_owner_tied_with_another_lagging_client_keeps_its_task(owner):
    """KIP-441 property 6 (stability) on a lag tie: both clients lag 5000 on 0_0 (not caught up);
    the one that ran it keeps it, whichever it is."""
    other = {"c1": "c2", "c2": "c1"}[owner]
    outcome = valid(run(scenario(tasks("0_0 0_1"), [client(owner, active="0_0", lags={"0_0": 5000}),
                                                    client(other, active="0_1", lags={"0_0": 5000})], **HA)))
    assert outcome.owner("0_0") == owner and outcome.owner("0_1") == other
    assert not outcome.probing


# ---- the default standby assignment / ClientTagAwareStandbyTaskAssignorTest (KIP-708) -------------


def test_standbys_go_to_the_least_loaded_clients():
    """Kafka's default standby assignment (least-loaded clients first): c1 runs two tasks, c2 and
    c3 one each, every client caught up on everything; one standby per task. The stateful
    replicas end balanced (2 or 3 each with 4 actives + 4 standbys on 3 clients) and c1, already
    the most loaded, holds the fewest standbys."""
    ids = "0_0 0_1 0_2 0_3"
    lag0 = each(ids, 0)
    outcome = valid(run(scenario(tasks(ids), [client("c1", active="0_0 0_1", lags=lag0), client("c2", active="0_2", lags=lag0),
                                              client("c3", active="0_3", lags=lag0)], **HA, num_standby_replicas=1)))
    replicas = {c: len(outcome.active(c)) + len(outcome.standby(c)) for c in outcome.clients}
    assert sorted(replicas.values()) == [2, 3, 3]
    assert len(outcome.standby("c1")) == min(len(outcome.standby(c)) for c in outcome.clients)


def zoned(client_id: str, zone: str | None, **rest) -> dict:
    return client(client_id, tags={} if zone is None else {"zone": zone}, **rest)


ZONE = {"rack_aware_assignment_tags": ["zone"]}


def test_two_standbys_in_two_zones_are_all_placed():
    """ClientTagAwareStandbyTaskAssignorTest, a constraint that cannot be met (KIP-708: "best
    effort"): two zones, two standbys, so every task's three replicas cannot sit in three zones.
    Every standby is still placed, and every task uses both zones."""
    outcome = valid(run(scenario(tasks(SIX), [zoned(f"p{i}", f"z{i % 2}") for i in range(4)],
                                 num_standby_replicas=2, **ZONE)))
    for task in SIX.split():
        assert len(outcome.standby_holders(task)) == 2
        assert set(outcome.locations(task, "zone")) == {"z0", "z1"}, task


def test_one_zone_for_everyone_still_gets_every_standby():
    """ClientTagAwareStandbyTaskAssignorTest.shouldDistributeStandbyTasksOnLeastLoadedClientsWhen
    ClientsAreNotOnDifferentTagDimensions, with two standbys on three clients of one zone: the tag
    rule cannot be met at all, every standby is placed anyway, one active and two standbys each."""
    outcome = valid(run(scenario(tasks(THREE), [zoned(f"p{i}", "z") for i in range(3)], num_standby_replicas=2, **ZONE)))
    assert all(len(outcome.active(c)) == 1 and len(outcome.standby(c)) == 2 for c in outcome.clients)


def test_tags_with_more_standbys_than_clients():
    """ClientTagAwareStandbyTaskAssignorTest.shouldNotAssignStandbyTasksIfThereAreNoEnoughClients,
    with some clients: five standbys, three clients in three zones: each task two standbys, one
    in each other zone."""
    outcome = valid(run(scenario(tasks(THREE), [zoned(f"p{i}", f"z{i}", active=f"0_{i}") for i in range(3)],
                                 num_standby_replicas=5, **ZONE)))
    for task in THREE.split():
        assert sorted(outcome.locations(task, "zone")) == ["z0", "z1", "z2"]


def test_a_client_without_the_tag_is_a_location_of_its_own():
    """ClientTagAwareStandbyTaskAssignorTest, a client whose tags lack a configured key
    (docs/rack-awareness.md: it counts as the value ""): p0 runs both tasks in zone z1, p1 is
    also in z1, p2 has no zone. One of the two standbys goes to p2, off the active's zone."""
    outcome = valid(run(scenario(tasks("0_0 0_1"), [zoned("p0", "z1", active="0_0 0_1"), zoned("p1", "z1"),
                                                    zoned("p2", None)], num_standby_replicas=1, **ZONE)))
    assert sum("" in outcome.locations(t, "zone") for t in ("0_0", "0_1")) >= 1
    assert outcome.standby("p2") != []


def test_a_settled_tag_spread_is_not_moved():
    """ClientTagAwareStandbyTaskAssignorTest.shouldDeclineTaskMovementWhenClientTagsDoNotMatch /
    shouldPermitTaskMovementWhenClientTagsMatch: balancing never trades a standby's zone spread
    away. A group in three zones, each standby in another zone than its active, balanced and
    caught up, fed back: returned unchanged (KIP-441 property 5)."""
    rows = [zoned("p0", "z0", active="0_0", standby="0_1"), zoned("p1", "z1", active="0_1", standby="0_2"),
            zoned("p2", "z2", active="0_2", standby="0_0")]
    outcome = valid(run(scenario(tasks(THREE), rows, num_standby_replicas=1, **ZONE)))
    for i in range(3):
        assert outcome.active(f"p{i}") == [f"0_{i}"] and outcome.standby(f"p{i}") == [f"0_{(i + 1) % 3}"]
    assert not outcome.probing


# ---- RackAwareTaskAssignorTest (KIP-925) ----------------------------------------------------------

RACK_IDS = "0_0 0_1 0_2 0_3 1_0 1_1 1_2 1_3"
RACK_OF = {"c0": "r0", "c1": "r1", "c2": "r0", "c3": "r1"}


def rack_group(strategy: str, stateful: bool, **config) -> dict:
    """Subtopology 0 reads topic t0, all on rack r0; subtopology 1 reads t1, all on r1; two
    clients per rack, fresh."""
    documents = tasks(RACK_IDS, stateful=stateful)
    for t in documents:
        s, p = t["id"].split("_")
        t["partitions"] = [{"topic": f"t{s}", "partition": int(p), "racks": [f"r{s}"]}]
    return scenario(documents, [client(c, rack=r) for c, r in RACK_OF.items()], rack_aware_strategy=strategy, **config)


def cross_rack(outcome: Outcome) -> int:
    return sum(RACK_OF[c] != f"r{t[0]}" for c in outcome.clients for t in outcome.active(c))


@pytest.mark.parametrize("stateful", [True, False])
def test_min_traffic_and_balance_subtopology_on_the_same_input(stateful):
    """RackAwareTaskAssignorTest.shouldOptimizeActiveTasks / ...BalanceSubtopology on one input
    (KIP-925 4.B.I vs 4.B.II): min_traffic reads nothing across racks (each rack's clients take
    the subtopology whose partitions it holds); balance_subtopology keeps the cap of
    ceil(4 x 1 / 4) = 1 task of each subtopology per client, and so pays some cross-rack reads,
    never fewer than min_traffic. Both keep each client's count of actives (two)."""
    traffic = valid(run(rack_group("min_traffic", stateful)))
    spread = valid(run(rack_group("balance_subtopology", stateful)))
    plain = valid(run(rack_group("none", stateful)))
    assert cross_rack(traffic) == 0 < cross_rack(spread) <= cross_rack(plain)
    for c in RACK_OF:
        assert len(traffic.active(c)) == len(spread.active(c)) == 2
        assert sorted(t[0] for t in spread.active(c)) == ["0", "1"]
    assert spread.subtopology_skew() == 0
    assert traffic.result.rack_awareness.cross_rack_after == 0


def test_two_rack_standbys_in_two_racks_are_all_placed():
    """RackAwareTaskAssignorTest.shouldOptimizeStandbyTasks... with a rack constraint that cannot
    be met: two standbys, two racks. Every standby is placed and every task has replicas in both
    racks (KIP-925 C: spread as far as racks allow)."""
    outcome = valid(run(rack_group("min_traffic", True, num_standby_replicas=2)))
    for task in RACK_IDS.split():
        holders = {outcome.owner(task)} | outcome.standby_holders(task)
        assert len(holders) == 3 and {RACK_OF[h] for h in holders} == {"r0", "r1"}, task


def tags_against_traffic(zones: dict[str, str]) -> dict:
    """Two racks; subtopology 0 reads partitions on r0 only. a and c sit in r0, b and d in r1;
    each client runs one task and is caught up on all four (so no readiness rule decides)."""
    racks = {"a": "r0", "c": "r0", "b": "r1", "d": "r1"}
    owned = {"a": "0_0", "c": "0_1", "b": "0_2", "d": "0_3"}
    documents = tasks(FOUR)
    for t in documents:
        t["partitions"] = [{"topic": "t0", "partition": int(t["id"][2]), "racks": ["r0" if t["id"] < "0_2" else "r1"]}]
    rows = [client(c, rack=racks[c], tags={"zone": zones[c]}, active=owned[c],
                   lags={**each(FOUR, 0), owned[c]: "latest"}) for c in racks]
    return scenario(documents, rows, **HA, num_standby_replicas=1, rack_aware_strategy="min_traffic",
                    rack_aware_assignment_tags=["zone"])


def standby_cross_rack(outcome: Outcome) -> int:
    racks = {row["id"]: row["rack"] for row in outcome.document["clients"]}
    return sum(racks[c] != ("r0" if t < "0_2" else "r1") for c in outcome.clients for t in outcome.standby(c))


def test_standby_tags_win_over_traffic():
    """RackAwareTaskAssignorTest.shouldOptimizeStandbyTasksWithMovingConstraint (KIP-925 C.I, D.IV:
    reliability over cost; a standby may only trade places where the tag rule allows): zones
    follow racks (z0 = r0), so every standby in another zone than its active reads across racks:
    all four do, every task spans both zones. The same group in one zone has no tag constraint,
    and the traffic pass puts every standby in its partition's rack: none reads across."""
    spread = valid(run(tags_against_traffic({"a": "z0", "c": "z0", "b": "z1", "d": "z1"})))
    for task in FOUR.split():
        assert sorted(spread.locations(task, "zone")) == ["z0", "z1"], task
    assert standby_cross_rack(spread) == 4
    one_zone = valid(run(tags_against_traffic(dict.fromkeys("acbd", "z"))))
    assert standby_cross_rack(one_zone) == 0 and not one_zone.probing


def test_a_settled_group_is_not_reshaped_by_a_rack_strategy():
    """HighAvailabilityTaskAssignorTest with a rack strategy, on a settled group. Kafka's assignor
    re-optimises traffic on every rebalance and would swap the two tasks here (each client runs
    the task whose partition is in the other rack). docs/rack-awareness.md, "Stand-down": a
    balanced, caught-up previous assignment is returned unchanged before rack awareness runs
    (KIP-441 property 5), so ours keeps it: the documented rule is checked."""
    documents = tasks("0_0 0_1")
    for t, rack in zip(documents, ("r0", "r1"), strict=True):
        t["partitions"] = [{"topic": "t0", "partition": int(t["id"][2]), "racks": [rack]}]
    outcome = valid(run(scenario(documents, [client("c1", rack="r1", active="0_0", standby="0_1"),
                                             client("c2", rack="r0", active="0_1", standby="0_0")],
                                 **HA, num_standby_replicas=1, rack_aware_strategy="min_traffic")))
    assert outcome.active("c1") == ["0_0"] and outcome.active("c2") == ["0_1"] and not outcome.probing
    assert outcome.result.rack_awareness.disabled_reason.startswith("assignment already balanced")


def test_a_newcomer_warms_up_its_rack_local_task():
    """RackAwareTaskAssignorTest.shouldOptimizeActiveTasks seen through the high-availability
    assignor (docs/rack-awareness.md: "a fresh client's share is still filled with the rack-best
    tasks"): c1 (rack r1) runs both tasks; newcomer c2 sits in r0. Whichever task reads from
    r0 is the one c2 warms up."""
    for local in ("0_0", "0_1"):
        documents = tasks("0_0 0_1")
        for t in documents:
            t["partitions"] = [{"topic": "t0", "partition": int(t["id"][2]), "racks": ["r0" if t["id"] == local else "r1"]}]
        outcome = valid(run(scenario(documents, [client("c1", rack="r1", active="0_0 0_1"), client("c2", rack="r0")],
                                     **HA, rack_aware_strategy="min_traffic")))
        assert outcome.active("c1") == ["0_0", "0_1"] and outcome.warmup("c2") == [local] and outcome.probing


def test_a_tagged_newcomer_restores_only_what_balance_needs():
    """ClientTagAwareStandbyTaskAssignorTest (standbys in another zone than their active), against
    a caught-up group: p0 and p1 in zone z0 run 0_0 and 0_1 and hold each other's standby; p2
    joins in z1. Kafka's tag-aware assignor would give p2 both standbys (both tasks spread over
    two zones). docs/rack-awareness.md, "Standbys": with the high-availability assignor no
    standby moves for spread alone if it must restore, and the lag-aware target restores as
    little as balance needs (one replica for p2). Checked: one warm-up, settled in two rounds,
    p2 holding exactly one standby, which is in another zone than its active."""
    document = scenario(tasks("0_0 0_1"), [zoned("p0", "z0", active="0_0", standby="0_1"),
                                           zoned("p1", "z0", active="0_1", standby="0_0"), zoned("p2", "z1")],
                        **HA, num_standby_replicas=1, **ZONE)
    first = valid(run(document))
    assert first.warmups() == 1 and first.probing
    final = settled(document, rounds=2)
    (moved,) = final.standby("p2")
    assert sorted(final.locations(moved, "zone")) == ["z0", "z1"]


@pytest.mark.parametrize(("ids", "threads", "per_client"), [
    pytest.param("0_0 0_1 0_2 0_3 0_4 0_5", [3, 3], [(3, 3), (3, 3)], id="testAssignWithStandbyReplicasBalanceDense"),
    pytest.param("0_0 0_1", [4, 4, 4, 4], None, id="testAssignWithStandbyReplicasBalanceSparse"),
])
def test_standby_replicas_balance(ids, threads, per_client):
    """StreamsPartitionAssignorTest.testAssignWithStandbyReplicasBalance{Dense,Sparse}: fresh
    groups with one standby: dense, two clients of three threads share six tasks three and three
    with the other three as standbys; sparse, four clients and two tasks: every client holds
    exactly one replica, active or standby."""
    outcome = valid(run(scenario(tasks(ids), [client(f"c{i}", t) for i, t in enumerate(threads)], **HA,
                                 num_standby_replicas=1)))
    if per_client:
        assert [(len(outcome.active(c)), len(outcome.standby(c))) for c in outcome.clients] == per_client
    else:
        assert all(len(outcome.assigned(c)) == 1 for c in outcome.clients)
    assert not outcome.probing


def test_tasks_nobody_is_caught_up_on_are_assigned_at_once():
    """StreamsPartitionAssignorTest / HighAvailabilityTaskAssignorTest.shouldAssignActiveTasksToNot
    CaughtUpClientIfNoneExist, with two clients and no changelog sizes (unbounded): the clients
    that ran the tasks are gone, nobody has state, so every client is equally (un)ready. The
    balanced assignment is placed directly (KIP-441 property 1: the most caught-up clients are
    all of them): no warm-up, no probing rebalance."""
    outcome = valid(run(scenario(tasks(THREE, changelog=None), [client("c2"), client("c3")], **HA,
                                 num_standby_replicas=1)))
    assert sorted(len(outcome.active(c)) for c in outcome.clients) == [1, 2]
    assert outcome.warmups() == 0 and not outcome.probing


# ---- AssignorConfigurationTest / StreamsConfigTest: config validation -----------------------------


def cli(document: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "assignor", "-"], input=json.dumps(document), capture_output=True,
                          text=True, cwd=ROOT, timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def one_task(config: dict | None = None, lags: dict | None = None) -> dict:
    return {"version": 1, "config": config or {}, "tasks": [{"id": "0_0", "stateful": True}],
            "clients": [{"id": "a", "lags": lags or {}}]}


@pytest.mark.parametrize(("document", "field"), [
    pytest.param(one_task({"num_standby_replicas": -1}), "config.num_standby_replicas", id="negative-standbys"),
    pytest.param(one_task({"max_warmup_replicas": -1}), "config.max_warmup_replicas", id="configsShouldRejectZeroWarmups-negative"),
    pytest.param(one_task({"probing_rebalance_interval_ms": 59_999}), "config.probing_rebalance_interval_ms",
                 id="probing-interval-below-one-minute"),
    pytest.param(one_task({"rack_aware_traffic_cost": -1}), "config.rack_aware_traffic_cost", id="negative-traffic-cost"),
    pytest.param(one_task({"rack_aware_non_overlap_cost": -1}), "config.rack_aware_non_overlap_cost",
                 id="negative-non-overlap-cost"),
    pytest.param(one_task({"rack_aware_assignment_tags": "zone"}), "config.rack_aware_assignment_tags",
                 id="tags-not-a-list"),
    pytest.param(one_task(lags={"0_0": -2}), "clients[0].lags.0_0", id="raw-LATEST_OFFSET-sentinel"),
    pytest.param(one_task(lags={"0_0": -3}), "clients[0].lags.0_0", id="raw-UNKNOWN_OFFSET_SUM-sentinel"),
    pytest.param(one_task(lags={"1_0": 5}), "clients[0].lags.1_0", id="shouldThrowIllegalStateExceptionOnLagForUnknownTask"),
])
def test_invalid_configuration_exits_2_naming_the_field(document, field):
    """What Kafka's config and ClientState refuse: exit 2, one line on stderr naming the field
    (scenario.md). Kafka's raw sentinels (-2 latest, -3 unknown) are spelt "latest" and
    "unknown" in the contract; as numbers they are negative lags."""
    done = cli(document)
    assert done.returncode == 2 and done.stdout == ""
    assert field in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_the_smallest_probing_interval_is_accepted():
    """StreamsConfig's lower bound for probing.rebalance.interval.ms is one minute, inclusive."""
    done = cli(one_task({"probing_rebalance_interval_ms": 60_000}))
    assert done.returncode == 0 and json.loads(done.stdout)["clients"]["a"]["active"] == ["0_0"]


# ---- StreamsPartitionAssignorTest (assignment-level situations) -----------------------------------


def test_no_tasks_at_all():
    """StreamsPartitionAssignorTest.testAssignEmptyMetadata: nothing to assign; every client still
    appears, with empty lists, and nothing is scheduled."""
    outcome = valid(run({"version": 1, "config": {}, "tasks": [], "clients": [{"id": "a"}, {"id": "b", "threads": 3}]}))
    assert outcome.output["clients"] == {c: {"active": [], "standby": [], "warmup": []} for c in ("a", "b")}
    assert not outcome.probing


def test_new_tasks_join_without_moving_the_old_ones():
    """StreamsPartitionAssignorTest.testAssignWithNewTasks: two clients ran a stateless
    subtopology; a new subtopology of four tasks appears. The old tasks stay put and the new
    ones are shared two and two."""
    ids = "0_0 0_1 0_2 0_3 1_0 1_1 1_2 1_3"
    outcome = valid(run(scenario(tasks(ids, stateful=False), [client("c1", active="0_0 0_1"),
                                                              client("c2", active="0_2 0_3")], **HA)))
    assert {"0_0", "0_1"} <= set(outcome.active("c1")) and {"0_2", "0_3"} <= set(outcome.active("c2"))
    assert len(outcome.active("c1")) == len(outcome.active("c2")) == 4 and not outcome.probing


def test_fresh_stateful_group_spreads_every_subtopology():
    """StreamsPartitionAssignorTest.testAssignWithStates: three stateful subtopologies of three
    partitions on three fresh clients: three tasks each, one of each subtopology, with one
    standby per task on another client; nothing to warm up (nobody has state)."""
    outcome = valid(run(scenario(tasks(NINE), [client(f"c{i}", 2) for i in range(3)], **HA, num_standby_replicas=1)))
    assert all(sorted(t[0] for t in outcome.active(c)) == ["0", "1", "2"] for c in outcome.clients)
    assert all(len(outcome.standby(c)) == 3 for c in outcome.clients)
    assert not outcome.probing and outcome.warmups() == 0


def test_standbys_only_for_the_stateful_part_of_a_mix():
    """StreamsPartitionAssignorTest.testAssignWithStandbyReplicasAndStatelessTasks /
    ...LoggingDisabled (a task whose stores log nothing is placed as stateless, docs/protocol.md):
    three stateless and three stateful tasks, two standbys configured, three clients: each
    stateful task gets its two standbys, no stateless one gets any, and actives are balanced."""
    documents = tasks("0_0 0_1 0_2", stateful=False) + tasks("1_0 1_1 1_2")
    outcome = valid(run(scenario(documents, [client(f"c{i}") for i in range(3)], **HA, num_standby_replicas=2)))
    for c in outcome.clients:
        assert len(outcome.active(c)) == 2
        assert outcome.standby(c) == [t for t in ("1_0", "1_1", "1_2") if t not in outcome.active(c)]


def test_newly_created_changelogs_need_no_warm_up():
    """StreamsPartitionAssignorTest.shouldSkipListOffsetsRequestForNewlyCreatedChangelogTopics: a
    changelog just created has end offset 0, so every client is caught up on it
    (docs/assignor.md "Ranks": a changelog of 0). c1 ran all four; two newcomers take their share
    and their standbys at once, even at acceptable_recovery_lag 0."""
    outcome = valid(run(scenario(tasks(FOUR, changelog=0), [client("c1", active=FOUR), client("c2"), client("c3")],
                                 acceptable_recovery_lag=0, max_warmup_replicas=1, num_standby_replicas=1)))
    assert sorted(len(outcome.active(c)) for c in outcome.clients) == [1, 1, 2]
    assert outcome.warmups() == 0 and not outcome.probing


def test_uneven_threads_with_a_stateful_and_stateless_mix():
    """StreamsPartitionAssignorTest's uneven thread counts (one client of one thread, one of three)
    on a fresh mix of four stateful and four stateless tasks: actives by thread share (2 and 6),
    final at once."""
    documents = tasks("0_0 0_1 0_2 0_3") + tasks("1_0 1_1 1_2 1_3", stateful=False)
    outcome = valid(run(scenario(documents, [client("one", 1), client("three", 3)], **HA)))
    assert (len(outcome.active("one")), len(outcome.active("three"))) == (2, 6)
    assert not outcome.probing


@pytest.mark.parametrize("standbys", [0, 2])
def test_stateless_only_group_with_more_clients_than_tasks(standbys):
    """HighAvailabilityTaskAssignorTest.shouldNotAssignStandbysForStatelessTasks, on a stateless-only
    group with more clients than tasks and uneven threads (8, 1, 1, 1, 1), standbys configured or
    not: every task runs once, no one-thread client runs two, nobody holds a standby or warm-up,
    and nothing probes."""
    outcome = valid(run(scenario(tasks(THREE, stateful=False), [client("c0", 8)] + [client(f"c{i}") for i in range(1, 5)],
                                 **HA, num_standby_replicas=standbys)))
    assert sum(len(outcome.active(c)) for c in outcome.clients) == 3
    assert all(outcome.standby(c) == [] and outcome.warmup(c) == [] for c in outcome.clients)
    assert all(len(outcome.active(c)) <= 1 for c in outcome.clients if c != "c0")
    assert not outcome.probing


# ---- TaskAssignorConvergenceTest -----------------------------------------------------------------


def back_with_unknown_state(gone: ClientState, members: list[ClientState]) -> ClientState:
    """A client that left comes back reporting state of unknown size for everything it held
    (Kafka's UNKNOWN_OFFSET_SUM after an unclean shutdown), and no running task."""
    held = gone.prev_active | gone.prev_standby
    return replace(gone, prev_active=frozenset(), prev_standby=frozenset(held),
                   lags=MappingProxyType({task: UNKNOWN for task in held if task in gone.lags}))


def scaling_events(seed: int, strategy: str) -> None:
    """randomClusterPerturbationsShouldConverge with what test_kafka_convergence.py does not draw:
    standbys beyond the group (size to size + 2), clients of one thread beside clients of ten,
    and clients coming back with state of unknown size. Kafka's bound: 2 x stateful x (1 +
    standbys) assignments per event."""
    rng = random.Random(seed)
    size, stateless, stateful = rng.randint(2, 10), rng.randint(1, 10), rng.randint(1, 10)
    config = AssignmentConfig(acceptable_recovery_lag=100, max_warmup_replicas=rng.randint(1, stateful),
                              num_standby_replicas=rng.randint(size, size + 2), rack_aware_strategy=strategy)
    task_specs = kafka_tasks(stateless, stateful, rng)
    serial = iter(range(1000))
    clients = [new_client(f"c{next(serial):03d}", rng.choice([1, 10]), rng) for _ in range(size)]
    clients = converge(task_specs, clients, config, 1, f"seed {seed} initial")
    dropped: dict[str, ClientState] = {}
    for event in range(rng.randint(2, 5)):
        if rng.randrange(2) == 0 and len(clients) > 1:
            for _ in range(rng.randint(1, len(clients) - 1)):
                gone = clients.pop(rng.randrange(len(clients)))
                dropped[gone.id] = gone
        else:
            for _ in range(rng.randint(1, 3)):
                if dropped and rng.random() < 0.6:
                    clients.append(back_with_unknown_state(dropped.pop(rng.choice(sorted(dropped))), clients))
                else:
                    clients.append(new_client(f"c{next(serial):03d}", rng.choice([1, 10]), rng))
        standbys = min(config.num_standby_replicas, len(clients) - 1)
        clients = converge(task_specs, clients, config, 2 * stateful * (1 + standbys), f"seed {seed} event {event}")


@pytest.mark.parametrize("strategy", ["none", "min_traffic", "balance_subtopology"])
@pytest.mark.parametrize("seed", range(40))
def test_scaling_events_with_excess_standbys_and_unknown_state_converge(seed, strategy):
    scaling_events(1000 + seed, strategy)
