"""Analytics of a log written by the real server: a short scripted KIP-441 scale-out.

A real grpc.aio server on 127.0.0.1 (port 0, fake clock, temp state dir) runs the group; the
expectations come from what the workers saw over the protocol, never from the server's or the
pipeline's code.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("grpc")

from remote_leader.v1 import assignment_pb2 as apb  # noqa: E402
from remote_leader.v1 import errors_pb2 as epb  # noqa: E402
from tests.server.harness import LATEST, rebalance, run_for, running_server, settle  # noqa: E402

PROBE_INTERVAL_MS = 600_000


def _owners(workers) -> dict[str, str]:
    return {task: w.process_id for w in workers for task in w.active()}


async def _scripted_group(state_dir):
    """I1, I2 form the group; I3 joins and warms up; probes until settled; I3 leaves.

    Returns, per rebalance in order: (generation, time_ms, tasks whose active owner changed, probing?).
    """
    observed = []
    async with running_server(state_dir) as leader:
        config = apb.AssignmentConfig(acceptable_recovery_lag=100, num_standby_replicas=1, max_warmup_replicas=2)
        i1 = leader.worker(process_id="00000000-0000-0000-0000-000000000001", config=config,
                           task_lags={"0_0": LATEST, "0_2": LATEST, "0_1": 0})
        i2 = leader.worker(process_id="00000000-0000-0000-0000-000000000002", config=config,
                           task_lags={"0_1": LATEST, "0_0": 0, "0_2": 0})
        i3 = leader.worker(process_id="00000000-0000-0000-0000-000000000003", config=config)
        # KIP-441 "Scaling Out", initial state: the members already run these (they report "latest").
        before: dict[str, str] = {"0_0": i1.process_id, "0_2": i1.process_id, "0_1": i2.process_id}

        def note(workers) -> None:
            nonlocal before
            owners = _owners(workers)
            moved = sum(1 for task, owner in owners.items() if before.get(task) != owner)
            probing = any(w.assignment.HasField("next_rebalance_ms") for w in workers)
            observed.append((workers[0].generation, leader.clock.now_ms(), moved, probing))
            before = owners

        await rebalance(leader.clock, [i1, i2], advance_ms=3_000)
        note([i1, i2])
        for w in (i1, i2):
            w.runs_as_caught_up()
        joining = asyncio.create_task(i3.join())
        await settle()
        for w in (i1, i2):
            assert (await w.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
        await rebalance(leader.clock, [i1, i2])
        await joining
        assert (await i3.sync()).error_code == epb.ERROR_CODE_NONE
        note([i1, i2, i3])
        workers = [i1, i2, i3]
        for _round in range(4):
            responses = await run_for(leader.clock, workers, PROBE_INTERVAL_MS)
            if all(r.error_code == epb.ERROR_CODE_NONE for r in responses):
                break
            for w in workers:
                w.runs_as_caught_up()
            await rebalance(leader.clock, workers)
            note(workers)
        for w in workers:
            w.runs_as_caught_up()
        await i3.leave()
        await settle()
        for w in (i1, i2):
            assert (await w.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS
        await rebalance(leader.clock, [i1, i2])
        note([i1, i2])
    return observed


def test_analytics_of_a_real_server_log(spark, tmp_path):
    from pipeline.analytics import analyze

    observed = asyncio.run(_scripted_group(tmp_path / "state"))
    assert len(observed) >= 4 and observed[1][3], "I3's join must need a probing rebalance"
    data = analyze(spark, [str(tmp_path / "state")], tmp_path / "out", bucket_s=60, show_progress=False)
    assert data["counts"]["records"] == len(observed) and data["counts"]["bad_lines"] == 0
    records = spark.read.parquet(str(tmp_path / "out" / "records")).orderBy("time_ms", "generation").collect()
    assert [(r["generation"], r["time_ms"], r["tasks_moved"], r["probing"]) for r in records] == observed
    triggers = [r["trigger"] for r in records]
    assert triggers[:2] == ["member_joined", "member_joined"] and triggers[-1] == "member_left"
    assert set(triggers[2:-1]) <= {"probing_rebalance", "early_probe"}

    # I3's join (the 2nd rebalance) settles at the first later rebalance that needs no probe.
    generation, joined_at = observed[1][:2]
    settled_gen, settled_at = next((g, t) for g, t, _, probing in observed[2:] if not probing)
    episodes = [e for e in data["episodes"] if e["start_generation"] == generation]
    assert len(episodes) == 1 and episodes[0]["settled"] and episodes[0]["end_generation"] == settled_gen
    assert episodes[0]["settle_s"] == (settled_at - joined_at) / 1000.0
    assert data["groups"][0]["warmups_max"] >= 1 and data["groups"][0]["rebalances"] == len(observed)
