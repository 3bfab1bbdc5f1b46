"""The what-if simulator: one group, one scaling event, one assignor config, simulated in time.

Plain Python over ``assignor/`` only, so that Spark executors (``pipeline.sweep``) and the
tests run exactly the same code. A run replays what the service would do after a scaling
event: a rebalance wherever the real server runs one (member events, the probing rebalance at
the follow-up time, the lag-driven early probe of docs/interfaces.md), restoration progressing
linearly between them, and the real ``assignor.assign`` deciding every assignment.

The time model (documented in docs/pipeline.md):

- Every replica a client holds has a lag in offsets. A restoring active (lag > 0) is *down*
  and restores at ``restore_rate`` offsets/s; the changelog does not grow meanwhile (the
  active is its only writer). A standby or warm-up restores at ``restore_rate`` while the
  changelog grows at ``append_rate``, so it gains ``restore_rate - append_rate`` per second
  until it tracks the end. State a client keeps but no longer runs falls behind at
  ``append_rate`` (KIP-441: members report lags of all state on disk, not only assigned).
- A fresh replica starts at the task's changelog size. Clients removed by a scale-in or a lost
  rack lose their state; a restarted client keeps it.
- Task downtime is the time a task has no running active: its owner is restoring, or gone and
  the loss not yet noticed (a crash is noticed after ``session_timeout_s``).
- Probing: the server's policy, ``assignor.probing``: after an assignment that needs a
  follow-up, the next rebalance is at ``probing_interval_s``, or, with the early probe on, as
  soon as every replica warming up for a move reports a lag within ``acceptable_recovery_lag``
  but never sooner than ``min_probe_interval_s`` after the last rebalance (the server's
  ``--early-probe`` and ``--min-probe-interval-ms``); with no replica warming up, no early
  probe. Members report continuously here (the server hears them at each heartbeat).
- Exactness: time is integer milliseconds and a lag an integer count of 1/``scale`` offsets
  (``_Clock``), so a replica reaches ``acceptable_recovery_lag`` at an exact instant and
  reports it there (a member reports whole offsets, rounded up).
- The starting group is the assignor's own fixpoint, settled by ``assignor.convergence.settle``
  as the convergence tests settle theirs.
- Settled: every scheduled member event has happened, the last assignment needed no probing
  rebalance, and every active has finished restoring. A run given up (``Timing``) is simulated up
  to ``max_simulated_s``, or out of rebalances up to the next rebalance it would need.
- Warm-ups (``peak_warmups``, a step's ``warmups``): replicas warming up for a planned move, the
  warm-up replicas and the standbys doubling as warm-ups (``assignor.probing.warming_replicas``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from typing import Any

from assignor import (
    LATEST,
    AssignmentConfig,
    AssignmentResult,
    ClientAssignment,
    ClientState,
    InvalidInput,
    Lag,
    TaskId,
    TaskSpec,
    TopicPartition,
    assign,
)
from assignor.balance import imbalance, is_balanced
from assignor.convergence import settle
from assignor.probing import Probe, ProbingSettings, Trigger, early_probe, followup_probe, warming_replicas
from assignor.scenario import parse_problem, parse_result

EVENT_KINDS = ("scale_out", "scale_in", "rolling_restart", "lose_rack")
LAG_KINDS = ("in_sync", "uniform", "exponential")

# Upper bounds of every numeric grid value (docs/pipeline.md, "Bounds"): generous, but they keep
# one run (and, with the grid's own bounds in ``pipeline.grid``, one sweep) finite.
MAX_CLIENTS = 5_000  # members of a group, before and after its event
MAX_THREADS = 1_000  # stream threads per member
MAX_TASKS = 100_000  # subtopologies x partitions: the assignor's largest benchmarked group
MAX_STANDBYS = 100
MAX_OFFSETS = 10**15  # changelog sizes, lags and acceptable_recovery_lag, in offsets
MAX_RATE = 10**12  # offsets per second
MAX_SECONDS = 365 * 86_400  # any duration: one simulated year
MAX_REBALANCES = 10_000  # timing.max_rebalances
DEFAULT_CHANGELOG_OFFSETS = 1_000_000  # group.changelog_offsets


class InvalidSpec(InvalidInput):
    """A run or grid value that cannot be simulated; ``field`` names it (the assignor's own
    contract error, so callers handle both alike)."""


# ---------------------------------------------------------------- the inputs of one run


@dataclass(frozen=True, slots=True)
class GroupShape:
    """A generated starting group: one point of the grid's ``group`` axes."""

    clients: int = 6
    threads: int = 1
    racks: int = 3
    subtopologies: int = 2
    partitions: int = 6
    stateful_share: float = 1.0
    standbys: int = 1
    changelog_offsets: int = DEFAULT_CHANGELOG_OFFSETS
    lag: str = "in_sync"
    restore_rate: float = 10_000.0
    append_rate: float = 100.0

    def __post_init__(self) -> None:
        _require_int("group.clients", self.clients, 1, MAX_CLIENTS)
        _require_int("group.threads", self.threads, 1, MAX_THREADS)
        _require_int("group.subtopologies", self.subtopologies, 1, MAX_TASKS)
        _require_int("group.partitions", self.partitions, 1, MAX_TASKS)
        if self.subtopologies * self.partitions > MAX_TASKS:
            raise InvalidSpec("group.partitions", f"subtopologies x partitions must be <= {MAX_TASKS} tasks, "
                                                  f"got {self.subtopologies} x {self.partitions}")
        _require_int("group.racks", self.racks, 0, MAX_CLIENTS)
        _require_int("group.standbys", self.standbys, 0, MAX_STANDBYS)
        _require_int("group.changelog_offsets", self.changelog_offsets, 0, MAX_OFFSETS)
        share = self.stateful_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0.0 <= share <= 1.0:
            raise InvalidSpec("group.stateful_share", f"expected a fraction in [0, 1], got {share!r}")
        parse_lag_distribution(self.lag)
        _check_rates(self.restore_rate, self.append_rate)
        _floats(self, "stateful_share", "restore_rate", "append_rate")


@dataclass(frozen=True, slots=True)
class Rates:
    """Restoration and changelog growth, offsets per second per replica; and, for a logged start
    whose record gives a task no ``changelog_offsets``, the size a fresh replica restores (at
    least the largest lag a member reports for it): without one it would restore for free."""

    restore_rate: float
    append_rate: float
    changelog_offsets: int = DEFAULT_CHANGELOG_OFFSETS

    def __post_init__(self) -> None:
        _check_rates(self.restore_rate, self.append_rate)
        _require_int("group.changelog_offsets", self.changelog_offsets, 0, MAX_OFFSETS)
        _floats(self, "restore_rate", "append_rate")


@dataclass(frozen=True, slots=True)
class ScalingEvent:
    """What happens at t=0: ``kind`` from EVENT_KINDS; ``count`` clients (0 = all, restarts)."""

    kind: str
    count: int = 0

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise InvalidSpec("events", f"unknown event {self.kind!r}; expected one of {', '.join(EVENT_KINDS)}")
        _require_int("events.count", self.count, 0, MAX_CLIENTS)
        if self.kind in ("scale_out", "scale_in") and self.count < 1:
            raise InvalidSpec("events", f"{self.kind} needs a count >= 1, e.g. '{self.kind}:2'")

    @classmethod
    def parse(cls, text: Any) -> ScalingEvent:
        if not isinstance(text, str):
            raise InvalidSpec("events", f"expected 'kind' or 'kind:count', got {text!r}")
        kind, _, count = text.partition(":")
        if count and not count.isdigit():
            raise InvalidSpec("events", f"count must be a non-negative integer in {text!r}")
        return cls(kind.strip(), int(count) if count else 0)

    def label(self) -> str:
        return f"{self.kind}:{self.count}" if self.count else self.kind


@dataclass(frozen=True, slots=True)
class SimConfig:
    """The assignor and probing settings under test: one point of the grid's ``configs`` axes."""

    assignor: str = "high_availability"
    acceptable_recovery_lag: int = 10_000
    max_warmup_replicas: int = 2
    probing_interval_s: float = 600.0
    early_probe: bool = True
    min_probe_interval_s: float = 60.0
    rack_strategy: str = "none"

    def __post_init__(self) -> None:
        if not isinstance(self.early_probe, bool):
            raise InvalidSpec("configs.early_probe", f"expected true or false, got {self.early_probe!r}")
        _require_seconds("configs.min_probe_interval_s", self.min_probe_interval_s)
        if isinstance(self.probing_interval_s, bool) or not isinstance(self.probing_interval_s, int | float) \
                or not math.isfinite(self.probing_interval_s) or self.probing_interval_s > MAX_SECONDS:
            raise InvalidSpec("configs.probing_interval_s", f"expected seconds <= {MAX_SECONDS}, "
                                                            f"got {self.probing_interval_s!r}")
        _floats(self, "probing_interval_s", "min_probe_interval_s")
        try:
            self.assignment_config(0)
        except InvalidInput as error:
            if error.field == "config.probing_rebalance_interval_ms":  # in this field's unit, seconds
                raise InvalidSpec("configs.probing_interval_s", f"must be >= 60 (KIP-441's minimum probing interval), "
                                                                 f"got {self.probing_interval_s!r}") from None
            name = {"rack_aware_strategy": "rack_strategy"}.get(error.field.removeprefix("config."),
                                                                error.field.removeprefix("config."))
            raise InvalidSpec(f"configs.{name}", error.message) from None
        for name, maximum in (("acceptable_recovery_lag", MAX_OFFSETS), ("max_warmup_replicas", MAX_TASKS)):
            if getattr(self, name) > maximum:
                raise InvalidSpec(f"configs.{name}", f"expected at most {maximum}, got {getattr(self, name)!r}")

    def assignment_config(self, standbys: int) -> AssignmentConfig:
        return AssignmentConfig(
            assignor=self.assignor,
            acceptable_recovery_lag=self.acceptable_recovery_lag,
            max_warmup_replicas=self.max_warmup_replicas,
            num_standby_replicas=standbys,
            probing_rebalance_interval_ms=int(round(self.probing_interval_s * 1000)),
            rack_aware_strategy=self.rack_strategy,
        )

    def label(self) -> str:
        probe = f"early>={self.min_probe_interval_s:g}s" if self.early_probe else "no-early"
        return (f"{self.assignor} arl={self.acceptable_recovery_lag} mwr={self.max_warmup_replicas} "
                f"probe={self.probing_interval_s:g}s {probe} rack={self.rack_strategy}")


@dataclass(frozen=True, slots=True)
class Timing:
    """How members come and go, and when a run is given up as unsettled."""

    session_timeout_s: float = 45.0
    restart_s: float = 30.0
    max_simulated_s: float = 86_400.0
    max_rebalances: int = 500

    def __post_init__(self) -> None:
        for name in ("session_timeout_s", "restart_s", "max_simulated_s"):
            _require_seconds(f"timing.{name}", getattr(self, name))
        _floats(self, "session_timeout_s", "restart_s", "max_simulated_s")
        _require_int("timing.max_rebalances", self.max_rebalances, 1, MAX_REBALANCES)


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run: a starting group (generated from ``shape`` or a logged ``start``), an event, a config.

    ``start`` is a rebalance-log record's ``{"input": ..., "output": ...}`` (docs/interfaces.md);
    then ``rates`` replaces the shape's restoration figures.
    """

    run_id: str
    seed: int
    event: ScalingEvent
    config: SimConfig
    timing: Timing = field(default_factory=Timing)
    shape: GroupShape | None = None
    start: Mapping[str, Any] | None = None
    rates: Rates | None = None
    point: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        raw = json.loads(text)
        return cls(
            run_id=raw["run_id"],
            seed=raw["seed"],
            event=ScalingEvent(**raw["event"]),
            config=SimConfig(**raw["config"]),
            timing=Timing(**raw["timing"]),
            shape=GroupShape(**raw["shape"]) if raw.get("shape") else None,
            start=raw.get("start"),
            rates=Rates(**raw["rates"]) if raw.get("rates") else None,
            point=raw.get("point") or {},
        )


def _require_int(name: str, value: Any, minimum: int, maximum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidSpec(name, f"expected an integer >= {minimum}, got {value!r}")
    if value > maximum:
        raise InvalidSpec(name, f"expected an integer <= {maximum}, got {value!r}")


def _require_seconds(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_SECONDS:
        raise InvalidSpec(name, f"expected seconds in [0, {MAX_SECONDS}], got {value!r}")


def _floats(value: Any, *names: str) -> None:
    """Store numeric fields as floats, so rows have one type per column whatever the YAML said."""
    for name in names:
        object.__setattr__(value, name, float(getattr(value, name)))


def _check_rates(restore_rate: Any, append_rate: Any) -> None:
    for name, value in (("restore_rate", restore_rate), ("append_rate", append_rate)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_RATE:
            raise InvalidSpec(f"group.{name}", f"expected offsets per second in [0, {MAX_RATE}], got {value!r}")
    if restore_rate <= append_rate:
        raise InvalidSpec("group.restore_rate", f"must exceed append_rate ({append_rate}) or standbys never catch up")


def parse_lag_distribution(text: Any) -> tuple[str, tuple[float, ...]]:
    """``in_sync``, ``uniform:LO:HI`` or ``exponential:MEAN``: how far standbys are behind at t=0."""
    if not isinstance(text, str):
        raise InvalidSpec("group.lag", f"expected a string like 'uniform:0:50000', got {text!r}")
    kind, *args = text.split(":")
    arity = {"in_sync": 0, "uniform": 2, "exponential": 1}.get(kind)
    if arity is None or len(args) != arity:
        raise InvalidSpec("group.lag", f"expected 'in_sync', 'uniform:LO:HI' or 'exponential:MEAN', got {text!r}")
    try:
        values = tuple(float(a) for a in args)
    except ValueError:
        raise InvalidSpec("group.lag", f"non-numeric parameter in {text!r}") from None
    if not all(0 <= v <= MAX_OFFSETS for v in values) or (kind == "uniform" and values[0] > values[1]):
        raise InvalidSpec("group.lag", f"parameters must be in [0, {MAX_OFFSETS}] and LO <= HI in {text!r}")
    return kind, values


def run_seed(*parts: Any) -> int:
    """A deterministic 63-bit seed from the run's identity (never Python's salted ``hash``)."""
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


# ---------------------------------------------------------------- the starting group


@dataclass(frozen=True, slots=True)
class Member:
    id: str
    threads: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class _Clock:
    """Exact restoration: a lag is an integer count of 1/``scale`` offsets and time is integer
    milliseconds, so a replica gains a whole number of units per millisecond and reaches a
    threshold at an exact instant. ``scale`` is 1000 times the common denominator of the rates."""

    scale: int
    restore: int  # units per millisecond
    append: int

    @classmethod
    def of(cls, rates: Rates) -> _Clock:
        restore, append = Fraction(str(rates.restore_rate)), Fraction(str(rates.append_rate))
        denominator = math.lcm(restore.denominator, append.denominator)
        return cls(1000 * denominator, int(restore * denominator), int(append * denominator))

    def units(self, offsets: int) -> int:
        return offsets * self.scale

    def reported(self, units: int) -> Lag:
        """What a member reports: whole offsets, rounded up."""
        return Lag.behind(-(-units // self.scale))

    def offsets(self, units: float) -> float:
        return units / self.scale


@dataclass(slots=True)
class _World:
    """The mutable state of one run; private to ``simulate``."""

    tasks: tuple[TaskSpec, ...]
    specs: dict[TaskId, TaskSpec]
    members: dict[str, Member]  # in the group now
    known: dict[str, Member]  # every client that exists (members, restarting ones)
    assignment: dict[str, ClientAssignment]
    lags: dict[str, dict[TaskId, int]]  # state on each client's disk, in ``clock`` units
    running: dict[str, set[TaskId]]  # actives restored and processing
    clock: _Clock
    standbys: int
    crashed: set[str] = field(default_factory=set)  # gone, but the group has not noticed yet
    sizes: dict[TaskId, int] = field(default_factory=dict)  # offsets a fresh replica restores

    def fresh(self, task: TaskId) -> int:
        """A fresh replica's lag in clock units: the task's whole changelog."""
        return self.clock.units(self.sizes.get(task, self.specs[task].changelog_offsets or 0))


def generate_group(shape: GroupShape, rng: random.Random) -> tuple[tuple[TaskSpec, ...], list[Member]]:
    """Tasks (first ``stateful_share`` of the subtopologies stateful) and clients spread over racks."""
    rack_names = [f"r{i}" for i in range(shape.racks)]
    stateful_count = round(shape.stateful_share * shape.subtopologies)
    tasks = []
    for sub in range(shape.subtopologies):
        stateful = sub < stateful_count
        for part in range(shape.partitions):
            size = int(shape.changelog_offsets * rng.uniform(0.5, 1.5)) if stateful else None
            racks = frozenset(rng.sample(rack_names, min(2, len(rack_names)))) if rack_names else frozenset()
            tasks.append(TaskSpec(TaskId(sub, part), stateful, size, (TopicPartition(f"topic{sub}", part, racks),)))
    members = [new_member(i, shape.threads, shape.racks) for i in range(shape.clients)]
    return tuple(tasks), members


def new_member(index: int, threads: int, racks: int) -> Member:
    return Member(f"c{index:04d}", threads, f"r{index % racks}" if racks else None)


WARM_START_ROUNDS = 20


def _warm_start(world: _World, config: AssignmentConfig) -> int:
    """The settled assignment the group ran before the event: the assignor's own fixpoint,
    reached by ``assignor.convergence.settle`` (every assigned replica caught up between rounds);
    scenario.md: such an assignment then comes back unchanged. Returns the rounds it took."""
    clients = [_client_state(world, world.members[c]) for c in sorted(world.members)]
    results, _ = settle(world.tasks, clients, config, max_rounds=WARM_START_ROUNDS)
    final = results[-1]
    if final.probing_rebalance_needed:
        raise InvalidSpec("group", f"the starting group did not settle in {WARM_START_ROUNDS} warm-start rebalances")
    _apply(world, final)
    for client in world.members:
        owned = world.assignment[client].all_tasks()
        world.lags[client] = {t: 0 for t in owned if world.specs[t].stateful}
        world.running[client] = set(world.assignment[client].active)
    return len(results)


# Warm starts are the costliest part of a short run and the same for every config of a grid point
# that differs only in warm-up budget or probing; each executor process keeps the last few.
_WARM_STARTS: dict[tuple, tuple[dict, dict, dict]] = {}
_WARM_START_SLOTS = 32


def _cached_warm_start(world: _World, group_key: tuple, config: AssignmentConfig) -> None:
    """``_warm_start`` through a small per-process cache; the rows are the same with or without it.

    The key leaves out ``max_warmup_replicas`` and the probing interval, so only a warm start that
    settled in one assignment is kept: that assignment requested no warm-up (a request always
    makes the result need a probing rebalance), so neither setting shaped it.
    """
    key = (group_key, replace(config, max_warmup_replicas=1, probing_rebalance_interval_ms=600_000))
    held = _WARM_STARTS.get(key)
    if held is not None:
        assignment, lags, running = held
        world.assignment = dict(assignment)
        world.lags = {c: dict(v) for c, v in lags.items()}
        world.running = {c: set(v) for c, v in running.items()}
        return
    if _warm_start(world, config) == 1:
        if len(_WARM_STARTS) >= _WARM_START_SLOTS:
            _WARM_STARTS.pop(next(iter(_WARM_STARTS)))
        _WARM_STARTS[key] = (dict(world.assignment), {c: dict(v) for c, v in world.lags.items()},
                             {c: set(v) for c, v in world.running.items()})


def clear_warm_start_cache() -> None:
    _WARM_STARTS.clear()


def _standby_lags(world: _World, lag: str, rng: random.Random) -> None:
    kind, args = parse_lag_distribution(lag)
    for client in sorted(world.members):
        for task in world.assignment[client].standby:
            if kind == "uniform":
                world.lags[client][task] = world.clock.units(int(rng.uniform(args[0], args[1])))
            elif kind == "exponential":
                world.lags[client][task] = world.clock.units(int(rng.expovariate(1 / args[0])) if args[0] else 0)


def world_from_log(start: Mapping[str, Any], rates: Rates) -> tuple[_World, int]:
    """A real group from a rebalance-log record: its tasks, members and the assignment it got.

    Lags are those the members reported; a replica the output newly assigned, or one reported
    ``"unknown"``, restores the whole changelog (``logged_sizes``); the assignment is the
    record's output.
    """
    if not isinstance(start, Mapping) or "input" not in start or "output" not in start:
        raise InvalidSpec("from_log", "a start record needs 'input' and 'output'")
    try:
        problem = parse_problem(start["input"])
    except InvalidInput as error:
        raise InvalidSpec(f"from_log.input.{error.field}", error.message) from None
    try:
        output = parse_result(start["output"], "from_log.output")
    except InvalidInput as error:
        raise InvalidSpec(error.field, error.message) from None
    specs = {spec.id: spec for spec in problem.tasks}
    clock = _Clock.of(rates)
    world = _World(problem.tasks, specs, {}, {}, {}, {}, {}, clock, problem.config.num_standby_replicas,
                   sizes=logged_sizes(problem.tasks, problem.clients, rates.changelog_offsets))
    for client in problem.clients:
        member = Member(client.id, client.threads, client.rack)
        world.members[client.id] = world.known[client.id] = member
        world.assignment[client.id] = assignment = output.clients.get(client.id, ClientAssignment())
        lags: dict[TaskId, int] = {}
        for task, lag in client.lags.items():
            if specs[task].stateful:
                behind = lag.known_offsets
                lags[task] = world.fresh(task) if behind is None else min(clock.units(behind), world.fresh(task))
        for task in assignment.all_tasks():
            if specs[task].stateful:
                lags.setdefault(task, world.fresh(task))
        world.lags[client.id] = lags
        world.running[client.id] = {t for t in assignment.active if lags.get(t, 0) == 0}
    return world, problem.config.num_standby_replicas


def logged_sizes(tasks: Sequence[TaskSpec], clients: Sequence[ClientState], assumed: int) -> dict[TaskId, int]:
    """Offsets a fresh replica of each stateful task restores in a logged start: the record's
    ``changelog_offsets``; absent (scenario-format.md: unbounded, and the server logs none), the
    grid's ``group.changelog_offsets`` raised to the largest lag a member reports for the task,
    since a changelog is at least as long as any lag behind its end. Never 0 for free."""
    sizes = {}
    for spec in tasks:
        if not spec.stateful:
            continue
        if spec.changelog_offsets is not None:
            sizes[spec.id] = spec.changelog_offsets
            continue
        reported = [lag.known_offsets for client in clients for task, lag in client.lags.items()
                    if task == spec.id and lag.known_offsets is not None]
        sizes[spec.id] = max([assumed, *reported])
    return sizes


# ---------------------------------------------------------------- one rebalance


def _client_state(world: _World, member: Member) -> ClientState:
    """The member as the server sees it: the lag of all state on disk (a running active reports
    "latest"), from which the server reads its previous tasks (``ClientState.from_report``);
    the owners of stateless tasks, which report no lag, the server takes from its last
    assignment (server.memory), which is the current one here."""
    running = world.running.get(member.id, set())
    lags = {}
    for task, lag in world.lags.get(member.id, {}).items():
        lags[task] = LATEST if task in running else world.clock.reported(lag)
    client = ClientState.from_report(member.id, lags, threads=member.threads, rack=member.rack)
    current = world.assignment.get(member.id, ClientAssignment())
    stateless = frozenset(task for task in current.active if not world.specs[task].stateful)
    return replace(client, prev_active=client.prev_active | stateless) if stateless else client


def _assign(world: _World, config: AssignmentConfig) -> AssignmentResult:
    clients = [_client_state(world, world.members[c]) for c in sorted(world.members)]
    return assign(world.tasks, clients, config)


def _apply(world: _World, result: AssignmentResult) -> int:
    """Install a new assignment; returns the number of active tasks that changed client."""
    before = {task: client for client, ca in world.assignment.items() if client in world.members for task in ca.active}
    for client in world.members:
        new = result.clients.get(client, ClientAssignment())
        world.assignment[client] = new
        lags = world.lags.setdefault(client, {})
        for task in new.all_tasks():
            if world.specs[task].stateful and task not in lags:
                lags[task] = world.fresh(task)
        running = world.running.setdefault(client, set())
        running &= set(new.active)
        if client in world.crashed:
            continue
        for task in new.active:
            if not world.specs[task].stateful or lags[task] == 0:
                running.add(task)
    return sum(1 for task, client in result.active_owner().items() if before.get(task) != client)


# ---------------------------------------------------------------- time passing


@dataclass(slots=True)
class _Totals:
    downtime_s: float = 0.0
    offsets_restored: float = 0.0


def _advance(world: _World, dt: int, totals: _Totals) -> None:
    """Restoration over ``dt`` milliseconds: lags, downtime and restored offsets (see module doc)."""
    if dt <= 0:
        return
    clock = world.clock
    restore, net = clock.restore, clock.restore - clock.append
    owner = {task: client for client, ca in world.assignment.items() if client in world.members for task in ca.active}
    for task, spec in world.specs.items():
        client = owner.get(task)
        if client is None or client in world.crashed:
            totals.downtime_s += dt / 1000
        elif spec.stateful and task not in world.running[client]:
            lag = world.lags[client][task]
            restoring = min(dt, lag / restore)  # milliseconds
            totals.downtime_s += restoring / 1000
            totals.offsets_restored += clock.offsets(restoring * restore)
            world.lags[client][task] = lag = max(0, lag - restore * dt)
            if lag == 0:
                world.running[client].add(task)
    for client, lags in world.lags.items():
        if client in world.crashed:
            continue
        ca = world.assignment.get(client) if client in world.members else None
        replicas = (set(ca.standby) | set(ca.warmup)) if ca is not None else set()
        for task, lag in lags.items():
            if task in replicas:
                if lag > 0:
                    totals.offsets_restored += clock.offsets(min(dt, lag / net) * restore)
                    lags[task] = max(0, lag - net * dt)
            elif ca is None or task not in ca.active:
                lags[task] = lag + clock.append * dt


def _time_to_restore_actives(world: _World) -> int:
    """Milliseconds until every restoring active runs."""
    restore = world.clock.restore
    longest = 0
    for client in world.members:
        for task in world.assignment[client].active:
            if world.specs[task].stateful and task not in world.running[client]:
                longest = max(longest, -(-world.lags[client][task] // restore))
    return longest


def _warming_lags_ready(world: _World, watched: Sequence[tuple[str, TaskId]], acceptable: int
                        ) -> tuple[int, dict[str, dict[TaskId, Lag]]]:
    """(ms from now, the watched replicas' lags then): the first instant every watched replica
    reports a lag within ``acceptable`` (restoring at ``restore - append`` meanwhile)."""
    clock = world.clock
    net = clock.restore - clock.append
    threshold = clock.units(acceptable)
    wait = 0
    for client, task in watched:
        lag = world.lags.get(client, {}).get(task)
        if lag is not None and lag > threshold:
            wait = max(wait, -(-(lag - threshold) // net))
    lags: dict[str, dict[TaskId, Lag]] = {}
    for client, task in watched:
        lag = world.lags.get(client, {}).get(task)
        if lag is not None:
            lags.setdefault(client, {})[task] = clock.reported(max(0, lag - net * wait))
    return wait, lags


# ---------------------------------------------------------------- the run


def simulate(spec: RunSpec) -> dict[str, Any]:
    """Run one spec; returns ``{"run": {...metrics}, "steps": [{...per rebalance}]}``."""
    rng = random.Random(spec.seed)
    if spec.start is not None:
        rates = spec.rates or (Rates(spec.shape.restore_rate, spec.shape.append_rate, spec.shape.changelog_offsets)
                               if spec.shape else None)
        if rates is None:
            raise InvalidSpec("group.restore_rate", "a logged start needs restoration rates")
        world, standbys = world_from_log(spec.start, rates)
    else:
        if spec.shape is None:
            raise InvalidSpec("group", "a run needs a group shape or a logged start")
        shape = spec.shape
        tasks, members = generate_group(shape, rng)
        world = _World(tasks, {t.id: t for t in tasks}, {m.id: m for m in members}, {m.id: m for m in members},
                       {}, {}, {}, _Clock.of(Rates(shape.restore_rate, shape.append_rate)), shape.standbys)
        standbys = shape.standbys
        _cached_warm_start(world, (shape, spec.seed), spec.config.assignment_config(standbys))
        _standby_lags(world, shape.lag, rng)
    config = spec.config.assignment_config(standbys)
    return _Run(spec, world, config).run()


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


class _Run:
    """The event loop of one run; a private mutable builder that never escapes ``simulate``.
    Times are integer milliseconds."""

    def __init__(self, spec: RunSpec, world: _World, config: AssignmentConfig) -> None:
        self.spec, self.world, self.config = spec, world, config
        self.probing = ProbingSettings(spec.config.early_probe, _ms(spec.config.min_probe_interval_s))
        self.now = 0
        self.totals = _Totals()
        self.steps: list[dict[str, Any]] = []
        self.pending: list[tuple[int, int, str, str]] = []  # (time, order, action, client)
        self.probe: Probe | None = None
        self.last_result: AssignmentResult | None = None
        self.peak_warmups = 0
        self.tasks_moved = 0
        self.last_event_ms = 0
        self.clients_before = len(world.members)
        self._order = itertools.count()
        self._restart_queue: list[str] = []

    def run(self) -> dict[str, Any]:
        """Rebalance after rebalance until nothing is left to do, then restore the last actives.

        "Nothing left to do" is checked before the rebalance budget, so a run that settles on its
        last allowed rebalance is settled; and a run is settled only if its actives finish
        restoring within ``max_simulated_s`` too.

        A run given up is still simulated up to where it stops, restoring and counting downtime
        meanwhile: up to ``max_simulated_s``, or, out of rebalances, up to the next rebalance it
        would need (when that comes sooner). Stopping the clock at the last rebalance instead
        left an unsettled run's restoration and downtime uncounted (0 task·s while tasks were down)."""
        self._schedule_event()
        timing = self.spec.timing
        bound = _ms(timing.max_simulated_s)
        settled = False
        while True:
            candidates = [(t, 0, action, client) for t, _, action, client in self.pending[:1]]
            if self.probe is not None:
                candidates.append((self.probe.at_ms, 1, "probe", ""))
            if not candidates:
                settled = True
                break
            when, _, action, client = min(candidates)
            if len(self.steps) >= timing.max_rebalances or when > bound:
                stop = min(when, bound)
                _advance(self.world, stop - self.now, self.totals)
                self.now = max(self.now, stop)
                break
            _advance(self.world, when - self.now, self.totals)
            self.now = when
            if action == "probe":
                self._rebalance(self.probe.trigger)
            else:
                self._member_events(when)
        settle_at = None
        if settled:
            tail = _time_to_restore_actives(self.world)
            if self.now + tail > bound:
                settled = False
                tail = bound - self.now
            _advance(self.world, tail, self.totals)
            self.now += tail
            settle_at = self.now / 1000 if settled else None
        return {"run": self._summary(settled, settle_at), "steps": self.steps}

    # -- events

    def _schedule_event(self) -> None:
        event, world, timing = self.spec.event, self.world, self.spec.timing
        ordered = sorted(world.members)
        if event.kind == "scale_out":
            shape = self.spec.shape
            threads = shape.threads if shape else max(m.threads for m in world.members.values())
            racks = sorted({m.rack for m in world.members.values() if m.rack})
            start = len(world.known)
            for i in range(event.count):
                member = Member(f"c{start + i:04d}", threads, racks[(start + i) % len(racks)] if racks else None)
                while member.id in world.known:
                    member = Member(member.id + "+", member.threads, member.rack)
                world.known[member.id] = member
                self._push(0, "join", member.id)
        elif event.kind == "scale_in":
            if event.count >= len(ordered):
                raise InvalidSpec("events", f"scale_in:{event.count} would remove all {len(ordered)} clients")
            for client in ordered[-event.count:]:
                self._push(0, "leave", client)
        elif event.kind == "lose_rack":
            racks = sorted({m.rack for m in world.members.values() if m.rack})
            if len(racks) < 2:
                raise InvalidSpec("events", "lose_rack needs clients on at least 2 racks")
            lost = racks[0]
            for client in ordered:
                if world.members[client].rack == lost:
                    self._crash(client)
                    self._push(_ms(timing.session_timeout_s), "expire", client)
        else:  # rolling_restart: one at a time, the next once the previous is back
            restarting = ordered if event.count == 0 else ordered[:event.count]
            self._restart_queue = list(restarting)
            self._next_restart(0)

    def _next_restart(self, when: int) -> None:
        if self._restart_queue:
            client = self._restart_queue.pop(0)
            self._push(when, "leave_restart", client)
            self._push(when + _ms(self.spec.timing.restart_s), "rejoin", client)

    def _push(self, when: int, action: str, client: str) -> None:
        self.pending.append((when, next(self._order), action, client))
        self.pending.sort()

    def _crash(self, client: str) -> None:
        """The process is gone but the group does not know yet: its tasks stop running now."""
        self.world.running[client] = set()
        self.world.lags.pop(client, None)
        self.world.crashed.add(client)

    def _member_events(self, when: int) -> None:
        """Every member event due now, then one rebalance for all of them (as the server batches)."""
        world = self.world
        trigger = None
        rejoined = []
        while self.pending and self.pending[0][0] <= when:
            _, _, action, client = self.pending.pop(0)
            if action == "join":
                world.members[client] = world.known[client]
                world.assignment[client] = ClientAssignment()
                trigger = trigger or Trigger.MEMBER_JOINED
            elif action == "leave":
                self._remove(client, keep_state=False)
                trigger = trigger or Trigger.MEMBER_LEFT
            elif action == "leave_restart":
                self._remove(client, keep_state=True)
                trigger = trigger or Trigger.MEMBER_LEFT
            elif action == "expire":
                self._remove(client, keep_state=False)
                trigger = trigger or Trigger.SESSION_EXPIRED
            elif action == "rejoin":
                world.members[client] = world.known[client]
                trigger = trigger or Trigger.MEMBER_REJOINED
                rejoined.append(client)
        self.last_event_ms = when
        if world.members:
            self._rebalance(trigger or Trigger.MEMBER_JOINED)
        else:  # the only member restarting: no one to rebalance, every task down until it is back
            self.probe = None
        for _ in rejoined:
            self._next_restart(self.now)

    def _remove(self, client: str, *, keep_state: bool) -> None:
        world = self.world
        world.members.pop(client, None)
        world.running[client] = set()
        if keep_state:
            # A restarting process keeps its state directory; it reports no previous tasks.
            world.assignment[client] = ClientAssignment()
        else:
            world.assignment.pop(client, None)
            world.lags.pop(client, None)
            world.known.pop(client, None)
            world.crashed.discard(client)

    # -- rebalances

    def _rebalance(self, trigger: Trigger) -> None:
        world = self.world
        result = _assign(world, self.config)
        moved = _apply(world, result)
        self.tasks_moved += moved
        self.last_result = result
        # KIP-441's warm-ups: every replica restoring for a planned move, i.e. the warm-up
        # replicas and the standbys doubling as warm-ups (the set the early probe watches).
        warmups = len(warming_replicas(result))
        self.peak_warmups = max(self.peak_warmups, warmups)
        self.probe = self._next_probe(result)
        counts, threads = self._active_counts()
        running = set().union(*(world.running.get(c, set()) for c in world.members))
        down = len(world.specs) - len(running)
        self.steps.append({
            "step": len(self.steps) + 1,
            "time_s": self.now / 1000,
            "trigger": str(trigger),
            "members": len(world.members),
            "moved": moved,
            "warmups": warmups,
            "tasks_down": down,
            "imbalance": imbalance(counts, threads),
            "probing": result.probing_rebalance_needed,
            "downtime_s": self.totals.downtime_s,
        })

    def _next_probe(self, result: AssignmentResult) -> Probe | None:
        """The probing policy (``assignor.probing``), asked with the lags the warming replicas
        report at the first instant they are all within the acceptable lag."""
        probe = followup_probe(result, self.config, self.now)
        wait, lags = _warming_lags_ready(self.world, warming_replicas(result), self.config.acceptable_recovery_lag)
        early = early_probe(result, lags, self.config.acceptable_recovery_lag, self.probing, self.now + wait,
                            self.now, probe)
        return early or probe

    def _active_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        world = self.world
        counts = {c: len(world.assignment[c].active) for c in world.members}
        threads = {c: world.members[c].threads for c in world.members}
        return counts, threads

    def _cross_rack(self) -> int:
        """Input partitions read by an active on a rack holding no replica of them (KIP-925)."""
        world = self.world
        return sum(
            world.specs[task].cross_rack_partitions(world.members[client].rack)
            for client in world.members
            for task in world.assignment[client].active
        )

    def _summary(self, settled: bool, settle_at: float | None) -> dict[str, Any]:
        spec = self.spec
        counts, threads = self._active_counts()
        return {
            "run_id": spec.run_id,
            "seed": spec.seed,
            "event": spec.event.label(),
            "config": spec.config.label(),
            "clients_before": self.clients_before,
            "clients_after": len(self.world.members),
            "tasks": len(self.world.specs),
            "settled": settled,
            "settle_time_s": settle_at,
            "rebalances": len(self.steps),
            "downtime_task_s": self.totals.downtime_s,
            "offsets_restored": self.totals.offsets_restored,
            "peak_warmups": self.peak_warmups,
            "tasks_moved": self.tasks_moved,
            "cross_rack_partitions": self._cross_rack(),
            "imbalance": imbalance(counts, threads),
            "balanced": is_balanced(counts, threads, self.config.balance_factor),
            "simulated_s": self.now / 1000,
        }


# ---------------------------------------------------------------- flat rows for tables

SHAPE_COLUMNS = tuple(GroupShape.__dataclass_fields__)
CONFIG_COLUMNS = tuple(SimConfig.__dataclass_fields__)


def point_columns(spec: RunSpec) -> dict[str, Any]:
    """The run's grid point as flat ``g_*`` (group) and ``c_*`` (config) columns."""
    shape = asdict(spec.shape) if spec.shape else dict.fromkeys(SHAPE_COLUMNS)
    if spec.rates is not None:
        shape.update(asdict(spec.rates))
    return {
        **{f"g_{name}": shape[name] for name in SHAPE_COLUMNS},
        **{f"c_{name}": value for name, value in asdict(spec.config).items()},
        "start": str(spec.point.get("start", "generated")),
        "rep": int(spec.point.get("rep", 0)),
        "run_id": spec.run_id,
        "seed": spec.seed,
        "event": spec.event.label(),
        "config": spec.config.label(),
    }


def run_rows(spec: RunSpec) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``simulate`` flattened for tables: the run row (its grid point + metrics) and its step rows.

    Both the Spark job and plain-Python callers use this, so their rows are identical. A run
    that cannot be simulated (e.g. a logged group too small for its scale-in) is a row with
    ``error`` set and no metrics, not a failed job.
    """
    try:
        outcome = simulate(spec)
    except InvalidSpec as problem:
        return {**point_columns(spec), "error": str(problem)}, []
    row = {**point_columns(spec), **outcome["run"], "error": None}
    steps = [{"run_id": spec.run_id, **step} for step in outcome["steps"]]
    return row, steps
