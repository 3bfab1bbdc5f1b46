"""The demo's simulation, its choice of victim, and (slow) the whole demo against a real server."""

from __future__ import annotations

import pytest

from assignor.cluster import MemberAssignment
from assignor.lag import Lag
from assignor.model import LATEST, StateStore, TaskId
from assignor.topology import Subtopology, Topology
from client.assignment import EMPTY_ASSIGNMENT, diff
from client.demo import Changelogs, DemoOptions, SimulatedWorker, choose_victim, run, warmup_status
from remote_leader.v1 import assignment_pb2 as apb
from remote_leader.v1 import group_leader_pb2 as pb

T = [TaskId(0, p) for p in range(4)]
TOPOLOGY = Topology.of("demo", (Subtopology.of(0, ("orders",), 4, (StateStore("counts"),)),))


def worker(restore_rate=1_000, write_rate=0):
    changelogs = Changelogs(tuple(T), initial=5_000, write_rate=write_rate)
    return SimulatedWorker("I1", TOPOLOGY, changelogs, restore_rate), changelogs


def test_restoring_replicas_catch_up_at_the_restore_rate_and_actives_then_run():
    w, _ = worker()
    w.seed_caught_up((T[2],))
    w.on_assignment(diff(EMPTY_ASSIGNMENT, MemberAssignment(1, active=(T[0],), standby=(T[1],))))
    assert w.task_lags() == {T[0]: Lag.behind(5_000), T[1]: Lag.behind(5_000), T[2]: Lag.behind(0)}
    w.tick(2.0)
    assert w.task_lags() == {T[0]: Lag.behind(3_000), T[1]: Lag.behind(3_000), T[2]: Lag.behind(0)}
    w.tick(3.0)
    assert w.task_lags() == {T[0]: LATEST, T[1]: Lag.behind(0), T[2]: Lag.behind(0)}
    assert w.in_sync()


def test_paused_standbys_fall_behind_and_unassigned_state_can_be_forgotten():
    w, changelogs = worker(write_rate=100)
    w.seed_caught_up(tuple(T))
    w.on_assignment(diff(EMPTY_ASSIGNMENT, MemberAssignment(1, active=(T[0],), standby=(T[1],))))
    w.tick(0.01)
    w.replication_paused = True
    changelogs.burst(4_000)
    changelogs.tick(1.0)  # and 100 more written in a second
    w.tick(1.0)
    lags = w.task_lags()
    assert lags[T[0]] == LATEST and lags[T[1]] == Lag.behind(4_100)
    w.forget_unassigned()
    assert set(w.task_lags()) == {T[0], T[1]}


def member(name, active, standby):
    return pb.MemberDescription(
        group_instance_id=name,
        active=[apb.TaskId(subtopology=0, partition=t.partition) for t in active],
        standby=[apb.TaskId(subtopology=0, partition=t.partition) for t in standby])


def test_victim_is_the_kip441_pt2_instance_in_the_kips_own_layout():
    # KIP-441 "Scaling In (Pt. 2)", initial state (T1..T4 = 0_0..0_3): losing I1 puts T1 and T4
    # on I2, the holder of their standbys: 3 actives against 1.
    group = pb.GroupDescription(members=[
        member("I1", [T[0], T[3]], [T[2]]),
        member("I2", [T[1]], [T[0], T[3]]),
        member("I3", [T[2]], [T[1]]),
    ])
    assert choose_victim(group) == "I1"


@pytest.mark.parametrize(("field", "value"), [("restore_rate", 0), ("timeout_s", 0), ("acceptable_recovery_lag", -1)])
def test_demo_options_name_bad_values(field, value):
    with pytest.raises(ValueError, match=field.replace("_", "-")):
        DemoOptions(**{field: value})


@pytest.mark.slow
async def test_the_whole_demo_passes_against_a_real_server(leader):
    assert await run(DemoOptions(server=leader.address, restore_rate=40_000, timeout_s=50)) == 0


def test_demo_tls_starts_a_server_of_its_own():
    with pytest.raises(ValueError, match="--tls"):
        DemoOptions(server="127.0.0.1:1", tls=True)


def test_warmup_status_shows_a_warm_ups_lag():
    lagging = pb.MemberDescription(group_instance_id="I3", warmup=[apb.TaskId(subtopology=0, partition=1)],
                                   lags=[apb.TaskLag(task=apb.TaskId(subtopology=0, partition=1), lag=1_500)])
    status = warmup_status(pb.GroupDescription(generation_id=4, members=[lagging]), 2_000)
    assert status.endswith("warm-ups: I3 0_1 lag 1,500")


@pytest.mark.slow
async def test_the_whole_demo_passes_over_mtls_with_its_own_ca():
    assert await run(DemoOptions(tls=True, restore_rate=40_000, timeout_s=50)) == 0
