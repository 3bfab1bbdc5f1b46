"""The attacks of issue 13, each against a real server on loopback with mTLS and ACLs
(docs/security.md): every one fails for the attacker, and the victim's group is untouched.

Principals: ``orders`` runs the victim group ``orders``; ``insider`` may be a member of
``orders`` too (a second deployment sharing a grant), so that the per-member ownership rules are
what stops it; ``stranger`` has no grant on ``orders`` at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path

import grpc
import pytest
from structlog.testing import capture_logs

from remote_leader.pki import DevCa
from remote_leader.tls import ClientTls
from remote_leader.v1 import errors_pb2 as epb
from remote_leader.v1 import group_leader_pb2 as pb
from remote_leader.v1 import group_leader_pb2_grpc as pb_grpc
from server.app import LeaderServer, Settings
from server.timers import FakeClock
from tests.server.harness import Worker, rebalance, settle

pytestmark = pytest.mark.asyncio

ACL = """
acls:
  - principal: spiffe://corp/orders
    operations: [member, describe]
    group: orders
  - principal: insider.corp
    operations: [member, describe]
    group: orders
  - principal: stranger
    operations: [member, describe]
    group: stranger-
    pattern: prefixed
  - principal: ops
    operations: [admin]
    group: "*"
  - principal: planner
    operations: [assign]
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    ca = DevCa(directory)
    other = DevCa(directory / "other", "another CA")
    return {
        "ca": ca,
        "server": ca.server(),
        "orders": ca.issue("orders", cn="ignored-when-a-san-exists", uris=("spiffe://corp/orders",)),
        "insider": ca.issue("insider", dns=("insider.corp",)),
        "stranger": ca.issue("stranger", cn="stranger"),
        "ops": ca.issue("ops", cn="ops"),
        "planner": ca.issue("planner", cn="planner"),
        "forged-orders": other.issue("forged", uris=("spiffe://corp/orders",)),
    }


@contextlib.asynccontextmanager
async def secure_server(tmp_path: Path, pki, **settings):
    acl = tmp_path / "acl.yaml"
    acl.write_text(ACL)
    values = {"listen": "127.0.0.1:0", "state_dir": tmp_path / "state", "metrics_port": 0, "min_session_timeout_ms": 1_000,
              "drain_timeout_s": 1.0, "log_level": "warning", "tls_cert": pki["server"].cert, "tls_key": pki["server"].key,
              "tls_client_ca": pki["ca"].cert, "acl_file": acl}
    values.update(settings)
    clock = FakeClock()
    server = LeaderServer(Settings(**values), clock=clock)
    await server.start()
    channels: list[grpc.aio.Channel] = []

    def stub_for(name: str) -> pb_grpc.GroupLeaderStub:
        issued = pki[name]
        tls = ClientTls(ca=pki["ca"].cert, cert=issued.cert, key=issued.key, server_name="localhost")
        channel = tls.aio_channel(f"127.0.0.1:{server.port}")
        channels.append(channel)
        return pb_grpc.GroupLeaderStub(channel)

    try:
        yield server, clock, stub_for
    finally:
        for channel in channels:
            await channel.close()
        await server.stop(grace_s=0.5)


async def _denied(call, request, code=grpc.StatusCode.PERMISSION_DENIED) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(request)
    assert caught.value.code() == code, caught.value
    return caught.value.details()


@contextlib.asynccontextmanager
async def victim_group(tmp_path, pki):
    """A Stable group ``orders`` of two members run by principal ``orders`` (one static)."""
    async with secure_server(tmp_path, pki) as (server, clock, stub_for):
        orders = stub_for("orders")
        a = Worker(orders, group_id="orders")
        b = Worker(orders, group_id="orders", instance_id="orders-b")
        await rebalance(clock, [a, b], advance_ms=3_000)
        yield server, clock, stub_for, (a, b)


async def _untouched(a: Worker, b: Worker, generation: int) -> None:
    for w in (a, b):
        answer = await w.heartbeat()
        assert answer.error_code == epb.ERROR_CODE_NONE, answer
    described = await a.stub.DescribeGroup(pb.DescribeGroupRequest(group_id="orders"))
    assert described.group.generation_id == generation
    assert sorted(m.member_id for m in described.group.members) == sorted([a.member_id, b.member_id])


def _refusals(server, reason: str) -> float:
    registry = server.metrics.registry
    return sum(
        s.value for metric in registry.collect() for s in metric.samples
        if s.name == "remote_leader_requests_refused_total" and s.labels.get("reason") == reason
    )


async def test_a_stranger_cannot_list_or_describe_the_group(tmp_path, pki):
    async with victim_group(tmp_path, pki) as (server, _clock, stub_for, (a, b)):
        stranger = stub_for("stranger")
        assert [g.group_id for g in (await stranger.ListGroups(pb.ListGroupsRequest())).groups] == []
        details = await _denied(stranger.DescribeGroup, pb.DescribeGroupRequest(group_id="orders"))
        assert details == "principal 'stranger' may not describe on group 'orders'"
        assert [g.group_id for g in (await stub_for("ops").ListGroups(pb.ListGroupsRequest())).groups] == ["orders"]
        assert _refusals(server, "acl") == 1
        await _untouched(a, b, a.generation)


async def test_leave_with_a_victims_member_id_is_refused(tmp_path, pki):
    async with victim_group(tmp_path, pki) as (server, _clock, stub_for, (a, b)):
        request = pb.LeaveGroupRequest(group_id="orders", member_id=a.member_id)
        await _denied(stub_for("stranger").LeaveGroup, request)
        details = await _denied(stub_for("insider").LeaveGroup, request)
        assert details == f"member id {a.member_id!r} belongs to another principal"
        await _untouched(a, b, a.generation)
        sync = pb.SyncGroupRequest(group_id="orders", member_id=a.member_id, generation_id=a.generation)
        beat = pb.HeartbeatRequest(group_id="orders", member_id=a.member_id, generation_id=a.generation)
        with capture_logs() as logs:
            await _denied(stub_for("insider").SyncGroup, sync)
            await _denied(stub_for("insider").Heartbeat, beat)
        assert _refusals(server, "member_id_owner") == 3
        # an audit's find: these refusals were logged without their group
        refused = [entry for entry in logs if entry["event"] == "auth.refused"]
        assert [(e["method"], e["group_id"], e["reason"]) for e in refused] == [
            ("SyncGroup", "orders", "member_id_owner"), ("Heartbeat", "orders", "member_id_owner")]


async def test_joining_with_a_victims_process_id_is_refused(tmp_path, pki):
    async with victim_group(tmp_path, pki) as (_server, _clock, stub_for, (a, b)):
        thief = Worker(stub_for("insider"), group_id="orders", process_id=a.process_id)
        details = await _denied(thief.stub.JoinGroup, thief.join_request())
        assert details == f"process id {a.process_id} belongs to another principal"
        await _untouched(a, b, a.generation)


async def test_joining_with_a_victims_static_instance_id_is_refused(tmp_path, pki):
    async with victim_group(tmp_path, pki) as (_server, _clock, stub_for, (a, b)):
        thief = Worker(stub_for("insider"), group_id="orders", instance_id="orders-b")
        details = await _denied(thief.stub.JoinGroup, thief.join_request())
        assert details == "group_instance_id 'orders-b' belongs to another principal"
        await _untouched(a, b, a.generation)


async def test_a_newcomer_cannot_shut_the_application_down(tmp_path, pki):
    async with victim_group(tmp_path, pki) as (_server, _clock, stub_for, (a, b)):
        for name in ("insider", "orders"):  # not even the group's own principal, without a member id
            request = Worker(stub_for(name), group_id="orders").join_request()
            request.subscription.error_code = epb.ASSIGNOR_ERROR_SHUTDOWN_REQUESTED
            details = await _denied(stub_for(name).JoinGroup, request)
            assert "honoured only from a member of the current generation" in details
        await _untouched(a, b, a.generation)


async def test_route_query_into_a_foreign_group_is_refused(tmp_path, pki):
    async with victim_group(tmp_path, pki) as (_server, _clock, stub_for, (a, b)):
        await _denied(stub_for("stranger").RouteQuery, pb.RouteQueryRequest(group_id="orders", store="counts", partition=0))
        answer = await a.stub.RouteQuery(pb.RouteQueryRequest(group_id="orders", store="counts", partition=0))
        assert answer.error_code == epb.ERROR_CODE_NONE


async def test_a_stranger_cannot_join_the_group(tmp_path, pki):
    async with victim_group(tmp_path, pki) as (_server, _clock, stub_for, (a, b)):
        stranger = Worker(stub_for("stranger"), group_id="orders")
        await _denied(stranger.stub.JoinGroup, stranger.join_request())
        await _untouched(a, b, a.generation)
        own = Worker(stub_for("stranger"), group_id="stranger-app")
        assert (await stub_for("stranger").ListGroups(pb.ListGroupsRequest())).groups == []
        joining = own.stub.JoinGroup(own.join_request())
        await settle()
        assert [g.group_id for g in (await stub_for("stranger").ListGroups(pb.ListGroupsRequest())).groups] == ["stranger-app"]
        joining.cancel()


async def test_an_admin_may_evict_a_member(tmp_path, pki):
    async with victim_group(tmp_path, pki) as (_server, _clock, stub_for, (a, b)):
        answer = await stub_for("ops").LeaveGroup(pb.LeaveGroupRequest(group_id="orders", member_id=a.member_id))
        assert answer.error_code == epb.ERROR_CODE_NONE
        assert (await b.heartbeat()).error_code == epb.ERROR_CODE_REBALANCE_IN_PROGRESS


async def test_assign_needs_its_own_grant(tmp_path, pki):
    problem = pb.AssignRequest()
    problem.problem.tasks.add().id.partition = 0
    problem.problem.clients.add(id="c1", threads=1)
    async with secure_server(tmp_path, pki) as (_server, _clock, stub_for):
        details = await _denied(stub_for("orders").Assign, problem)
        assert details == "principal 'spiffe://corp/orders' may not assign"
        answer = await stub_for("planner").Assign(problem)
        assert [c.client_id for c in answer.result.clients] == ["c1"]


async def test_a_certificate_from_another_ca_or_none_cannot_connect(tmp_path, pki):
    async with secure_server(tmp_path, pki) as (server, _clock, _stub_for):
        for tls in (
            ClientTls(ca=pki["ca"].cert, server_name="localhost"),
            ClientTls(ca=pki["ca"].cert, cert=pki["forged-orders"].cert, key=pki["forged-orders"].key, server_name="localhost"),
        ):
            async with tls.aio_channel(f"127.0.0.1:{server.port}") as channel:
                stub = pb_grpc.GroupLeaderStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.ListGroups(pb.ListGroupsRequest(), timeout=5)
                assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_ownership_survives_a_restart(tmp_path, pki):
    async with secure_server(tmp_path, pki) as (_server, clock, stub_for):
        a = Worker(stub_for("orders"), group_id="orders")
        await rebalance(clock, [a], advance_ms=3_000)
    async with secure_server(tmp_path, pki) as (_server, _clock, stub_for):
        await _denied(stub_for("insider").LeaveGroup, pb.LeaveGroupRequest(group_id="orders", member_id=a.member_id))


# ---- bearer tokens --------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def token_server(tmp_path: Path, **settings):
    acl = tmp_path / "acl.yaml"
    acl.write_text(ACL)
    values = {"listen": "127.0.0.1:0", "state_dir": tmp_path / "state", "metrics_port": 0, "min_session_timeout_ms": 1_000,
              "drain_timeout_s": 1.0, "log_level": "warning", "acl_file": acl}
    values.update(settings)
    server = LeaderServer(Settings(**values), clock=FakeClock())
    await server.start()
    try:
        yield server
    finally:
        await server.stop(grace_s=0.5)


def _stub_with(server, token: str | None, tmp_path: Path) -> tuple[grpc.aio.Channel, pb_grpc.GroupLeaderStub]:
    token_file = None
    if token is not None:
        token_file = tmp_path / f"client-token-{uuid.uuid4()}"
        token_file.write_text(token + "\n")
    channel = ClientTls(token_file=token_file).aio_channel(f"127.0.0.1:{server.port}")
    return channel, pb_grpc.GroupLeaderStub(channel)


async def test_bearer_tokens_from_a_file_that_is_reloaded(tmp_path, monkeypatch):
    import server.auth

    monkeypatch.setattr(server.auth, "RELOAD_CHECK_S", 0.0)
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens:\n  0123456789abcdef-orders: spiffe://corp/orders\n")
    async with token_server(tmp_path, auth_token_file=tokens) as leader:
        for token, code in ((None, grpc.StatusCode.UNAUTHENTICATED), ("not-a-known-token-at-all", grpc.StatusCode.UNAUTHENTICATED)):
            channel, stub = _stub_with(leader, token, tmp_path)
            async with channel:
                await _denied(stub.DescribeGroup, pb.DescribeGroupRequest(group_id="orders"), code)
        channel, stub = _stub_with(leader, "0123456789abcdef-orders", tmp_path)
        async with channel:
            answer = await stub.DescribeGroup(pb.DescribeGroupRequest(group_id="orders"))
            assert answer.error_code == epb.ERROR_CODE_GROUP_ID_NOT_FOUND  # authorized; no such group yet
            tokens.write_text("tokens:\n  fedcba9876543210-orders: spiffe://corp/orders\n")
            await _denied(stub.DescribeGroup, pb.DescribeGroupRequest(group_id="orders"), grpc.StatusCode.UNAUTHENTICATED)
        assert _refusals(leader, "invalid_token") == 2
        assert _refusals(leader, "no_credentials") == 1


async def test_two_authorization_entries_are_refused_whichever_comes_first(tmp_path):
    """An outsider audit's find: with two authorization entries the last one counted, so a proxy
    that checked the first could be passed by a second. Neither counts now: the call is
    refused, as is a live page request with two Authorization headers."""
    import socket

    import aiohttp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        metrics_port = sock.getsockname()[1]
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens:\n  0123456789abcdef-orders: spiffe://corp/orders\n")
    async with token_server(tmp_path, auth_token_file=tokens, metrics_port=metrics_port) as leader:
        good = ("authorization", "Bearer 0123456789abcdef-orders")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{leader.port}") as channel:
            stub = pb_grpc.GroupLeaderStub(channel)
            answer = await stub.DescribeGroup(pb.DescribeGroupRequest(group_id="orders"), metadata=(good,))
            assert answer.error_code == epb.ERROR_CODE_GROUP_ID_NOT_FOUND  # one entry: authorized
            for entries in ((good, good), (good, ("authorization", "Bearer not-a-known-token-at-all"))):
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.DescribeGroup(pb.DescribeGroupRequest(group_id="orders"), metadata=entries)
                assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert "more than one authorization metadata entry" in caught.value.details()
        assert _refusals(leader, "bad_authorization") == 2
        url = f"http://127.0.0.1:{leader.metrics_port}/"
        async with aiohttp.ClientSession() as session:
            async with session.get(url, headers=[("Authorization", "Bearer 0123456789abcdef-orders")]) as one:
                assert one.status == 200
            async with session.get(url, headers=[("Authorization", "Bearer 0123456789abcdef-orders")] * 2) as two:
                assert two.status == 401 and "more than one Authorization header" in await two.text()


async def test_a_jwt_signed_with_the_configured_key(tmp_path):
    jwt = pytest.importorskip("jwt")
    import time

    secret = "a-shared-secret-of-at-least-32-bytes!"
    key = tmp_path / "jwt.key"
    key.write_text(secret)
    async with token_server(tmp_path, auth_jwt_key=key, auth_jwt_algorithms="HS256", auth_jwt_audience="remote-leader") as leader:
        good = jwt.encode({"sub": "spiffe://corp/orders", "aud": "remote-leader", "exp": int(time.time()) + 60}, secret, algorithm="HS256")
        forged = jwt.encode({"sub": "spiffe://corp/orders", "aud": "remote-leader", "exp": int(time.time()) + 60}, "x" * 40, algorithm="HS256")
        expired = jwt.encode({"sub": "spiffe://corp/orders", "aud": "remote-leader", "exp": int(time.time()) - 60}, secret, algorithm="HS256")
        channel, stub = _stub_with(leader, good, tmp_path)
        async with channel:
            answer = await stub.DescribeGroup(pb.DescribeGroupRequest(group_id="orders"))
            assert answer.error_code == epb.ERROR_CODE_GROUP_ID_NOT_FOUND
            await _denied(stub.DescribeGroup, pb.DescribeGroupRequest(group_id="other"))
        for bad in (forged, expired):
            channel, stub = _stub_with(leader, bad, tmp_path)
            async with channel:
                await _denied(stub.DescribeGroup, pb.DescribeGroupRequest(group_id="orders"), grpc.StatusCode.UNAUTHENTICATED)


async def test_metrics_over_https_on_the_chosen_host(tmp_path, pki):
    import socket
    import ssl
    import urllib.error
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with secure_server(tmp_path, pki, metrics_port=port, metrics_tls=True, metrics_host="127.0.0.1") as (server, _c, _s):
        assert server.gate is not None and server.gate.enabled
        context = ssl.create_default_context(cafile=str(pki["ca"].cert))
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(f"https://localhost:{port}/metrics", context=context,
                                                                      timeout=10).read().decode())
        # served over TLS, the series of a fresh server (a refusal it may count, at 0)
        assert 'remote_leader_requests_refused_total{code="UNAUTHENTICATED",method="JoinGroup",reason="no_credentials"} 0.0' in body
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read())


async def test_one_principal_s_abandoned_groups_do_not_fill_the_server_for_others(tmp_path, pki):
    """docs/security.md: no principal may "fill the server with abandoned groups". An audit's
    find: with --max-groups 3, ``stranger`` created three groups on its own prefix and let their
    sessions expire (Empty groups are kept for the retention: seven days); every other
    application then got RESOURCE_EXHAUSTED for any new group. The groups a principal created
    count against its own quota (--max-groups-per-principal), members or not, even after a
    restart; others still have room."""
    async with secure_server(tmp_path, pki, max_groups=4, max_groups_per_principal=2) as (server, clock, stub_for):
        stranger = stub_for("stranger")
        for name in ("stranger-1", "stranger-2"):
            member = Worker(stranger, group_id=name)
            await rebalance(clock, [member], advance_ms=3_000)
            assert (await member.leave()).error_code == epb.ERROR_CODE_NONE  # abandoned: Empty, kept
        third = Worker(stranger, group_id="stranger-3")
        details = await _denied(stranger.JoinGroup, third.join_request(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        assert details == ("groups created by 'stranger' on this server: 3 exceeds max_groups_per_principal = 2 "
                           "(limit --max-groups-per-principal)")
        assert _refusals(server, "max_groups_per_principal") == 1.0
        orders = Worker(stub_for("orders"), group_id="orders")
        await rebalance(clock, [orders], advance_ms=3_000)
        assert sorted(orders.active()) == ["0_0", "0_1", "0_2"]
    async with secure_server(tmp_path, pki, max_groups=4, max_groups_per_principal=2) as (server, clock, stub_for):
        third = Worker(stub_for("stranger"), group_id="stranger-3")
        await _denied(third.stub.JoinGroup, third.join_request(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        rejoin = Worker(stub_for("stranger"), group_id="stranger-1")  # its own existing group: no new one
        await rebalance(clock, [rejoin], advance_ms=3_000)
