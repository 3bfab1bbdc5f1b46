"""The shared domain model: tasks, client snapshots, configuration and results.

Every other package speaks these types. They are frozen value objects, built once at an
edge (the scenario JSON reader, the gRPC servicer, the simulator) and never mutated, so an
assignment is a pure function of them (house style: "Domain model").
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, NamedTuple

from assignor.lag import MAX_ACCEPTABLE_RECOVERY_LAG as MAX_ACCEPTABLE_RECOVERY_LAG
from assignor.lag import MAX_LONG as MAX_LONG
from assignor.lag import RUNNING, Lag
from assignor.lag import UNKNOWN as UNKNOWN

# Java's int (an int32 on the wire): the widest id part, partition, thread count, replica count
# or cost a scenario may give. Larger values are invalid input, not numbers to compute with
# (threads of 2^63 overflowed numpy; a traffic cost of 2^49 overflowed the flow's costs).
MAX_INT: Final = (1 << 31) - 1


class InvalidInput(ValueError):
    """Input that breaks the contract; ``field`` names the offending field (scenario.md, Input)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


class TaskId(NamedTuple):
    """A task: one partition of one subtopology. Orders numerically, prints as ``0_1``.

    An immutable named tuple rather than a dataclass: tasks are dictionary keys in every hot
    loop of the assignor, and a tuple hashes in C (a dataclass hash is a Python call; at
    20,000 tasks that alone cost half a second per assignment).
    """

    subtopology: int
    partition: int

    def __str__(self) -> str:
        return f"{self.subtopology}_{self.partition}"

    @classmethod
    def checked(cls, subtopology: int, partition: int, field_name: str) -> TaskId:
        """A task id from the wire's two integers (the leader's and the sidecar's edges)."""
        if subtopology < 0 or partition < 0:
            raise InvalidInput(field_name, f"subtopology and partition must be >= 0, got {subtopology}_{partition}")
        return cls(subtopology, partition)

    @classmethod
    def parse(cls, text: str, field_name: str = "task id") -> TaskId:
        if not isinstance(text, str):
            raise InvalidInput(field_name, f"expected a task id like '0_1', got {text!r}")
        head, sep, tail = text.partition("_")
        if not sep or not head.isdigit() or not tail.isdigit() or not head.isascii() or not tail.isascii():
            raise InvalidInput(field_name, f"expected '<subtopology>_<partition>' of non-negative integers, got {text!r}")
        head, tail = head.lstrip("0") or "0", tail.lstrip("0") or "0"  # 00_1 is 0_1 spelled otherwise
        if len(head) > 10 or len(tail) > 10 or int(head) > MAX_INT or int(tail) > MAX_INT:
            raise InvalidInput(field_name, f"subtopology and partition must be <= {MAX_INT}, got {text[:40]!r}")
        return cls(int(head), int(tail))


# The two lags that are not a number of offsets (scenario.md, "lags"; ``assignor.lag``): Kafka
# Streams reports a running, caught-up active as "latest"; "unknown" means the client has state
# for the task but cannot tell how much.
LATEST: Final = RUNNING



@dataclass(frozen=True, slots=True, order=True)
class HostInfo:
    """An instance's interactive-query endpoint (Kafka Streams ``application.server``, KIP-535):
    what a member reports in its subscription and what the host maps of an assignment point to."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str, field_name: str = "endpoint") -> HostInfo:
        host, sep, port = (text or "").rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidInput(field_name, f"expected 'host:port' with a port in 1..65535, got {text!r}")
        return cls(host, int(port))


@dataclass(frozen=True, slots=True)
class StateStore:
    """A state store of one subtopology, as the worker declares it and the leader keeps it.

    ``logged`` stores have a changelog topic to restore from (KIP-441 revision, "State with
    logging disabled": an unlogged store has nothing to restore). ``changelog_topic`` is the
    worker's override of Kafka Streams' naming; it stays on the worker (the wire does not carry it).
    """

    name: str
    logged: bool = True
    changelog_topic: str | None = None


@dataclass(frozen=True, slots=True)
class TopicPartition:
    """An input partition of a task and the racks holding a replica of it (KIP-925)."""

    topic: str
    partition: int
    racks: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """What the assignor knows of a task.

    ``changelog_offsets`` is the lag of a client with no state for the task; ``None`` on a
    stateful task means unbounded (KIP-441, Computing the most-caught-up instances: "we can also
    use max long as a proxy"). A task whose stores are all unlogged has ``changelog_offsets=0``:
    every client is an equal candidate (KIP-441 revision, State with logging disabled).
    """

    id: TaskId
    stateful: bool
    changelog_offsets: int | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def cross_rack_partitions(self, rack: str | None) -> int:
        """Input partitions a client in ``rack`` would read from another rack (KIP-925 getCost);
        partitions whose racks are unknown, and clients without a rack, count none."""
        if rack is None:
            return 0
        return sum(1 for tp in self.partitions if tp.racks and rack not in tp.racks)


@dataclass(frozen=True, slots=True)
class ClientState:
    """One member's report: capacity, location, what it ran before and how far behind it is.

    ``lags`` maps a task to its ``Lag`` (a plain integer given here means that many offsets);
    a stateful task missing from it means the client has no state for it.
    """

    id: str
    threads: int = 1
    rack: str | None = None
    tags: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    prev_active: frozenset[TaskId] = frozenset()
    prev_standby: frozenset[TaskId] = frozenset()
    lags: Mapping[TaskId, Lag] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_report(cls, client_id: str, lags: Mapping[TaskId, Lag], *, threads: int = 1, rack: str | None = None,
                    tags: Mapping[str, str] = MappingProxyType({})) -> ClientState:
        """A member as its lag report shows it. KIP-441 "Rebalance Metadata": task lags subsume
        PrevTasks and StandbyTasks: a running task was its active, any other state a standby."""
        return cls(
            id=client_id, threads=threads, rack=rack, tags=tags,
            prev_active=frozenset(task for task, lag in lags.items() if lag.running),
            prev_standby=frozenset(task for task, lag in lags.items() if not lag.running),
            lags=MappingProxyType(dict(lags)),
        )

    def __post_init__(self) -> None:
        lags = self.lags
        if any(type(lag) is not Lag for lag in lags.values()):
            object.__setattr__(self, "lags", MappingProxyType({t: Lag.coerce(lag) for t, lag in lags.items()}))


class AssignorKind(enum.StrEnum):
    HIGH_AVAILABILITY = "high_availability"
    STICKY = "sticky"


class RackAwareStrategy(enum.StrEnum):
    """KIP-925 section 5, ``rack.aware.assignment.strategy``."""

    NONE = "none"
    MIN_TRAFFIC = "min_traffic"  # KIP-925 4.B.I
    BALANCE_SUBTOPOLOGY = "balance_subtopology"  # KIP-925 4.B.II


@dataclass(frozen=True, slots=True)
class AssignmentConfig:
    """The assignor's parameters, with the defaults and bounds of KIP-441 "Parameters"."""

    assignor: AssignorKind = AssignorKind.HIGH_AVAILABILITY
    acceptable_recovery_lag: int = 10_000
    max_warmup_replicas: int = 2
    num_standby_replicas: int = 0
    probing_rebalance_interval_ms: int = 600_000
    balance_factor: int = 1
    rack_aware_strategy: RackAwareStrategy = RackAwareStrategy.NONE
    rack_aware_traffic_cost: int | None = None
    rack_aware_non_overlap_cost: int | None = None
    rack_aware_assignment_tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _require_int("acceptable_recovery_lag", self.acceptable_recovery_lag, minimum=0,
                     maximum=MAX_ACCEPTABLE_RECOVERY_LAG)
        _require_int("max_warmup_replicas", self.max_warmup_replicas, minimum=1, maximum=MAX_INT)
        _require_int("num_standby_replicas", self.num_standby_replicas, minimum=0, maximum=MAX_INT)
        _require_int("probing_rebalance_interval_ms", self.probing_rebalance_interval_ms, minimum=60_000,
                     maximum=MAX_LONG)
        _require_int("balance_factor", self.balance_factor, minimum=1, maximum=MAX_INT)
        for name in ("rack_aware_traffic_cost", "rack_aware_non_overlap_cost"):
            value = getattr(self, name)
            if value is not None:
                _require_int(name, value, minimum=0, maximum=MAX_INT)
        try:
            object.__setattr__(self, "assignor", AssignorKind(self.assignor))
        except ValueError:
            raise InvalidInput(
                "config.assignor", f"unknown assignor {self.assignor!r}; expected one of "
                + ", ".join(k.value for k in AssignorKind)
            ) from None
        try:
            object.__setattr__(self, "rack_aware_strategy", RackAwareStrategy(self.rack_aware_strategy))
        except ValueError:
            raise InvalidInput(
                "config.rack_aware_strategy", f"unknown strategy {self.rack_aware_strategy!r}; expected one of "
                + ", ".join(s.value for s in RackAwareStrategy)
            ) from None
        tags = self.rack_aware_assignment_tags
        if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
            raise InvalidInput("config.rack_aware_assignment_tags", "expected a list of tag keys")
        object.__setattr__(self, "rack_aware_assignment_tags", tuple(tags))


def _require_int(name: str, value: object, *, minimum: int, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"config.{name}", f"expected an integer, got {value!r}")
    if value < minimum:
        raise InvalidInput(f"config.{name}", f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise InvalidInput(f"config.{name}", f"must be <= {maximum}, got {value}")


@dataclass(frozen=True, slots=True)
class AssignmentProblem:
    """One assignment problem: the group's tasks, its members and the config (scenario.md)."""

    tasks: tuple[TaskSpec, ...]
    clients: tuple[ClientState, ...]
    config: AssignmentConfig = AssignmentConfig()


class Role(enum.StrEnum):
    ACTIVE = "active"
    STANDBY = "standby"
    WARMUP = "warmup"


class ReasonCode(enum.StrEnum):
    """Why a replica sits where it is although it did not sit there before, or why it waits.

    Machine-readable so that DescribeGroup and the pipeline can aggregate them.
    """

    NO_PREVIOUS_OWNER = "no_previous_owner"  # new task, or its previous client left the group
    BALANCE = "balance"  # moved to even out load (instance or subtopology balance)
    STANDBY_PROMOTED = "standby_promoted"  # a caught-up standby took over the active
    MOST_CAUGHT_UP = "most_caught_up"  # placed on the most caught-up client (KIP-441 property 1)
    WARMING_UP = "warming_up"  # a warm-up replica for a planned move
    STANDBY_AS_WARMUP = "standby_as_warmup"  # a standby already restoring doubles as the warm-up
    AWAITING_CATCH_UP = "awaiting_catch_up"  # kept away from its target: the target is not caught up
    WARMUP_BUDGET_EXHAUSTED = "warmup_budget_exhausted"  # move postponed: max_warmup_replicas reached
    REPLICA_ADDED = "replica_added"  # a standby replica placed where there was none
    RACK_AWARE = "rack_aware"  # moved by KIP-925 rack-aware optimisation


class Reason(NamedTuple):
    """One decision of the assignor about one replica of one task.

    A named tuple, like ``TaskId``, because an assignment makes one per moved or new replica
    (36,000 for a fresh group of 20,000 tasks): a frozen dataclass costs four times as much to
    build, a tenth of such a call.
    """

    task: TaskId
    client: str | None
    role: Role
    code: ReasonCode
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ClientAssignment:
    """What one client runs; each tuple sorted by task order."""

    active: tuple[TaskId, ...] = ()
    standby: tuple[TaskId, ...] = ()
    warmup: tuple[TaskId, ...] = ()

    def all_tasks(self) -> frozenset[TaskId]:
        return frozenset(self.active) | frozenset(self.standby) | frozenset(self.warmup)


@dataclass(frozen=True, slots=True)
class RackAwareReport:
    """What KIP-925 rack awareness did: the strategy that ran, or why it stood down (section 6)."""

    strategy: RackAwareStrategy = RackAwareStrategy.NONE
    enabled: bool = False
    disabled_reason: str = ""
    cross_rack_before: int = 0
    cross_rack_after: int = 0


@dataclass(frozen=True, slots=True)
class AssignmentResult:
    clients: Mapping[str, ClientAssignment]
    probing_rebalance_needed: bool
    followup_rebalance_ms: int | None
    reasons: tuple[Reason, ...] = ()
    rack_awareness: RackAwareReport = RackAwareReport()

    def active_owner(self) -> dict[TaskId, str]:
        return {task: cid for cid, ca in self.clients.items() for task in ca.active}

