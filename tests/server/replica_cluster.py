"""Several replicas of the leader as separate ``remote-leader serve`` processes over one
PostgreSQL, and worker-library members that record every assignment they apply: the material
of the chaos test (tests/server/test_chaos.py) and of bench/bench_failover.py."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import psycopg

from assignor.model import AssignmentConfig, HostInfo, StateStore, TaskId
from assignor.topology import Subtopology, Topology
from client.assignment import AssignmentChange
from client.lags import StaticLagSource
from client.member import GroupMember, MemberConfig, MemberState
from remote_leader.v1 import group_leader_pb2 as pb
from remote_leader.v1 import group_leader_pb2_grpc as pb_grpc
from tests.pg_server import free_port

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Replica:
    name: str
    port: int
    metrics_port: int
    process: subprocess.Popen
    log_path: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def metric(self, name: str) -> float:
        """One sample of the replica's Prometheus endpoint (0 when absent)."""
        import urllib.request

        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0


class Cluster:
    """Replica processes sharing ``dsn``; each has its own state dir (rebalance log only)."""

    def __init__(self, dsn: str, workdir: Path, *, lease_ms: int, extra: tuple[str, ...] = ()) -> None:
        self.dsn = dsn
        self.workdir = workdir
        self.lease_ms = lease_ms
        self.extra = extra
        self.replicas: dict[str, Replica] = {}

    def _port(self) -> int:
        taken = {p for r in self.replicas.values() for p in (r.port, r.metrics_port)}
        while (port := free_port()) in taken:
            pass
        return port

    def restart(self, name: str) -> Replica:
        """The replica again, at the same address (a StatefulSet pod coming back with its name):
        members' bootstrap lists stay valid. Its lease epochs start over from the database."""
        old = self.replicas[name]
        return self.start(name, port=old.port, metrics_port=old.metrics_port)

    def start(self, name: str, *, port: int = 0, metrics_port: int = 0) -> Replica:
        port = port or self._port()
        while not metrics_port or metrics_port == port:
            metrics_port = self._port()
        log_path = self.workdir / f"{name}.log"
        command = [
            sys.executable, "-m", "remote_leader.cli", "serve", "--store", self.dsn, "--listen", f"127.0.0.1:{port}",
            "--replica-id", name, "--lease-ms", str(self.lease_ms), "--metrics-port", str(metrics_port),
            "--state-dir", str(self.workdir / name), "--initial-rebalance-delay-ms", "300",
            "--min-session-timeout-ms", "1000", "--drain-timeout-s", "1", "--log-level", "info", *self.extra,
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with open(log_path, "ab") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        replica = Replica(name, port, metrics_port, process, log_path)
        self.replicas[name] = replica
        return replica

    async def wait_serving(self, replica: Replica, timeout_s: float = 60) -> None:
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        deadline = time.monotonic() + timeout_s
        for _attempt in range(3):
            async with grpc.aio.insecure_channel(replica.address) as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                while time.monotonic() < deadline:
                    if replica.process.poll() is not None:
                        break
                    with contextlib.suppress(grpc.aio.AioRpcError):
                        answer = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                        if answer.status == health_pb2.HealthCheckResponse.SERVING:
                            return
                    await asyncio.sleep(0.1)
                else:
                    raise TimeoutError(f"{replica.name} not serving after {timeout_s} s")
            log = replica.log_path.read_text()
            if "Address already in use" not in log:  # a free port taken by another process meanwhile: retry
                raise RuntimeError(f"{replica.name} exited: {log[-2000:]}")
            replica.log_path.unlink()
            fresh = self.start(replica.name)
            replica.port, replica.metrics_port, replica.process = fresh.port, fresh.metrics_port, fresh.process
            self.replicas[replica.name] = replica
        raise RuntimeError(f"{replica.name}: no free port after 3 attempts")

    @property
    def bootstrap(self) -> str:
        return ",".join(r.address for r in self.replicas.values())

    def owner(self, group_id: str) -> tuple[str, int] | None:
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute("SELECT owner, epoch FROM group_leases WHERE group_id = %s", (group_id,)).fetchone()
        return (row[0], row[1]) if row else None

    def durable(self, group_id: str) -> tuple[int, int] | None:
        """(generation, epoch) of the group's durable snapshot."""
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute("SELECT (snapshot::jsonb->>'generation')::int, epoch FROM groups WHERE group_id = %s",
                               (group_id,)).fetchone()
        return (row[0], row[1]) if row else None

    async def find(self, group_id: str) -> str:
        for replica in self.replicas.values():
            if replica.process.poll() is not None:
                continue
            with contextlib.suppress(grpc.aio.AioRpcError):
                async with grpc.aio.insecure_channel(replica.address) as channel:
                    found = await pb_grpc.GroupLeaderStub(channel).FindCoordinator(
                        pb.FindCoordinatorRequest(group_id=group_id), timeout=2)
                    return found.coordinator.replica_id
        raise RuntimeError("no replica answers")

    def stop(self) -> None:
        for replica in self.replicas.values():
            if replica.process.poll() is None:
                replica.resume()
                replica.process.send_signal(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    replica.process.wait(10)


def topology(partitions: int) -> Topology:
    return Topology.of("app", (Subtopology.of(0, ("orders",), partitions, (StateStore("counts"),)),))


@dataclass
class Recorded:
    """A member and every assignment it applied, in order: (generation, actives)."""

    member: GroupMember
    history: list[tuple[int, frozenset[TaskId]]] = field(default_factory=list)


class Groups:
    """Groups of real members (the worker library), recording what each applied."""

    def __init__(self, bootstrap: str, *, partitions: int = 6, session_ms: int = 6_000, heartbeat_ms: int = 500) -> None:
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.session_ms = session_ms
        self.heartbeat_ms = heartbeat_ms
        self.members: dict[str, list[Recorded]] = {}
        self.departed: dict[str, list[Recorded]] = {}

    async def add(self, group_id: str, count: int = 1) -> None:
        for _ in range(count):
            index = len(self.members.setdefault(group_id, []))
            config = MemberConfig(
                group_id=group_id, topology=topology(self.partitions), process_id=str(uuid.uuid4()),
                endpoint=HostInfo("127.0.0.1", 7000 + index), assignment_config=AssignmentConfig(num_standby_replicas=0),
                session_timeout_ms=self.session_ms, rebalance_timeout_ms=self.session_ms,
                heartbeat_interval_ms=self.heartbeat_ms, retry_backoff_ms=50, retry_backoff_max_ms=500)
            recorded = Recorded(None)  # type: ignore[arg-type]

            def record(change: AssignmentChange, recorded: Recorded = recorded) -> None:
                recorded.history.append((change.current.generation, frozenset(change.current.active)))

            recorded.member = GroupMember(self.bootstrap, config, StaticLagSource(), on_assignment=record)
            self.members[group_id].append(recorded)
            await recorded.member.start()

    async def remove_one(self, group_id: str) -> None:
        recorded = self.members[group_id].pop()
        self.departed.setdefault(group_id, []).append(recorded)
        await recorded.member.close()

    def converged(self, group_id: str) -> bool:
        """Every member Stable in one generation, the generation's actives cover every task."""
        members = self.members[group_id]
        if not all(r.member.state == MemberState.STABLE and r.history for r in members):
            return False
        generations = {r.history[-1][0] for r in members}
        if len(generations) != 1:
            return False
        covered = set().union(*(r.history[-1][1] for r in members))
        return covered == {TaskId(0, p) for p in range(self.partitions)}

    async def wait_converged(self, timeout_s: float) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if all(self.converged(g) for g in self.members):
                return time.monotonic() - started
            for group in self.members.values():
                for r in group:
                    if r.member.error is not None:
                        raise r.member.error
            await asyncio.sleep(0.05)
        raise TimeoutError(f"not converged after {timeout_s} s: {self.summary()}")

    def generation(self, group_id: str) -> int:
        return self.members[group_id][0].history[-1][0]

    def summary(self) -> dict[str, list[tuple[str, int | None]]]:
        return {g: [(r.member.state.value, r.history[-1][0] if r.history else None) for r in members]
                for g, members in self.members.items()}

    def violations(self) -> list[str]:
        """Generations that went backward on a member; a task active on two members in the
        same generation of a group. Empty when the invariants held throughout."""
        found = []
        for group_id, members in self.members.items():
            owners: dict[tuple[int, TaskId], str] = {}
            for r in [*members, *self.departed.get(group_id, [])]:
                generations = [g for g, _ in r.history]
                if generations != sorted(generations):
                    found.append(f"{group_id}/{r.member.config.process_id}: generations went backward {generations}")
                for generation, actives in r.history:
                    for task in actives:
                        other = owners.setdefault((generation, task), r.member.config.process_id)
                        if other != r.member.config.process_id:
                            found.append(f"{group_id}: task {task} active on two members in generation {generation}")
        return found

    async def close(self) -> None:
        for members in self.members.values():
            for r in members:
                await r.member.close(leave=False)
