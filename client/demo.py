"""``remote-leader demo``: KIP-441's scaling scenarios, live, on loopback.

A real server (``remote-leader serve`` in a subprocess, or one given with ``--server``) and
simulated workers, each a real ``GroupMember`` whose lag source is a simulated state store:
changelogs grow, actives keep up, standbys and warm-ups restore at ``--restore-rate`` offsets per
second. Two scenes from KIP-441 "Example Scenarios" are played:

1. "Scaling Out": I1 and I2 run three tasks with one standby each, in sync; I3 joins with no
   state. The first rebalance keeps every active where it was and gives I3 warm-ups; once they
   are caught up the leader probes early and the group settles balanced.
2. "Scaling In (Pt. 2 – standbys lag nontrivially)": I1–I3 run four tasks; the standbys fall
   behind (their replication is paused while a burst of writes lands), then I1 dies without
   leaving. After its session timeout the actives go to the most caught-up instances, even
   though that is unbalanced, and the group rebalances again once the warm-ups catch up.

After each rebalance the demo prints who runs which active, the standbys and warm-ups with their
lags, and how long the group took to settle. It checks what the KIP promises and exits 0 only if
every scene settled, balanced, within the timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from assignor.lag import Lag
from assignor.model import LATEST, UNKNOWN, AssignmentConfig, HostInfo, InvalidInput, StateStore, TaskId
from assignor.probing import Trigger
from assignor.topology import Subtopology, Topology
from client import codec
from client.assignment import AssignmentChange
from client.lags import LagInfo
from client.member import GroupMember, MemberConfig, open_channel
from remote_leader.tls import PLAINTEXT, ClientTls
from remote_leader.v1 import group_leader_pb2 as pb
from remote_leader.v1 import group_leader_pb2_grpc as pb_grpc

#: docs/interfaces.md, "Server settings": short timings so that the demo settles in seconds. A
#: server given with ``--server`` needs them too (a default server refuses the demo's 2 s sessions
#: and probes at most once a minute).
NEEDED_SERVER_SETTINGS = {
    "--initial-rebalance-delay-ms": "300",
    "--min-session-timeout-ms": "500",
    "--min-probe-interval-ms": "1000",
}
SERVER_SETTINGS = {
    **NEEDED_SERVER_SETTINGS,
    "--metrics-port": "0",
    "--log-level": "warning",
    "--drain-timeout-s": "2",
}


def needed_flags() -> str:
    return " ".join(f"{flag} {value}" for flag, value in NEEDED_SERVER_SETTINGS.items())


#: The largest offset count the demo takes: int64 on the wire, with room for the changelog to grow
#: (and exact as a float, which the simulated changelogs use).
_MAX_DEMO_OFFSET = 1 << 53


@dataclass(frozen=True, slots=True)
class DemoOptions:
    server: str | None = None
    restore_rate: int = 10_000
    changelog_offsets: int = 60_000
    acceptable_recovery_lag: int = 2_000
    timeout_s: float = 55.0
    write_rate: int = 500
    heartbeat_interval_ms: int = 200
    session_timeout_ms: int = 2_000
    tls: bool = False  # mTLS with a CA of its own (docs/security.md)

    def __post_init__(self) -> None:
        if self.tls and self.server is not None:
            raise InvalidInput("--tls", "makes its own CA and starts its own server: not with --server")
        for name in ("restore_rate", "changelog_offsets", "heartbeat_interval_ms", "session_timeout_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"--{name.replace('_', '-')}", f"expected an integer >= 1, got {value!r}")
            # offsets and rates are int64 on the wire (and the changelog grows while the demo runs)
            if value > _MAX_DEMO_OFFSET:
                raise InvalidInput(f"--{name.replace('_', '-')}", f"must be <= {_MAX_DEMO_OFFSET}, got {value}")
        if self.acceptable_recovery_lag < 0:
            raise InvalidInput("--acceptable-recovery-lag", "must be >= 0")
        if self.acceptable_recovery_lag > _MAX_DEMO_OFFSET:
            raise InvalidInput("--acceptable-recovery-lag", f"must be <= {_MAX_DEMO_OFFSET}, got {self.acceptable_recovery_lag}")
        if self.timeout_s <= 0:
            raise InvalidInput("--timeout-s", "must be > 0")


# ---- the simulation -------------------------------------------------------------------------


class Changelogs:
    """The end offsets of every task's changelog: they grow while the application writes."""

    def __init__(self, tasks: tuple[TaskId, ...], initial: int, write_rate: int) -> None:
        self.end: dict[TaskId, float] = {task: float(initial) for task in tasks}
        self.write_rate = write_rate

    def tick(self, dt: float) -> None:
        for task in self.end:
            self.end[task] += self.write_rate * dt

    def burst(self, offsets: int) -> None:
        for task in self.end:
            self.end[task] += offsets


class SimulatedWorker:
    """A worker's state stores, simulated: the lag source of its ``GroupMember``.

    Assigned tasks restore at ``restore_rate`` offsets/s until caught up, then follow the
    changelog; an active that has caught up is *running* and reports LATEST (KIP-441). State of
    tasks no longer assigned stays on disk (until a cleaner would delete it) but falls behind.
    """

    def __init__(self, name: str, topology: Topology, changelogs: Changelogs, restore_rate: int) -> None:
        self.name = name
        self.topology = topology
        self.changelogs = changelogs
        self.restore_rate = restore_rate
        self.position: dict[TaskId, float] = {}
        self.active: frozenset[TaskId] = frozenset()
        self.standby: frozenset[TaskId] = frozenset()
        self.running: set[TaskId] = set()
        self.replication_paused = False
        self.member: GroupMember | None = None

    def seed_caught_up(self, tasks: tuple[TaskId, ...]) -> None:
        for task in tasks:
            self.position[task] = self.changelogs.end[task]

    def in_sync(self) -> bool:
        """Every active running, every standby within one tick of its changelog's end."""
        return all(t in self.running for t in self.active) and all(
            self.changelogs.end[t] - self.position[t] <= self.changelogs.write_rate for t in self.standby)

    def forget_unassigned(self) -> None:
        """The state cleaner's work: state of tasks this instance no longer hosts is gone."""
        for task in set(self.position) - (self.active | self.standby):
            del self.position[task]

    def on_assignment(self, change: AssignmentChange) -> None:
        self.active = frozenset(change.current.active)
        self.standby = frozenset(change.current.standby)
        for task in self.active | self.standby:
            self.position.setdefault(task, 0.0)
        self.running &= set(self.active)

    def tick(self, dt: float) -> None:
        for task in self.active | self.standby:
            end = self.changelogs.end[task]
            if task in self.running:
                self.position[task] = end
                continue
            if task in self.standby and self.replication_paused:
                continue
            self.position[task] = min(end, self.position[task] + self.restore_rate * dt)
            if task in self.active and self.position[task] >= end:
                self.running.add(task)

    def task_lags(self) -> Mapping[TaskId, Lag]:
        return {task: LATEST if task in self.running else Lag.behind(int(self.changelogs.end[task] - position))
                for task, position in sorted(self.position.items())}

    def store_partition_lags(self) -> Mapping[str, Mapping[int, LagInfo]]:
        result: dict[str, dict[int, LagInfo]] = {}
        for task, position in self.position.items():
            sub = self.topology.subtopology(task.subtopology)
            for store in sub.state_stores if sub else ():
                end = int(self.changelogs.end[task])
                result.setdefault(store.name, {})[task.partition] = LagInfo(
                    end if task in self.running else int(position), end)
        return result


# ---- the server -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """``remote-leader serve`` as a subprocess on a free loopback port, with a temporary state dir."""

    def __init__(self, tls: bool = False) -> None:
        self.state_dir = tempfile.TemporaryDirectory(prefix="remote-leader-demo-")
        self.address = f"127.0.0.1:{_free_port()}"
        self.process: asyncio.subprocess.Process | None = None
        self.client_tls: ClientTls | None = None
        self._tls_args: list[str] = []
        if tls:
            self._make_pki(Path(self.state_dir.name) / "pki")

    def _make_pki(self, directory: Path) -> None:
        """A CA, the server's certificate, the demo's client certificate (principal ``demo``)
        and an ACL granting it the demo's groups: the server runs with mTLS and ACLs on."""
        from remote_leader.pki import DevCa

        ca = DevCa(directory)
        server, client = ca.server(), ca.issue("demo-client", cn="demo")
        acl = directory / "acl.yaml"
        acl.write_text("acls:\n  - principal: demo\n    operations: [member, describe]\n    group: scale-\n    pattern: prefixed\n")
        self._tls_args = ["--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-client-ca", str(ca.cert),
                          "--acl-file", str(acl)]
        self.client_tls = ClientTls(ca=ca.cert, cert=client.cert, key=client.key, server_name="localhost")

    async def start(self, timeout_s: float = 20.0) -> None:
        args = [sys.executable, "-m", "remote_leader.cli", "serve", "--listen", self.address,
                "--state-dir", self.state_dir.name]
        for flag, value in SERVER_SETTINGS.items():
            args += [flag, value]
        args += self._tls_args
        self.process = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        await wait_until_serving(self.address, timeout_s, self.process, self.client_tls)

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        self.state_dir.cleanup()


async def wait_until_serving(address: str, timeout_s: float, process: asyncio.subprocess.Process | None = None,
                             tls: ClientTls | None = None) -> None:
    """Poll grpc.health.v1 until the GroupLeader service answers SERVING (docs/interfaces.md)."""
    deadline = time.monotonic() + timeout_s
    async with (tls or PLAINTEXT).aio_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            if process is not None and process.returncode is not None:
                stderr = (await process.stderr.read()).decode(errors="replace") if process.stderr else ""
                raise RuntimeError(f"the server exited with {process.returncode}: {stderr.strip()[-2000:]}")
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(service="remote_leader.v1.GroupLeader"), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server at {address} was not serving after {timeout_s:.0f} s")
            await asyncio.sleep(0.1)


# ---- one scene ------------------------------------------------------------------------------


@dataclass
class Scene:
    group: str
    topology: Topology
    options: DemoOptions
    server: str
    console: Console
    progress: Progress
    workers: dict[str, SimulatedWorker] = field(default_factory=dict)
    changelogs: Changelogs | None = None
    shown_generation: int = -1
    rebalances: list[pb.GroupDescription] = field(default_factory=list)
    closed: bool = False
    tls: ClientTls | None = None

    def __post_init__(self) -> None:
        self.changelogs = Changelogs(self.topology.task_ids(), self.options.changelog_offsets, self.options.write_rate)
        self.config = AssignmentConfig(num_standby_replicas=1, acceptable_recovery_lag=self.options.acceptable_recovery_lag,
                                       max_warmup_replicas=2)
        self.channel = open_channel(self.server, tls=self.tls)
        self.stub = pb_grpc.GroupLeaderStub(self.channel)

    async def start_worker(self, name: str, seeded: tuple[TaskId, ...] = ()) -> SimulatedWorker:
        worker = SimulatedWorker(name, self.topology, self.changelogs, self.options.restore_rate)
        worker.seed_caught_up(seeded)
        port = 9000 + len(self.workers) + 1
        config = MemberConfig(
            group_id=self.group, topology=self.topology, group_instance_id=name,
            process_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"remote-leader-demo/{self.group}/{name}")),
            endpoint=HostInfo("127.0.0.1", port), assignment_config=self.config,
            session_timeout_ms=self.options.session_timeout_ms, heartbeat_interval_ms=self.options.heartbeat_interval_ms,
            retry_backoff_ms=50, retry_backoff_max_ms=500)
        worker.member = GroupMember(self.channel, config, worker, on_assignment=worker.on_assignment)
        self.workers[name] = worker
        await worker.member.start()
        return worker

    async def until_in_sync(self, deadline: float) -> None:
        while not all(w.in_sync() for w in self.workers.values()):
            if time.monotonic() > deadline:
                raise TimeoutError("replicas in sync")
            await asyncio.sleep(0.05)

    async def kill(self, name: str) -> None:
        """The instance dies: no LeaveGroup; the leader notices when its session times out."""
        worker = self.workers.pop(name)
        await worker.member.close(leave=False)

    async def describe(self) -> pb.GroupDescription | None:
        response = await self.stub.DescribeGroup(pb.DescribeGroupRequest(group_id=self.group), timeout=5)
        return response.group if response.error_code == 0 else None

    def tick(self, dt: float) -> None:
        self.changelogs.tick(dt)
        for worker in self.workers.values():
            worker.tick(dt)

    async def wait_for(self, predicate, label: str, deadline: float, since: float | None = None) -> pb.GroupDescription:
        """Poll DescribeGroup, print a table per new generation, until ``predicate(group)`` holds of a
        generation every live worker holds."""
        task = self.progress.add_task(label, total=None)
        try:
            while True:
                self._raise_member_errors()
                group = await self.describe()
                if group is not None and group.state == pb.GROUP_STATE_STABLE and group.generation_id != self.shown_generation \
                        and self._members_caught_up_to(group):
                    self.shown_generation = group.generation_id
                    self.rebalances.append(group)
                    self.console.print(render_group(group, self.options.acceptable_recovery_lag, since))
                # and every live worker holds it: the leader is stable as soon as the last sync is
                # answered, before the workers have read it (the scene then had no table to compare)
                if group is not None and predicate(group) and self._members_caught_up_to(group):
                    return group
                self.progress.update(task, description=f"{label} — {warmup_status(group, self.options.acceptable_recovery_lag)}")
                if time.monotonic() > deadline:
                    raise TimeoutError(label)
                await asyncio.sleep(0.1)
        finally:
            self.progress.remove_task(task)

    def _raise_member_errors(self) -> None:
        """A member the server refused (a session timeout outside its bounds, most often) stops
        for good: say so in one line, with the server flags the demo needs, instead of waiting."""
        for name, worker in sorted(self.workers.items()):
            error = worker.member.error if worker.member is not None else None
            if error is not None:
                raise RuntimeError(f"the server at {self.server} refused member {name} ({error}); the demo needs a "
                                   f"server started with: remote-leader serve {needed_flags()}")

    def _members_caught_up_to(self, group: pb.GroupDescription) -> bool:
        """Every live simulated worker holds this generation's assignment (so the table is real)."""
        return all(w.member.generation == group.generation_id and w.member.state.value == "stable"
                   for w in self.workers.values() if w.member is not None)

    async def close(self) -> None:
        for name in list(self.workers):
            await self.workers.pop(name).member.close()
        if not self.closed:
            self.closed = True
            await self.channel.close()


def name_of(member: pb.MemberDescription) -> str:
    return member.group_instance_id if member.HasField("group_instance_id") else member.process_id[:8]


def _lags(member: pb.MemberDescription) -> dict[TaskId, Lag]:
    return {codec.task_from_proto(entry.task): Lag.from_wire(entry.lag) for entry in member.lags}


def _format(task: TaskId, lag: Lag | None, acceptable: int, *, active: bool = False) -> str:
    if lag is None:
        return str(task) if active else f"{task} [dim](no state yet)[/]"
    if lag.running or (active and lag.within(acceptable)):
        return str(task) if active else f"{task} [green]✓[/]"
    if lag == UNKNOWN:
        return f"{task} [yellow](lag ?)[/]"
    if lag.within(acceptable):
        return f"{task} [green]✓ lag {lag.offsets:,}[/]"
    return f"{task} [red]lag {lag.offsets:,}[/]" + (" [red]restoring[/]" if active else "")


def render_group(group: pb.GroupDescription, acceptable: int, since: float | None) -> Table:
    elapsed = f" · {time.monotonic() - since:.1f} s after the event" if since is not None else ""
    settled = not group.HasField("next_probe_ms") and not any(m.warmup for m in group.members)
    title = (f"[bold]{group.group_id}[/] generation {group.generation_id} · trigger "
             f"[cyan]{group.last_rebalance_trigger or '-'}[/]{elapsed}")
    caption = "[green]settled: balanced, no probing rebalance needed[/]" if settled else (
        f"[yellow]follow-up: {group.next_probe_reason or Trigger.PROBING_REBALANCE} "
        f"in {max(0, group.next_probe_ms - int(time.time() * 1000)) / 1000:.1f} s or when the warm-ups catch up[/]")
    table = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    for column in ("instance", "active", "standby", "warm-up"):
        table.add_column(column)
    for member in sorted(group.members, key=name_of):
        lags = _lags(member)
        warmups = {codec.task_from_proto(t) for t in member.warmup}
        active = [_format(codec.task_from_proto(t), lags.get(codec.task_from_proto(t)), acceptable, active=True)
                  for t in member.active]
        standby = [_format(task, lags.get(task), acceptable) for task in sorted(codec.task_from_proto(t) for t in member.standby)
                   if task not in warmups]
        warmup = [_format(task, lags.get(task), acceptable) for task in sorted(warmups)]
        table.add_row(name_of(member), ", ".join(active) or "-", ", ".join(standby) or "-", ", ".join(warmup) or "-")
    return table


def warmup_status(group: pb.GroupDescription | None, acceptable: int) -> str:
    if group is None:
        return "waiting for the group"
    parts = []
    for member in sorted(group.members, key=name_of):
        lags = _lags(member)
        for t in member.warmup:
            task = codec.task_from_proto(t)
            lag = lags.get(task)
            behind = None if lag is None or lag.running else lag.known_offsets
            parts.append(f"{name_of(member)} {task} lag {behind:,}" if behind is not None else f"{name_of(member)} {task}")
    state = pb.GroupState.Name(group.state).removeprefix("GROUP_STATE_").lower()
    return f"gen {group.generation_id} {state}" + (f"; warm-ups: {', '.join(parts)}" if parts else "")


def settled(group: pb.GroupDescription, members: int) -> bool:
    return (group.state == pb.GROUP_STATE_STABLE and len(group.members) == members
            and not group.HasField("next_probe_ms") and not any(m.warmup for m in group.members))


def active_counts(group: pb.GroupDescription) -> dict[str, int]:
    return {name_of(m): len(m.active) for m in group.members}


# ---- the scenes -----------------------------------------------------------------------------


def _topology(partitions: int) -> Topology:
    return Topology.of("demo", (Subtopology.of(0, ("orders",), partitions, (StateStore("counts"),)),))


async def _ticker(scenes: list[Scene]) -> None:
    last = time.monotonic()
    while True:
        await asyncio.sleep(0.05)
        now = time.monotonic()
        for scene in scenes:
            scene.tick(now - last)
        last = now


async def scale_out(scene: Scene, deadline: float, checks: list[tuple[bool, str]]) -> None:
    tasks = scene.topology.task_ids()
    scene.console.rule("[bold]KIP-441 Scaling Out[/]: 3 stateful tasks, 1 standby; I1 and I2 in sync, then I3 joins")
    for name in ("I1", "I2"):
        await scene.start_worker(name, seeded=tasks)
    await scene.wait_for(lambda g: settled(g, 2), "I1 and I2 form the group", deadline)
    await scene.until_in_sync(deadline)
    before = {name_of(m): {codec.task_from_proto(t) for t in m.active} for m in scene.rebalances[-1].members}
    start = time.monotonic()
    await scene.start_worker("I3")
    scene.console.print("[bold]-- New instance (I3) joins with no state --[/]")
    first = await scene.wait_for(lambda g: len(g.members) == 3 and g.state == pb.GROUP_STATE_STABLE,
                                 "I3 joins", deadline, since=start)
    after = {name_of(m): {codec.task_from_proto(t) for t in m.active} for m in first.members}
    i3 = next(m for m in first.members if name_of(m) == "I3")
    checks.append((after.get("I3") == set() and after["I1"] | after["I2"] == before["I1"] | before["I2"],
                   "Scaling Out, first rebalance: no active moved to I3, which has no state"))
    checks.append((len(i3.warmup) > 0, "Scaling Out, first rebalance: I3 got warm-ups (standbys to catch up)"))
    final = await scene.wait_for(lambda g: settled(g, 3), "I3 warms up", deadline, since=start)
    counts = active_counts(final)
    checks.append((max(counts.values()) - min(counts.values()) <= 1 and counts.get("I3", 0) >= 1,
                   f"Scaling Out, settled in {time.monotonic() - start:.1f} s: balanced, one active each"))


def choose_victim(group: pb.GroupDescription) -> str:
    """The instance whose loss the standbys absorb least evenly: each of its actives goes to the
    holder of its standby (the most caught up), so pick the loss that leaves the survivors'
    active counts furthest apart. That is KIP-441's Pt. 2 shape, whatever layout the assignor
    chose at the start (the KIP's I1 is such an instance in its own table)."""
    actives = {name_of(m): {codec.task_from_proto(t) for t in m.active} for m in group.members}
    standby_host = {codec.task_from_proto(t): name_of(m) for m in group.members for t in m.standby}

    def spread(victim: str) -> tuple[int, int, str]:
        counts = {name: len(tasks) for name, tasks in actives.items() if name != victim}
        for task in actives[victim]:
            if standby_host.get(task) in counts:
                counts[standby_host[task]] += 1
        return (max(counts.values()) - min(counts.values()), len(actives[victim]), victim)

    return max(sorted(actives), key=spread)


async def scale_in(scene: Scene, deadline: float, checks: list[tuple[bool, str]], burst: int) -> None:
    tasks = scene.topology.task_ids()
    scene.console.rule("[bold]KIP-441 Scaling In (Pt. 2 – standbys lag nontrivially)[/]: 4 tasks, 1 standby, I1–I3")
    for name in ("I1", "I2", "I3"):
        await scene.start_worker(name, seeded=tasks)
    initial = await scene.wait_for(lambda g: settled(g, 3), "I1, I2 and I3 form the group", deadline)
    await scene.until_in_sync(deadline)
    for worker in scene.workers.values():
        worker.forget_unassigned()  # as in the KIP's initial table: each instance holds only its replicas
    victim = choose_victim(initial)
    standby_host = {codec.task_from_proto(t): name_of(m) for m in initial.members for t in m.standby}
    victim_actives = next({codec.task_from_proto(t) for t in m.active} for m in initial.members if name_of(m) == victim)
    for worker in scene.workers.values():
        worker.replication_paused = True
    scene.changelogs.burst(burst)
    scene.console.print(f"[bold]-- The standbys stall while {burst:,} offsets land on every changelog; "
                        f"{victim} is brought down without leaving --[/]")
    await asyncio.sleep(0.5)  # a heartbeat or two: the leader hears of the standbys' lag
    dead_gen = initial.generation_id
    start = time.monotonic()
    await scene.kill(victim)
    first = await scene.wait_for(lambda g: g.generation_id > dead_gen and g.state == pb.GROUP_STATE_STABLE
                                 and len(g.members) == 2, f"{victim}'s session times out", deadline, since=start)
    for worker in scene.workers.values():
        worker.replication_paused = False
    checks.append((time.monotonic() - start >= scene.options.session_timeout_ms / 1000 * 0.9,
                   f"Scaling In: the leader waited for {victim}'s session timeout (it sent no LeaveGroup)"))
    owner = {codec.task_from_proto(t): name_of(m) for m in first.members for t in m.active}
    checks.append((set(owner) == set(tasks) and all(owner[t] == standby_host.get(t) for t in victim_actives),
                   f"Scaling In, first rebalance: {victim}'s actives went to their (lagging) standbys, "
                   "the most caught-up instances"))
    final = await scene.wait_for(lambda g: settled(g, 2), "the warm-ups catch up", deadline, since=start)
    counts = active_counts(final)
    checks.append((sorted(counts.values()) == [2, 2],
                   f"Scaling In, settled in {time.monotonic() - start:.1f} s: two actives each"))


async def run(options: DemoOptions) -> int:
    console = Console()
    server_process = None
    deadline = time.monotonic() + options.timeout_s
    checks: list[tuple[bool, str]] = []
    scenes: list[Scene] = []
    ticker = None
    started = time.monotonic()
    try:
        address = options.server
        if address is None:
            server_process = ServerProcess(tls=options.tls)
            mtls = " with mTLS and ACLs (its own CA)" if options.tls else ""
            console.print(f"starting [bold]remote-leader serve[/] on {server_process.address}{mtls} ...")
            await server_process.start()
            address = server_process.address
            tls = server_process.client_tls
        else:
            tls = None
            await wait_until_serving(address, 10)
        console.print(f"server ready at {address}; simulated restoration at {options.restore_rate:,} offsets/s, "
                      f"changelogs of {options.changelog_offsets:,} offsets, acceptable_recovery_lag "
                      f"{options.acceptable_recovery_lag:,}")
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                      console=console, transient=True) as progress:
            suffix = str(int(time.time()))
            out = Scene(f"scale-out-{suffix}", _topology(3), options, address, console, progress, tls=tls)
            scenes.append(out)
            ticker = asyncio.create_task(_ticker(scenes))
            await scale_out(out, deadline, checks)
            await out.close()
            inn = Scene(f"scale-in-{suffix}", _topology(4), options, address, console, progress, tls=tls)
            scenes.append(inn)
            await scale_in(inn, deadline, checks, burst=max(4 * options.acceptable_recovery_lag, options.restore_rate // 2))
            await inn.close()
    except TimeoutError as error:
        hint = f" (is the server at {options.server} started with {needed_flags()}?)" if options.server else ""
        checks.append((False, f"timed out after {options.timeout_s:.0f} s while waiting for: {error}{hint}"))
    except RuntimeError as error:
        console.print(f"[red]demo failed:[/] {error}")
        checks.append((False, str(error)))
    finally:
        if ticker is not None:
            ticker.cancel()
        for scene in scenes:
            with contextlib.suppress(Exception):
                await scene.close()
        if server_process is not None:
            await server_process.stop()
    console.rule("[bold]What KIP-441 promised, and what happened[/]")
    for ok, text in checks:
        console.print(("[green]✓[/] " if ok else "[red]✗[/] ") + text)
    passed = bool(checks) and all(ok for ok, _ in checks)
    console.print(f"demo {'passed' if passed else 'FAILED'} in {time.monotonic() - started:.1f} s")
    return 0 if passed else 1
