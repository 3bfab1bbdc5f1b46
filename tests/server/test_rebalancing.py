"""End to end over a real server: KIP-441 "Scaling Out", probing rebalances and the early probe.

Expectations are written from the KIP's scenario, never computed with the server's code.
"""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from remote_leader.v1 import errors_pb2 as epb
from remote_leader.v1 import group_leader_pb2 as pb
from tests.server.harness import LATEST, Worker, lags, rebalance, run_for, settle

PROBE_INTERVAL_MS = 600_000
MIN_PROBE_INTERVAL_MS = 60_000
INITIAL_DELAY_MS = 3_000


async def _rebalance_log(leader, generation: int) -> list[str]:
    """The rebalance log's lines once the line of ``generation`` is written: the server writes
    the log off the event loop, after answering (server.observability.RebalanceLog)."""
    path = leader.state_dir / "rebalance-log" / "rebalances.jsonl"
    for _ in range(500):
        lines = path.read_text().splitlines() if path.exists() else []
        if any(json.loads(line)["generation"] == generation for line in lines):
            return lines
        await asyncio.sleep(0.01)
    raise AssertionError(f"no rebalance-log line for generation {generation} after 5 s")


async def _scaled_out(leader, probe_interval_ms: int | None = None) -> tuple[Worker, Worker, Worker]:
    """KIP-441 "Scaling Out": I1 runs T1, T3 and stands by for T2; I2 runs T2 and stands by for
    T1, T3; a fresh I3 joins. Returns the three workers after I3's rebalance."""
    from remote_leader.v1 import assignment_pb2 as apb

    config = apb.AssignmentConfig(acceptable_recovery_lag=100, num_standby_replicas=1, max_warmup_replicas=2,
                                  probing_rebalance_interval_ms=probe_interval_ms)
    i1 = leader.worker(process_id="00000000-0000-0000-0000-000000000001", port=7001, config=config,
                       task_lags={"0_0": LATEST, "0_2": LATEST, "0_1": 0})
    i2 = leader.worker(process_id="00000000-0000-0000-0000-000000000002", port=7002, config=config,
                       task_lags={"0_1": LATEST, "0_0": 0, "0_2": 0})
    await rebalance(leader.clock, [i1, i2], advance_ms=INITIAL_DELAY_MS)
    assert sorted(i1.active()) == ["0_0", "0_2"] and i2.active() == ["0_1"]
    i1.runs_as_caught_up()
    i2.runs_as_caught_up()
    i3 = leader.worker(process_id="00000000-0000-0000-0000-000000000003", port=7003, config=config)
    import asyncio

    joining = asyncio.create_task(i3.join())
    await settle()
    # The running members learn of the rebalance through their heartbeat.
    assert (await i1.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
    assert (await i2.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
    await rebalance(leader.clock, [i1, i2])
    await joining
    assert (await i3.sync()).error_code == epb.ERROR_CODE_NONE
    return i1, i2, i3


async def test_kip441_scale_out_warms_up_then_probes_to_balance(leader):
    i1, i2, i3 = await _scaled_out(leader)
    start = leader.clock.now_ms()
    # I3 has no state: no active task yet, warm-ups instead, and a follow-up time.
    assert i3.active() == []
    assert 1 <= len(i3.warmups()) <= 2
    assert sorted(i1.active() + i2.active()) == ["0_0", "0_1", "0_2"]
    assert i3.assignment.next_rebalance_ms == start + PROBE_INTERVAL_MS
    hb = await i1.heartbeat()
    assert hb.error_code == epb.ERROR_CODE_NONE and hb.next_rebalance_ms == start + PROBE_INTERVAL_MS

    # The probing rebalance fires at the interval; members rejoin with what they now hold.
    for _round in range(4):
        workers = [i1, i2, i3]
        responses = await run_for(leader.clock, workers, PROBE_INTERVAL_MS)
        if all(r.error_code == epb.ERROR_CODE_NONE for r in responses):
            break
        assert all(r.error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS for r in responses)
        for w in workers:
            w.runs_as_caught_up()
        await rebalance(leader.clock, workers)
    # Settled: one active each (KIP-441's balanced end state), no further probe.
    assert [len(w.active()) for w in (i1, i2, i3)] == [1, 1, 1]
    assert sorted(i1.active() + i2.active() + i3.active()) == ["0_0", "0_1", "0_2"]
    for w in (i1, i2, i3):
        assert not w.assignment.HasField("next_rebalance_ms")
        assert w.warmups() == []
        assert len(w.standby()) == 1  # num_standby_replicas = 1
    describe = await leader.stub.DescribeGroup(pb.DescribeGroupRequest(group_id="app"))
    assert not describe.group.HasField("next_probe_ms")
    assert describe.group.state == pb.GROUP_STATE_STABLE


async def test_the_longest_probing_interval_schedules_no_time_beyond_the_wire_range(leader):
    """probing_rebalance_interval_ms may be any long (Kafka's config is one): at 2^63 - 1 the
    follow-up lands at the largest time the wire carries (never, in practice), and SyncGroup,
    Heartbeat and DescribeGroup answer it; now + interval overflowed int64 and every one of
    them failed with INTERNAL, for good (the time was stored)."""
    longest = 2**63 - 1
    i1, i2, i3 = await _scaled_out(leader, probe_interval_ms=longest)
    assert i3.active() == [] and i3.warmups()
    assert i3.assignment.next_rebalance_ms == longest
    hb = await i1.heartbeat()
    assert hb.error_code == epb.ERROR_CODE_NONE and hb.next_rebalance_ms == longest
    describe = await leader.stub.DescribeGroup(pb.DescribeGroupRequest(group_id="app"))
    assert describe.group.next_probe_ms == longest


async def test_early_probe_fires_once_warmups_catch_up_but_not_before_min_interval(leader):
    i1, i2, i3 = await _scaled_out(leader)
    rebalanced_at = leader.clock.now_ms()
    warm = i3.warmups() or i3.standby()
    # Still far behind: no early probe, the interval probe stands.
    hb = await i3.heartbeat({t: 5_000 for t in warm})
    assert hb.next_rebalance_ms == rebalanced_at + PROBE_INTERVAL_MS
    # Within acceptable_recovery_lag (100): probe early, but only min_probe_interval after the rebalance.
    await leader.clock.advance(1_000)
    hb = await i3.heartbeat({t: 50 for t in warm})
    assert hb.error_code == epb.ERROR_CODE_NONE
    assert hb.next_rebalance_ms == rebalanced_at + MIN_PROBE_INTERVAL_MS
    describe = await leader.stub.DescribeGroup(pb.DescribeGroupRequest(group_id="app"))
    assert describe.group.next_probe_reason == "early_probe"
    responses = await run_for(leader.clock, [i1, i2, i3], MIN_PROBE_INTERVAL_MS - 1_000 - 1)
    assert [r.error_code for r in responses] == [epb.ERROR_CODE_NONE] * 3
    await leader.clock.advance(1)
    assert (await i1.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
    for w in (i1, i2, i3):
        w.runs_as_caught_up()
    i3.task_lags.update({t: 50 for t in warm})
    await rebalance(leader.clock, [i1, i2, i3])
    # The caught-up warm-up took over an active task.
    assert len(i3.active()) >= 1
    log = await _rebalance_log(leader, generation=i3.generation)
    assert json.loads(log[-1])["trigger"] == "early_probe"


async def test_a_report_measured_before_the_rebalance_does_not_probe_early(leader):
    """An audit's find: a warm-up's "caught up" report measured before the rebalance that
    started it (a dead worker's last report, re-sent by its live sidecar with its age) made
    the leader probe early. Only lags measured since count; a fresh report then does."""
    i1, i2, i3 = await _scaled_out(leader)
    rebalanced_at = leader.clock.now_ms()
    warm = i3.warmups() or i3.standby()
    await leader.clock.advance(1_000)
    report = lags({t: 50 for t in warm})
    report.age_ms = 3_600_000
    stale = pb.HeartbeatRequest(group_id="app", member_id=i3.member_id, generation_id=i3.generation, lags=report)
    hb = await i3.stub.Heartbeat(stale)
    assert hb.error_code == epb.ERROR_CODE_NONE and hb.next_rebalance_ms == rebalanced_at + PROBE_INTERVAL_MS
    hb = await i3.heartbeat({t: 50 for t in warm})
    assert hb.next_rebalance_ms == rebalanced_at + MIN_PROBE_INTERVAL_MS


async def test_rebalance_log_records_input_output_and_trigger(leader):
    a, b = leader.worker(), leader.worker()
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    lines = await _rebalance_log(leader, generation=a.generation)
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["schema"] == 1 and record["group_id"] == "app" and record["generation"] == a.generation
    assert record["trigger"] == "member_joined"
    assert record["time_ms"] == leader.clock.now_ms()
    assert record["compute_ms"] >= 0
    assert sorted(c["id"] for c in record["input"]["clients"]) == sorted([a.process_id, b.process_id])
    assert record["input"]["version"] == 1 and len(record["input"]["tasks"]) == 3
    assert sorted(record["output"]["clients"]) == sorted([a.process_id, b.process_id])
    assert "reasons" in record["output"]


async def test_the_member_whose_join_released_the_barrier_may_go_away_while_the_assignor_runs(leader):
    """A helper's audit: the assignor ran inside the JoinGroup call that completed the barrier,
    so that call's deadline (or its worker killed) cancelled the run: the other members' joins
    were never answered and the group stayed in CompletingRebalance, no timer armed to end it."""
    a, b = Worker(leader.stub), Worker(leader.stub)
    await rebalance(leader.clock, [a, b], advance_ms=INITIAL_DELAY_MS)
    solve = leader.server.coordinator.assign
    started = asyncio.Event()

    async def slow(problem):
        started.set()
        await asyncio.sleep(0.5)
        return await solve(problem)

    leader.server.coordinator.assign = slow
    try:
        c = Worker(leader.stub)
        parked = [asyncio.create_task(w.join()) for w in (c, a)]
        await settle()
        last = asyncio.ensure_future(b.stub.JoinGroup(b.join_request(), timeout=0.15))  # completes the barrier
        await asyncio.wait_for(started.wait(), 5)
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await last
        assert gone.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        answers = await asyncio.wait_for(asyncio.gather(*parked), 5)
        assert [answer.error_code for answer in answers] == [epb.ERROR_CODE_NONE] * 2
        assert (await c.sync()).error_code == epb.ERROR_CODE_NONE
    finally:
        leader.server.coordinator.assign = solve
