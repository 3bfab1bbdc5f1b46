"""The refusal and internal-error counters as a fresh server's /metrics shows them: every
refusal the server can count is there at 0 before the first, so that a dashboard panel or an
alert reads 0 rather than "No data" and ``rate()`` sees the first refusal; a refusal moves its
own series only; group series are never made up front (callers choose group ids)."""

from __future__ import annotations

import asyncio
import dataclasses
import urllib.error
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from remote_leader.net import free_port
from remote_leader.v1 import group_leader_pb2 as pb
from server.auth import Denied, Unauthenticated
from server.edge import refusals
from server.limits import Limits
from tests.server.harness import running_server, topology

METHODS = [m.name for m in pb.DESCRIPTOR.services_by_name["GroupLeader"].methods]
REFUSED = "remote_leader_requests_refused_total"
INTERNAL = "remote_leader_rpc_internal_errors_total"
PER_GROUP = {"remote_leader_rebalances_total", "remote_leader_probes_scheduled_total", "remote_leader_probes_fired_total",
             "remote_leader_group_members", "remote_leader_group_generation", "remote_leader_warmups_in_flight"}

WITHOUT_AUTH = {
    *(("JoinGroup", "INVALID_ARGUMENT", limit) for limit in (
        "max_rebalance_timeout_ms", "max_subtopologies", "max_partitions_per_topic", "max_partitions_per_group",
        "max_tasks_per_group", "max_store_partitions_per_group", "max_replicas_per_group", "max_host_map_bytes",
        "max_client_tags")),
    ("JoinGroup", "RESOURCE_EXHAUSTED", "max_groups"),
    ("JoinGroup", "RESOURCE_EXHAUSTED", "max_members_per_group"),
    ("JoinGroup", "PERMISSION_DENIED", "shutdown_not_member"),
    ("Heartbeat", "INVALID_ARGUMENT", "max_tasks_per_group"),
    ("Assign", "INVALID_ARGUMENT", "max_tasks_per_assign"),
    ("Assign", "INVALID_ARGUMENT", "max_clients_per_assign"),
    ("Assign", "INVALID_ARGUMENT", "max_replicas_per_assign"),
    ("Assign", "INVALID_ARGUMENT", "max_client_tags"),
    ("Assign", "RESOURCE_EXHAUSTED", "max_concurrent_assigns"),
}
_AUTHENTICATION = ("invalid_jwt", "invalid_token", "no_certificate_name", "no_credentials", "bad_authorization")
_OWN_IDS = ("member_id_owner", "instance_id_owner")
WITH_AUTH = WITHOUT_AUTH | {
    *((method, "UNAUTHENTICATED", reason) for method in METHODS for reason in _AUTHENTICATION),
    *((method, "PERMISSION_DENIED", "acl") for method in (
        "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "DescribeGroup", "Assign", "RouteQuery")),
    *((method, "PERMISSION_DENIED", reason) for method in ("JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup")
      for reason in _OWN_IDS),
    ("JoinGroup", "PERMISSION_DENIED", "process_id_owner"),
    ("JoinGroup", "RESOURCE_EXHAUSTED", "max_groups_per_principal"),
    *(("LivePage", "UNAUTHENTICATED", reason) for reason in _AUTHENTICATION),
}

TOKEN = "token-of-orders-0123456789"
ACL = "acls:\n  - principal: orders\n    operations: [member, describe]\n    group: orders\n"



async def _scrape(port: int) -> dict[str, dict[tuple[str, ...], float]]:
    """Sample name -> label values (in the metric's label order) -> value, as a scraper reads it."""
    text = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode())
    samples: dict[str, dict[tuple[str, ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            order = ("method", "code", "reason") if s.name == REFUSED else tuple(sorted(s.labels))
            samples.setdefault(s.name, {})[tuple(s.labels[k] for k in order)] = s.value
    return samples


async def test_a_fresh_server_exports_every_refusal_it_can_count_at_zero_and_a_refusal_moves_its_own(tmp_path):
    async with running_server(tmp_path, metrics_port=free_port()) as s:
        before = await _scrape(s.server.metrics_port)
        assert before[REFUSED] == dict.fromkeys(WITHOUT_AUTH, 0.0)  # no authentication reasons when it is off
        assert before[INTERNAL] == {(method,): 0.0 for method in METHODS}
        assert not {name for name in before if name in PER_GROUP}

        with pytest.raises(grpc.aio.AioRpcError):
            await s.stub.JoinGroup(s.worker(group_id="huge", topo=topology(2**31 - 1)).join_request())
        after = await _scrape(s.server.metrics_port)
        refused = ("JoinGroup", "INVALID_ARGUMENT", "max_partitions_per_topic")
        assert after[REFUSED] == {**dict.fromkeys(WITHOUT_AUTH, 0.0), refused: 1.0}


async def test_with_authentication_on_its_failures_are_there_at_zero_too(tmp_path):
    tokens, acl = tmp_path / "tokens.yaml", tmp_path / "acl.yaml"
    tokens.write_text(f"tokens:\n  {TOKEN}: orders\n")
    acl.write_text(ACL)
    async with running_server(tmp_path / "state", metrics_port=free_port(), auth_token_file=tokens, acl_file=acl) as s:
        before = await _scrape(s.server.metrics_port)
        assert before[REFUSED] == dict.fromkeys(WITH_AUTH, 0.0)

        for token, group in (("not-a-token", "orders"), (TOKEN, "other")):
            with pytest.raises(grpc.aio.AioRpcError):
                await s.stub.DescribeGroup(pb.DescribeGroupRequest(group_id=group), metadata=(("authorization", f"Bearer {token}"),))
        request = urllib.request.Request(f"http://127.0.0.1:{s.server.metrics_port}/", headers={"Authorization": "Basic x"})
        with pytest.raises(urllib.error.HTTPError) as refused:  # the live page counts its refusals too
            await asyncio.to_thread(urllib.request.urlopen, request, timeout=10)
        assert refused.value.code == 401
        after = await _scrape(s.server.metrics_port)
        assert after[REFUSED] == {**dict.fromkeys(WITH_AUTH, 0.0), ("DescribeGroup", "UNAUTHENTICATED", "invalid_token"): 1.0,
                                  ("DescribeGroup", "PERMISSION_DENIED", "acl"): 1.0,
                                  ("LivePage", "UNAUTHENTICATED", "bad_authorization"): 1.0}


def test_every_limit_and_auth_reason_has_its_series():
    """A reason or limit added without its place in ``server.edge``'s table would appear only at
    its first refusal again. ``max_message_bytes`` is grpc's own, refused before our code runs."""
    reasons = {reason for _method, _code, reason in refusals(True)}
    limits = {f.name for f in dataclasses.fields(Limits)} - {"max_message_bytes"}
    assert reasons == limits | {*Unauthenticated} | {*Denied}
