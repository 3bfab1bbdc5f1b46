"""The scenario JSON contract (shared/spec/scenario.md, v1): parse problems, render results.

This is the assignor's public edge: ``python -m assignor``, the tests, the benchmarks, the
server's rebalance log and the pipeline all read and write this format, through these two
functions only. Every error names the offending field (``InvalidInput.field``).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping
from operator import attrgetter
from types import MappingProxyType
from typing import Any

from assignor.lag import MAX_LONG, RUNNING, Lag
from assignor.model import (
    MAX_INT,
    AssignmentConfig,
    AssignmentProblem,
    AssignmentResult,
    ClientAssignment,
    ClientState,
    InvalidInput,
    RackAwareReport,
    RackAwareStrategy,
    Reason,
    ReasonCode,
    Role,
    TaskId,
    TaskSpec,
    TopicPartition,
)

SCENARIO_VERSION = 1

_CONFIG_KEYS = frozenset(AssignmentConfig.__dataclass_fields__)


def parse_problem(document: Any) -> AssignmentProblem:
    """Validate a decoded scenario document and build the domain problem."""
    if not isinstance(document, Mapping):
        raise InvalidInput("(document)", "expected a JSON object")
    version = document.get("version")
    if type(version) is not int or version != SCENARIO_VERSION:  # not 1.0 nor true either
        raise InvalidInput("version", f"unsupported version {version!r}; expected {SCENARIO_VERSION}")
    config = _parse_config(document.get("config", {}))
    tasks, by_text = _parse_tasks(document.get("tasks"))
    clients = _parse_clients(document.get("clients"), _TaskIndex({spec.id: spec for spec in tasks}, by_text))
    if tasks and not clients:
        raise InvalidInput("clients", f"must not be empty: {len(tasks)} tasks need at least one client to run on")
    return AssignmentProblem(tasks=tasks, clients=clients, config=config)


class _DuplicateKey(Exception):
    """A JSON object that names one key twice (``_unique_keys``); not a ValueError, which
    ``_read_json`` takes for a number too long."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused when it names a key twice: ``json`` keeps the last one silently,
    so listing a client's two lags for one task in the other order changed the assignment."""
    document = dict(pairs)
    if len(document) != len(pairs):
        raise _DuplicateKey
    return document


class _Pairs(list):
    """A JSON object as its (key, value) pairs, in order: read only to name a duplicate key."""


def _duplicate_key(node: Any, path: str = "") -> str | None:
    """The path of the first key some object of ``node`` (read with ``_Pairs``) names twice."""
    if isinstance(node, _Pairs):
        seen = set()
        for key, value in node:
            here = f"{path}.{key}" if path else key
            if key in seen:
                return here
            seen.add(key)
            found = _duplicate_key(value, here)
            if found is not None:
                return found
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found = _duplicate_key(value, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def parse_problem_text(text: str) -> AssignmentProblem:
    return parse_problem(read_document(text))


def read_document(text: str) -> Any:
    """A scenario document's JSON, refused when not JSON or when an object names a key twice."""
    try:
        return _read_json(text, _unique_keys)
    except _DuplicateKey:
        # read again to name it: a document that is no JSON further on is refused as such
        field = _duplicate_key(_read_json(text, _Pairs)) or "(document)"
        raise InvalidInput(field, "a key given twice in one object (which one counts would be a guess)") from None


_DOCUMENT_FIELDS = frozenset({"version", "config", "tasks", "clients"})
_TASK_FIELDS = frozenset({"id", "stateful", "changelog_offsets", "partitions"})
_PARTITION_FIELDS = frozenset({"topic", "partition", "racks"})
_CLIENT_FIELDS = frozenset({"id", "threads", "rack", "tags", "prev_active", "prev_standby", "lags"})


def unknown_fields(document: Mapping[str, Any]) -> list[str]:
    """The fields of a valid scenario document (``parse_problem`` accepted it) that format v1
    does not define, each name once, at its first place, in document order. scenario.md:
    "Fields may be added", so they are no error; but a misspelt one (``"thread": 3``) is
    ignored and its default changes the assignment without a word, so a caller can be told."""
    tasks, clients = document["tasks"], document["clients"]
    found = [field for field in document if field not in _DOCUMENT_FIELDS]
    found += _first_places(((f"tasks[{index}]", task) for index, task in enumerate(tasks)),
                           set().union(*tasks) - _TASK_FIELDS)
    found += _first_places(((f"tasks[{index}].partitions[{position}]", partition)
                            for index, task in enumerate(tasks) if task.get("partitions")
                            for position, partition in enumerate(task["partitions"])),
                           set().union(*(partition for task in tasks for partition in task.get("partitions") or ()))
                           - _PARTITION_FIELDS)
    found += _first_places(((f"clients[{index}]", client) for index, client in enumerate(clients)),
                           set().union(*clients) - _CLIENT_FIELDS)
    return found


def _first_places(items: Iterator[tuple[str, Mapping[str, Any]]], names: set[str]) -> list[str]:
    """Where each of ``names`` first appears among ``items`` (path, object), in order: read only
    when some name is unknown, which the union of the objects' keys (C-level) tells at once."""
    found = []
    for where, item in items:
        if not names:
            break
        fresh = names & item.keys()
        names -= fresh
        found.extend(f"{where}.{field}" for field in sorted(fresh))
    return found


def _read_json(text: str, object_pairs_hook: Any) -> Any:
    try:
        return json.loads(text, object_pairs_hook=object_pairs_hook)
    except json.JSONDecodeError as error:
        raise InvalidInput("(document)", f"not valid JSON: {error.msg} at line {error.lineno}") from None
    except ValueError:  # an integer of more digits than Python converts (4,300)
        raise InvalidInput("(document)", "not valid JSON: a number too long to read") from None
    except RecursionError:
        raise InvalidInput("(document)", "not valid JSON: nested too deeply") from None


_NULL_COSTS = frozenset({"rack_aware_traffic_cost", "rack_aware_non_overlap_cost"})


def _parse_config(raw: Any) -> AssignmentConfig:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise InvalidInput("config", "expected an object")
    unknown = sorted(set(raw) - _CONFIG_KEYS)
    if unknown:
        raise InvalidInput(f"config.{unknown[0]}", "unknown configuration key")
    # null is the default, as leaving the key out; a null cost is the strategy's own default
    values = {key: value for key, value in raw.items() if value is not None or key in _NULL_COSTS}
    if "rack_aware_assignment_tags" in values:
        tags = values["rack_aware_assignment_tags"]
        if not isinstance(tags, list):
            raise InvalidInput("config.rack_aware_assignment_tags", "expected a list of tag keys")
        else:
            values["rack_aware_assignment_tags"] = tuple(tags)
    return AssignmentConfig(**values)


def _parse_tasks(raw: Any) -> tuple[tuple[TaskSpec, ...], dict[str, TaskId]]:
    """The tasks in task order, and each id by its canonical text as the document spelt it
    (``_TaskIndex``: the texts clients name tasks by, read without writing 20,000 ids again)."""
    if not isinstance(raw, list):
        raise InvalidInput("tasks", "expected a list")
    seen: set[TaskId] = set()
    specs = []
    by_text: dict[str, TaskId] = {}
    canonical = _CANONICAL_TASK_ID.fullmatch
    for index, item in enumerate(raw):  # field names are formatted only for an error (hot loop)
        if type(item) is not dict and not isinstance(item, Mapping):
            raise InvalidInput(f"tasks[{index}]", "expected an object")
        text = item.get("id")
        match = canonical(text) if type(text) is str else None
        if match is not None:
            task_id = by_text[text] = TaskId(int(match[1]), int(match[2]))
        else:
            task_id = TaskId.parse(text, f"tasks[{index}].id")
        if task_id in seen:
            raise InvalidInput(f"tasks[{index}].id", f"duplicate task id {task_id}")
        seen.add(task_id)
        stateful = item.get("stateful")
        if stateful is not True and stateful is not False:
            raise InvalidInput(f"tasks[{index}].stateful", "expected true or false" if "stateful" in item else "is required")
        changelog = item.get("changelog_offsets")
        if changelog is not None and (type(changelog) is not int or not 0 <= changelog <= MAX_LONG):
            raise InvalidInput(f"tasks[{index}].changelog_offsets",
                               f"expected an integer from 0 to {MAX_LONG}, got {changelog!r}")
        partitions = item.get("partitions")
        specs.append(TaskSpec(task_id, stateful, changelog,
                              _parse_partitions(partitions, "tasks", index) if partitions is not None else ()))
    specs.sort(key=attrgetter("id"))
    if len(by_text) < len(specs):  # some ids spelt otherwise (``00_1``): index them canonically
        by_text.update((str(spec.id), spec.id) for spec in specs)
    return tuple(specs), by_text


# A task id as ``TaskId.__str__`` writes it, numbers of at most nine digits (below MAX_INT):
# the ids of a document a program wrote, read without ``TaskId.parse``'s general path (which
# reads the other spellings, such as ``00_1``, and words the errors).
_CANONICAL_TASK_ID = re.compile(r"(0|[1-9][0-9]{0,8})_(0|[1-9][0-9]{0,8})")


def _parse_partitions(raw: Any, owner: str, index: int) -> tuple[TopicPartition, ...]:
    """``raw``, the partitions of ``owner[index]``, whose field name is formatted only for an error."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidInput(f"{owner}[{index}].partitions", "expected a list")
    partitions = []
    for position, item in enumerate(raw):
        if type(item) is not dict and not isinstance(item, Mapping):
            raise InvalidInput(f"{owner}[{index}].partitions[{position}]", "expected an object")
        topic = item.get("topic")
        if not isinstance(topic, str) or not topic:
            raise InvalidInput(f"{owner}[{index}].partitions[{position}].topic", "expected a topic name")
        number = item.get("partition")
        if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= MAX_INT:
            raise InvalidInput(f"{owner}[{index}].partitions[{position}].partition",
                               f"expected an integer from 0 to {MAX_INT}, got {number!r}")
        racks = item.get("racks")
        try:
            replicas = _RACK_SETS.get(tuple(racks)) if type(racks) is list else None
        except TypeError:  # a list inside: unhashable, and no rack name
            replicas = None
        if replicas is None:
            replicas = _rack_set(racks, f"{owner}[{index}].partitions[{position}].racks")
        partitions.append(TopicPartition(topic, number, replicas))
    return tuple(partitions)


# Rack lists seen so far and their sets: a group's partitions repeat a few rack combinations,
# so each is validated and built once (a bounded cache: at most _RACK_SETS_LIMIT entries).
_RACK_SETS: dict[tuple, frozenset[str]] = {}
_RACK_SETS_LIMIT = 4096


def _rack_set(racks: Any, where: str) -> frozenset[str]:
    if racks is None:
        racks = []
    if not isinstance(racks, list) or not all(isinstance(r, str) for r in racks):
        raise InvalidInput(where, "expected a list of rack names")
    replicas = frozenset(racks)
    if len(_RACK_SETS) < _RACK_SETS_LIMIT:
        _RACK_SETS[tuple(racks)] = replicas
    return replicas


def _parse_task_list(raw: Any, where: str, tasks: _TaskIndex) -> frozenset[TaskId]:
    if raw is None:
        return frozenset()
    if not isinstance(raw, list):
        raise InvalidInput(where, "expected a list of task ids")
    by_text = tasks.by_text
    result = set()
    for index, text in enumerate(raw):
        task_id = by_text.get(text) if type(text) is str else None
        if task_id is None:
            task_id = tasks.lookup(text, f"{where}[{index}]")
        if task_id in result:  # scenario.md: duplicate ids are invalid
            raise InvalidInput(f"{where}[{index}]", f"duplicate task {task_id}")
        result.add(task_id)
    return frozenset(result)


class _TaskIndex:
    """The group's tasks by id and by the canonical text of their id (``0_1``): clients name
    tasks tens of thousands of times, and a dictionary hit costs far less than parsing."""

    def __init__(self, tasks: Mapping[TaskId, TaskSpec], by_text: Mapping[str, TaskId]) -> None:
        self.tasks = tasks
        self.by_text = by_text  # ``_parse_tasks``

    def lookup(self, text: Any, where: str) -> TaskId:
        """Any other spelling (``00_1``) parsed, or the error naming the field."""
        task_id = TaskId.parse(text, where)
        if task_id not in self.tasks:
            raise InvalidInput(where, f"unknown task {task_id}")
        return task_id


def _parse_clients(raw: Any, task_index: _TaskIndex) -> tuple[ClientState, ...]:
    """The clients, each task reported ``"latest"`` counted as that client's previous active
    (``_running_owners``)."""
    if not isinstance(raw, list):
        raise InvalidInput("clients", "expected a list")
    seen: set[str] = set()
    active_owner: dict[TaskId, str] = {}
    fields = []
    for index, item in enumerate(raw):
        where = f"clients[{index}]"
        if not isinstance(item, Mapping):
            raise InvalidInput(where, "expected an object")
        client_id = item.get("id")
        if not isinstance(client_id, str) or not client_id:
            raise InvalidInput(f"{where}.id", "expected a non-empty string")
        if client_id in seen:
            raise InvalidInput(f"{where}.id", f"duplicate client id {client_id!r}")
        seen.add(client_id)
        threads = item.get("threads", 1)
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_INT:
            raise InvalidInput(f"{where}.threads", f"expected an integer from 1 to {MAX_INT}, got {threads!r}")
        rack = item.get("rack")
        if rack is not None and not isinstance(rack, str):
            raise InvalidInput(f"{where}.rack", "expected a string")
        tags = item.get("tags")
        if tags is None:
            tags = {}
        if not isinstance(tags, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in tags.items()
        ):
            raise InvalidInput(f"{where}.tags", "expected an object of string values")
        prev_active = _parse_task_list(item.get("prev_active"), f"{where}.prev_active", task_index)
        prev_standby = _parse_task_list(item.get("prev_standby"), f"{where}.prev_standby", task_index)
        for task_id in sorted(prev_active):
            if task_id in active_owner:
                raise InvalidInput(
                    f"{where}.prev_active",
                    f"task {task_id} is also prev_active on client {active_owner[task_id]!r}",
                )
            active_owner[task_id] = client_id
        lags = _parse_lags(item.get("lags"), f"{where}.lags", task_index)
        fields.append((client_id, threads, rack, tags, prev_active, prev_standby, lags))
    running, demoted = _running_owners(fields, active_owner)
    none: frozenset[TaskId] = frozenset()
    clients = [
        ClientState(
            id=client_id,
            threads=threads,
            rack=rack,
            tags=MappingProxyType(dict(tags)),
            prev_active=prev_active | running.get(client_id, none),
            prev_standby=(prev_standby | demoted.get(client_id, none)) - prev_active - running.get(client_id, none),
            lags=MappingProxyType(lags),
        )
        for client_id, threads, rack, tags, prev_active, prev_standby, lags in fields
    ]
    return tuple(sorted(clients, key=lambda client: client.id))


def _running_owners(fields: list, active_owner: Mapping[TaskId, str]
                    ) -> tuple[dict[str, frozenset[TaskId]], dict[str, frozenset[TaskId]]]:
    """Per client, the tasks it reports ``"latest"`` (it runs them as caught-up actives) that no
    client lists in ``prev_active``: its previous actives too, as a member's lag report makes
    them (KIP-441 "Rebalance Metadata": the lags subsume the previous tasks;
    ``ClientState.from_report``); and per client, the tasks it reports ``"latest"`` whose claim
    another keeps (a listed owner, else the first by id, as ``Group.of`` decides): its previous
    standbys, caught up, as the group protocol's path makes such a zombie's copy
    (``server.problem``)."""
    claimed: dict[TaskId, str] = {}
    demoted: dict[str, set[TaskId]] = defaultdict(set)
    for client_id, *_, lags in sorted(fields, key=lambda row: row[0]):
        # ``Lag.from_json`` reads every "latest" as the one RUNNING (``_parse_lags``)
        for task_id in [task_id for task_id, lag in lags.items() if lag is RUNNING]:
            keeper = active_owner.get(task_id) or claimed.setdefault(task_id, client_id)
            if keeper != client_id:
                demoted[client_id].add(task_id)
    running: dict[str, set[TaskId]] = defaultdict(set)
    for task_id, client_id in claimed.items():
        running[client_id].add(task_id)
    return ({client_id: frozenset(tasks) for client_id, tasks in running.items()},
            {client_id: frozenset(tasks) for client_id, tasks in demoted.items()})


def _parse_lags(raw: Any, where: str, tasks: _TaskIndex) -> dict[TaskId, Lag]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidInput(where, "expected an object of task id to lag")
    by_text = tasks.by_text
    lags = {}
    for text, value in raw.items():
        task_id = by_text.get(text)
        if task_id is None:
            task_id = tasks.lookup(text, f"{where}.{text}")
            if task_id in lags or str(task_id) in raw:  # another spelling of one id (00_1 and 0_1)
                raise InvalidInput(f"{where}.{text}", f"duplicate lag for task {task_id}")
        try:
            lags[task_id] = Lag.from_json(value)
        except ValueError as error:
            raise InvalidInput(f"{where}.{text}", str(error)) from None
    return lags


def problem_to_document(problem: AssignmentProblem) -> dict[str, Any]:
    """The inverse of ``parse_problem``: used by the rebalance log and the simulator."""
    config = problem.config
    return {
        "version": SCENARIO_VERSION,
        "config": {
            "assignor": str(config.assignor),
            "acceptable_recovery_lag": config.acceptable_recovery_lag,
            "max_warmup_replicas": config.max_warmup_replicas,
            "num_standby_replicas": config.num_standby_replicas,
            "probing_rebalance_interval_ms": config.probing_rebalance_interval_ms,
            "balance_factor": config.balance_factor,
            "rack_aware_strategy": str(config.rack_aware_strategy),
            "rack_aware_traffic_cost": config.rack_aware_traffic_cost,
            "rack_aware_non_overlap_cost": config.rack_aware_non_overlap_cost,
            "rack_aware_assignment_tags": list(config.rack_aware_assignment_tags),
        },
        "tasks": [_task_to_document(spec) for spec in problem.tasks],
        "clients": [_client_to_document(client) for client in problem.clients],
    }


def _task_to_document(spec: TaskSpec) -> dict[str, Any]:
    document: dict[str, Any] = {"id": str(spec.id), "stateful": spec.stateful}
    if spec.changelog_offsets is not None:
        document["changelog_offsets"] = spec.changelog_offsets
    if spec.partitions:
        document["partitions"] = [
            {"topic": tp.topic, "partition": tp.partition, "racks": sorted(tp.racks)} for tp in spec.partitions
        ]
    return document


def _client_to_document(client: ClientState) -> dict[str, Any]:
    document: dict[str, Any] = {
        "id": client.id,
        "threads": client.threads,
        "prev_active": [str(t) for t in sorted(client.prev_active)],
        "prev_standby": [str(t) for t in sorted(client.prev_standby)],
        "lags": {str(t): lag.to_json() for t, lag in sorted(client.lags.items())},
    }
    if client.rack is not None:
        document["rack"] = client.rack
    if client.tags:
        document["tags"] = dict(sorted(client.tags.items()))
    return document


def result_to_document(result: AssignmentResult, *, explain: bool = False) -> dict[str, Any]:
    """The output document of scenario.md; ``explain`` adds the reasons and rack report."""
    document: dict[str, Any] = {
        "version": SCENARIO_VERSION,
        "clients": {
            client_id: {
                "active": [str(t) for t in assignment.active],
                "standby": [str(t) for t in assignment.standby],
                "warmup": [str(t) for t in assignment.warmup],
            }
            for client_id, assignment in sorted(result.clients.items())
        },
        "probing_rebalance_needed": result.probing_rebalance_needed,
        "followup_rebalance_ms": result.followup_rebalance_ms,
    }
    if explain:
        document["reasons"] = [
            {
                "task": str(reason.task),
                "client": reason.client,
                "role": str(reason.role),
                "code": str(reason.code),
                "detail": reason.detail,
            }
            for reason in result.reasons
        ]
        report = result.rack_awareness
        document["rack_awareness"] = {
            "strategy": str(report.strategy),
            "enabled": report.enabled,
            "disabled_reason": report.disabled_reason,
            "cross_rack_before": report.cross_rack_before,
            "cross_rack_after": report.cross_rack_after,
        }
    return document


def parse_result(document: Any, where: str = "output") -> AssignmentResult:
    """The inverse of ``result_to_document``, for every reader of a result document (the
    store's snapshots, the rebalance log, the simulator's logged starts). Fields the writer
    may leave out take their defaults (``reasons``, ``rack_awareness`` without ``explain``);
    a field of the wrong shape raises ``InvalidInput`` naming it under ``where``."""
    if not isinstance(document, Mapping):
        raise InvalidInput(where, "expected a result document (an object)")
    raw_clients = document.get("clients")
    if not isinstance(raw_clients, Mapping):
        raise InvalidInput(f"{where}.clients", "expected an object of client assignments")
    clients = {}
    for client_id, roles in raw_clients.items():
        here = f"{where}.clients.{client_id}"
        if not isinstance(roles, Mapping):
            raise InvalidInput(here, "expected an object")
        clients[client_id] = ClientAssignment(
            *(tuple(_parse_result_tasks(roles.get(role), f"{here}.{role}")) for role in ("active", "standby", "warmup"))
        )
    probing = document.get("probing_rebalance_needed", False)
    if not isinstance(probing, bool):
        raise InvalidInput(f"{where}.probing_rebalance_needed", f"expected true or false, got {probing!r}")
    followup = document.get("followup_rebalance_ms")
    if followup is not None and (isinstance(followup, bool) or not isinstance(followup, int)):
        raise InvalidInput(f"{where}.followup_rebalance_ms", f"expected milliseconds or null, got {followup!r}")
    return AssignmentResult(
        clients=MappingProxyType(clients),
        probing_rebalance_needed=probing,
        followup_rebalance_ms=followup,
        reasons=_parse_reasons(document.get("reasons") or (), f"{where}.reasons"),
        rack_awareness=_parse_rack_report(document.get("rack_awareness") or {}, f"{where}.rack_awareness"),
    )


def _parse_result_tasks(raw: Any, where: str) -> list[TaskId]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidInput(where, "expected a list of task ids")
    return sorted(TaskId.parse(text, f"{where}[{index}]") for index, text in enumerate(raw))


def _parse_reasons(raw: Any, where: str) -> tuple[Reason, ...]:
    if not isinstance(raw, list | tuple):
        raise InvalidInput(where, "expected a list of reasons")
    reasons = []
    for index, item in enumerate(raw):
        here = f"{where}[{index}]"
        if not isinstance(item, Mapping):
            raise InvalidInput(here, "expected an object")
        try:
            reasons.append(Reason(TaskId.parse(item.get("task"), f"{here}.task"), item.get("client"),
                                  Role(item.get("role")), ReasonCode(item.get("code")), item.get("detail", "")))
        except ValueError as error:
            if isinstance(error, InvalidInput):
                raise
            raise InvalidInput(here, str(error)) from None
    return tuple(reasons)


def _parse_rack_report(raw: Any, where: str) -> RackAwareReport:
    if not isinstance(raw, Mapping):
        raise InvalidInput(where, "expected an object")
    try:
        return RackAwareReport(
            strategy=RackAwareStrategy(raw.get("strategy", "none")),
            enabled=bool(raw.get("enabled", False)),
            disabled_reason=str(raw.get("disabled_reason", "")),
            cross_rack_before=int(raw.get("cross_rack_before", 0)),
            cross_rack_after=int(raw.get("cross_rack_after", 0)),
        )
    except (TypeError, ValueError) as error:
        raise InvalidInput(where, str(error)) from None
