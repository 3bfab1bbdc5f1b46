"""A bounded fuzz of every GroupLeader RPC over a real server on loopback (docs/security.md):
undecodable bytes, valid requests with fields mutated to extremes, and oversized repeated
fields. Whatever arrives, the server answers with a deliberate status (never UNKNOWN, never an
INTERNAL of its own making), and stays healthy: a fresh group still forms afterwards. The
default run sends a few thousand requests; ``-m slow`` sends many more."""

from __future__ import annotations

import asyncio
import random
import uuid

import grpc
import pytest
from google.protobuf import descriptor as d
from grpc_health.v1 import health_pb2, health_pb2_grpc

from remote_leader.v1 import assignment_pb2 as apb
from remote_leader.v1 import group_leader_pb2 as pb
from tests.server.harness import Worker, rebalance, running_server

pytestmark = pytest.mark.asyncio

SERVICE = "/remote_leader.v1.GroupLeader/"
#: What a hostile request may be answered with (DEADLINE_EXCEEDED: a JoinGroup parked at a barrier).
ACCEPTED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.FAILED_PRECONDITION,
}
_INTS = (0, 1, -1, 2, 7, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 10**6)
_STRINGS = ("", "app", "x" * 300, "ctl\x00\x1f", "ü-grüße", "../../etc/passwd", "member-0", "%s%n", "0_1")


def _templates() -> dict[str, list]:
    worker = Worker(stub=None, group_id="fuzz", task_lags={"0_0": 5, "0_1": -1})  # type: ignore[arg-type]
    problem = apb.AssignmentProblem()
    for p in range(3):
        problem.tasks.add(id=apb.TaskId(subtopology=0, partition=p))
    problem.clients.add(id="c1", threads=2)
    return {
        "JoinGroup": [worker.join_request(), pb.JoinGroupRequest()],
        "SyncGroup": [pb.SyncGroupRequest(group_id="fuzz", member_id="m", generation_id=1), pb.SyncGroupRequest()],
        "Heartbeat": [pb.HeartbeatRequest(group_id="fuzz", member_id="m", generation_id=1, lags=worker.subscription().lags)],
        "LeaveGroup": [pb.LeaveGroupRequest(group_id="fuzz", member_id="m")],
        "DescribeGroup": [pb.DescribeGroupRequest(group_id="fuzz")],
        "ListGroups": [pb.ListGroupsRequest()],
        "Assign": [pb.AssignRequest(problem=problem)],
        "RouteQuery": [pb.RouteQueryRequest(group_id="fuzz", store="counts", partition=0)],
        "FindCoordinator": [pb.FindCoordinatorRequest(group_id="fuzz")],
    }


def _scalar(field: d.FieldDescriptor, rng: random.Random):
    t = field.type
    if t == d.FieldDescriptor.TYPE_STRING:
        return rng.choice(_STRINGS + (str(uuid.uuid4()),))
    if t == d.FieldDescriptor.TYPE_BYTES:
        return rng.randbytes(rng.randint(0, 64))
    if t == d.FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if t == d.FieldDescriptor.TYPE_ENUM:
        return rng.choice((-1, 0, 1, 2, 3, 99))
    if t in (d.FieldDescriptor.TYPE_DOUBLE, d.FieldDescriptor.TYPE_FLOAT):
        return rng.choice((0.0, -1.0, 1e308, float("nan"), float("inf")))
    return rng.choice(_INTS)


def mutate(msg, rng: random.Random, depth: int = 0, oversize: bool = False) -> None:
    """Set some fields of ``msg`` to extremes, clear others, grow repeated ones (in place)."""
    for field in msg.DESCRIPTOR.fields:
        if rng.random() < 0.5:
            continue
        try:
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                target = getattr(msg, field.name)
                for _ in range(rng.randint(0, 3)):
                    key = _scalar(field.message_type.fields_by_name["key"], rng)
                    value_field = field.message_type.fields_by_name["value"]
                    if value_field.message_type is None:
                        target[key] = _scalar(value_field, rng)
            elif field.is_repeated:
                target = getattr(msg, field.name)
                count = rng.choice((0, 1, 3, 60_000 if oversize else 30))
                if field.message_type is not None:
                    for i in range(count):
                        element = target.add()
                        if depth < 3 and i < 5:
                            mutate(element, rng, depth + 1)
                else:
                    target.extend(_scalar(field, rng) for _ in range(count))
            elif field.message_type is not None:
                if rng.random() < 0.3:
                    msg.ClearField(field.name)
                elif depth < 4:
                    mutate(getattr(msg, field.name), rng, depth + 1, oversize)
            elif rng.random() < 0.2 and field.has_presence:
                msg.ClearField(field.name)
            else:
                setattr(msg, field.name, _scalar(field, rng))
        except (ValueError, TypeError, OverflowError):
            continue  # out of the field's range: protobuf refuses it client-side


def _payloads(rng: random.Random, count: int) -> list[tuple[str, bytes]]:
    templates = _templates()
    methods = sorted(templates)
    payloads = []
    for i in range(count):
        method = methods[i % len(methods)]
        kind = rng.random()
        if kind < 0.15:
            data = rng.randbytes(rng.randint(1, 200))  # mostly undecodable
        else:
            msg = type(templates[method][0])()
            msg.CopyFrom(rng.choice(templates[method]))
            mutate(msg, rng, oversize=kind > 0.9)
            data = msg.SerializeToString()
        payloads.append((method, data))
    return payloads


async def _fuzz(count: int, seed: int, tmp_path) -> None:
    rng = random.Random(seed)
    payloads = _payloads(rng, count)
    async with running_server(tmp_path, max_message_bytes=4 * 1024 * 1024) as s:
        calls = {m: s.channel.unary_unary(SERVICE + m) for m in {m for m, _ in payloads}}
        outcomes: dict[grpc.StatusCode, int] = {}
        internal: list[tuple[str, str]] = []

        async def send(method: str, data: bytes) -> None:
            try:
                await calls[method](data, timeout=0.5 if method == "JoinGroup" else 10)
                code = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as error:
                code = error.code()
                if code == grpc.StatusCode.INTERNAL:
                    internal.append((method, error.details()))
            outcomes[code] = outcomes.get(code, 0) + 1

        for start in range(0, len(payloads), 200):
            await asyncio.gather(*(send(m, b) for m, b in payloads[start:start + 200]))
            await s.clock.advance(1_000)  # let barriers and sessions move on
        assert not internal, internal[:5]
        unexpected = {c: n for c, n in outcomes.items() if c not in ACCEPTED}
        assert not unexpected, (unexpected, outcomes)
        assert outcomes.get(grpc.StatusCode.OK, 0) > count // 10  # not everything was refused at the door
        print("fuzz outcomes:", {c.name: n for c, n in sorted(outcomes.items(), key=lambda kv: kv[0].value[0])})
        assert sum(outcomes.values()) == count
        # healthy afterwards: the health service answers, and a fresh group forms
        health = health_pb2_grpc.HealthStub(s.channel)
        answer = await health.Check(health_pb2.HealthCheckRequest(service="remote_leader.v1.GroupLeader"), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        fresh = [s.worker(group_id="after-fuzz"), s.worker(group_id="after-fuzz")]
        await rebalance(s.clock, fresh, advance_ms=3_000)
        assert sorted(fresh[0].active() + fresh[1].active()) == ["0_0", "0_1", "0_2"]


async def test_a_few_thousand_hostile_requests(tmp_path):
    await _fuzz(3_000, seed=13, tmp_path=tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
async def test_many_more_hostile_requests(tmp_path, seed):
    await _fuzz(20_000, seed=1_000 + seed, tmp_path=tmp_path)
