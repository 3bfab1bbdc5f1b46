"""The sidecar as a separate process: a real server here, ``remote-leader sidecar`` in a
subprocess, and the test acting as the worker through the local gRPC API."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import grpc
import pytest

from assignor.model import TaskId
from client.lags import StaticLagSource
from client.member import GroupMember
from client.sidecar import SidecarOptions, serve_sidecar
from remote_leader.sidecar.v1 import sidecar_pb2 as spb
from remote_leader.sidecar.v1 import sidecar_pb2_grpc as spb_grpc
from remote_leader.v1 import assignment_pb2 as apb
from tests.client.conftest import member_config

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = """
application_id: g
subtopologies:
  - id: 0
    source_topics: [orders]
    partitions: 4
    stores: [counts]
config:
  num_standby_replicas: 1
"""


async def start_sidecar(tmp_path, server: str, *extra: str) -> tuple[asyncio.subprocess.Process, str]:
    topology = tmp_path / "topology.yaml"
    topology.write_text(TOPOLOGY)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "remote_leader.cli", "sidecar", "--group", "g", "--server", server,
        "--topology", str(topology), "--listen", "127.0.0.1:0", "--endpoint", "127.0.0.1:7070",
        "--session-timeout-ms", "1000", "--heartbeat-interval-ms", "100", "--apply-timeout-ms", "60000",
        "--log-level", "warning", *extra,
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = await asyncio.wait_for(process.stdout.readline(), 30)
    if not line:
        raise AssertionError((await process.stderr.read()).decode())
    ready = json.loads(line)
    assert ready["event"] == "sidecar.ready" and ready["group_id"] == "g"
    return process, ready["listen"]


def tasks(messages) -> set[TaskId]:
    return {TaskId(t.subtopology, t.partition) for t in messages}


async def test_sidecar_api_from_a_separate_process(leader, tmp_path):
    process, address = await start_sidecar(tmp_path, leader.address)
    other = None
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            sidecar = spb_grpc.SidecarServiceStub(channel)
            await sidecar.ReportLags(spb.ReportLagsRequest(task_lags=[
                apb.TaskLag(task=apb.TaskId(subtopology=0, partition=1), lag=5)]))
            watch = sidecar.WatchAssignment(spb.WatchAssignmentRequest(acknowledge=True, watch_id="worker-1"))
            first = await asyncio.wait_for(watch.read(), 10)
            assert tasks(first.assignment.active) == {TaskId(0, p) for p in range(4)}  # alone: every active
            # a rebalance that starts while the worker applies is joined once applied: the leader
            # waits as long as the apply may take (--apply-timeout-ms 60000, the session 1000)
            (member,) = leader.server.coordinator.groups["g"].members.values()
            assert member.rebalance_timeout_ms == 60_000
            # if the watcher was there before the assignment, the member waits for this ack
            await sidecar.AcknowledgeAssignment(
                spb.AcknowledgeAssignmentRequest(generation_id=first.assignment.generation_id, watch_id="worker-1"))
            for _ in range(100):
                got = await sidecar.GetAssignment(spb.GetAssignmentRequest())
                if got.state == spb.MEMBER_STATE_STABLE:
                    break
                await asyncio.sleep(0.02)
            assert got.state == spb.MEMBER_STATE_STABLE and got.has_assignment
            assert got.assignment.generation_id == first.assignment.generation_id

            # a second member joins: the sidecar's worker must apply the new assignment and say
            # so before the state-cleanup lock is free again (KIP-441, across the process boundary)
            other = GroupMember(leader.address, member_config("g", 9, partitions=4), StaticLagSource())
            await other.start()
            update = await asyncio.wait_for(watch.read(), 10)
            assert update.assignment.generation_id > first.assignment.generation_id
            assert tasks(update.change.revoked_active) and tasks(update.change.revoked_active) <= tasks(first.assignment.active)
            # its stream drops mid-apply and it reconnects under its name: it still owes the
            # acknowledgement (an audit's find: the lock was free at once, the ack refused)
            watch.cancel()
            watch = sidecar.WatchAssignment(spb.WatchAssignmentRequest(acknowledge=True, watch_id="worker-1"))
            held_now = await asyncio.wait_for(watch.read(), 10)
            assert held_now.assignment.generation_id == update.assignment.generation_id
            # what it holds comes as a change from nothing: a worker that applies changes starts
            # with every task (a new user's find: the change was empty)
            assert tasks(held_now.change.assigned_active) == tasks(held_now.assignment.active) != set()
            assert tasks(held_now.change.assigned_standby) == tasks(held_now.assignment.standby)
            assert not held_now.change.revoked_active and not held_now.change.released
            hold = sidecar.HoldCleanupLock(spb.HoldCleanupLockRequest(holder="test-cleaner"))
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(asyncio.shield(held := asyncio.ensure_future(hold.read())), 0.5)
            ack = await sidecar.AcknowledgeAssignment(
                spb.AcknowledgeAssignmentRequest(generation_id=update.assignment.generation_id, watch_id="worker-1"))
            assert ack.accepted
            assert (await asyncio.wait_for(held, 5)).held
            again = await sidecar.AcknowledgeAssignment(
                spb.AcknowledgeAssignmentRequest(generation_id=update.assignment.generation_id, watch_id="worker-1"))
            assert not again.accepted  # owed once
            hold.cancel()  # release by closing the call

            await other.wait_for_assignment(lambda a: a.generation == update.assignment.generation_id, timeout=10)
            # KIP-535 from the sidecar: murmur2(b"foobar") = -790332482 -> & 0x7fffffff = 1357151166 -> % 4 = 2
            meta = await sidecar.QueryMetadata(spb.QueryMetadataRequest(store="counts", key=b"foobar"))
            owner = "127.0.0.1:7070" if TaskId(0, 2) in tasks(update.assignment.active) else "127.0.0.1:7009"
            assert meta.partition == 2 and f"{meta.active_host.host}:{meta.active_host.port}" == owner
            routed = await sidecar.RouteQuery(spb.RouteQueryRequest(store="counts", partition=2))
            assert [f"{h.host.host}:{h.host.port}" for h in routed.hosts] == [owner]
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await sidecar.QueryMetadata(spb.QueryMetadataRequest(store="nope", partition=0))
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "store" in error.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await sidecar.ReportLags(spb.ReportLagsRequest(task_lags=[
                    apb.TaskLag(task=apb.TaskId(subtopology=0, partition=0), lag=-7)]))
            assert "task_lags[0].lag" in error.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as error:  # refused here, not by the leader at the next join
                await sidecar.ReportLags(spb.ReportLagsRequest(task_lags=[
                    apb.TaskLag(task=apb.TaskId(subtopology=0, partition=-1), lag=3)]))
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "task_lags[0].task" in error.value.details()
            watch.cancel()

        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 10) == 0
        await other.wait_for_assignment(lambda a: len(a.active) == 4, timeout=10)  # it left: all tasks move
        group = await leader.describe("g")
        assert [m.process_id for m in group.members] == [other.config.process_id]
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        if other is not None:
            await other.close()


async def test_sidecar_refuses_a_bad_topology_naming_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("application_id: app\nsubtopologies:\n  - {id: 0, source_topics: [t], partitions: 0}\n")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "remote_leader.cli", "sidecar", "--group", "g", "--server", "127.0.0.1:1",
        "--topology", str(bad), cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert "topology.subtopologies[0].partitions" in stderr.decode()


def _run_sidecar_cli(tmp_path, *flags: str, topology: str = TOPOLOGY, server: str = "127.0.0.1:1"):
    """``remote-leader sidecar`` with ``flags``; bad input must stop it before it is ready."""
    import subprocess

    path = tmp_path / "topology.yaml"
    path.write_text(topology)
    return subprocess.run(
        [sys.executable, "-m", "remote_leader.cli", "sidecar", "--group", "g", "--server", server,
         "--topology", str(path), *flags],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(("flags", "topology", "server", "named"), [
    pytest.param(["--session-timeout-ms", "3000000000"], TOPOLOGY, "127.0.0.1:1", "--session-timeout-ms",
                 id="session-timeout-beyond-int32"),
    pytest.param(["--threads", "3000000000"], TOPOLOGY, "127.0.0.1:1", "--threads", id="threads-beyond-int32"),
    pytest.param(["--rebalance-timeout-ms", "0"], TOPOLOGY, "127.0.0.1:1", "--rebalance-timeout-ms",
                 id="rebalance-timeout-zero"),
    pytest.param([], TOPOLOGY.replace("id: 0", "id: 5000000000"), "127.0.0.1:1", "subtopologies[0].id",
                 id="subtopology-id-beyond-int32"),
    pytest.param([], TOPOLOGY.replace("partitions: 4", "partitions: 5000000000"), "127.0.0.1:1",
                 "subtopologies[0].partitions", id="partitions-beyond-int32"),
    pytest.param(["--listen", "nonsense"], TOPOLOGY, "127.0.0.1:1", "--listen", id="listen-nonsense"),
    pytest.param(["--listen", "127.0.0.1:70000"], TOPOLOGY, "127.0.0.1:1", "--listen", id="listen-port-beyond-16-bits"),
    pytest.param([], TOPOLOGY, "", "--server", id="server-empty"),
    pytest.param([], TOPOLOGY, ",", "--server", id="server-comma"),
    pytest.param(["--log-level", "bogus"], TOPOLOGY, "127.0.0.1:1", "--log-level", id="log-level-bogus"),
    # a new user's find: the topology file of another application (its changelogs named after it)
    pytest.param([], TOPOLOGY.replace("application_id: g", "application_id: orders-app"), "127.0.0.1:1",
                 "application_id 'orders-app' is not the group 'g' (--group)", id="application-id-not-the-group"),
    # an audit's find: named by the member's fields (heartbeat_interval_ms), not by the flags
    pytest.param(["--session-timeout-ms", "100"], TOPOLOGY, "127.0.0.1:1", "--heartbeat-interval-ms: 3000 must be "
                 "below --session-timeout-ms", id="heartbeat-not-below-session"),
])
def test_sidecar_refuses_bad_arguments_in_one_line_with_exit_2(tmp_path, flags, topology, server, named):
    proc = _run_sidecar_cli(tmp_path, *flags, topology=topology, server=server)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""  # never ready
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], proc.stderr


def test_sidecar_refuses_a_listen_port_in_use_in_one_line_with_exit_2(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _run_sidecar_cli(tmp_path, "--listen", f"127.0.0.1:{port}")
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--listen" in lines[0] and "in use" in lines[0], proc.stderr


@pytest.mark.parametrize(("content", "problem"), [
    pytest.param(b"", "is empty", id="empty"),
    pytest.param(b"\x00\xff\xfe binary \x80", "printable ASCII", id="binary"),
    pytest.param(b"first\nsecond\n", "printable ASCII", id="two-lines"),
])
def test_sidecar_refuses_a_bad_token_file_in_one_line(tmp_path, content, problem):
    token = tmp_path / "token"
    token.write_bytes(content)
    proc = _run_sidecar_cli(tmp_path, "--token-file", str(token))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--token-file" in lines[0] and problem in lines[0], proc.stderr


def test_demo_refuses_changelog_offsets_beyond_int64_in_one_line():
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "remote_leader.cli", "demo", "--changelog-offsets", "100000000000000000000000"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--changelog-offsets" in lines[0], proc.stderr


async def test_a_member_that_crashes_stops_the_sidecar_with_exit_code_1(leader, monkeypatch):
    """An audit's find: only a protocol error (MemberError) made the sidecar exit 1; a member
    that crashed (any other exception: here a stand-in for a bug) left it exiting 0, a clean
    stop to its supervisor."""
    async def crash(self):
        raise RuntimeError("a bug in the member")

    monkeypatch.setattr(GroupMember, "_join_and_sync", crash)
    code = await asyncio.wait_for(serve_sidecar(SidecarOptions(leader.address, member_config("g", 0)), asyncio.Event()), 20)
    assert code == 1
