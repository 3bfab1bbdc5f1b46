"""Empty groups expire (docs/security.md, "Groups that expire"), and ListGroups pages."""

from __future__ import annotations

import grpc
import pytest

from remote_leader.v1 import errors_pb2 as epb
from remote_leader.v1 import group_leader_pb2 as pb
from tests.server.harness import rebalance, run_for, running_server, settle

pytestmark = pytest.mark.asyncio

RETENTION_MS = 60_000


async def _group_ids(stub, page_size: int = 0) -> list[str]:
    ids, token = [], ""
    while True:
        page = await stub.ListGroups(pb.ListGroupsRequest(page_size=page_size, page_token=token))
        ids += [g.group_id for g in page.groups]
        token = page.next_page_token
        if not token:
            return ids


async def _abandon(s, group_id: str) -> None:
    """A group formed by one member that then leaves: Empty."""
    member = s.worker(group_id=group_id)
    await rebalance(s.clock, [member], advance_ms=3_000)
    assert (await member.leave()).error_code == epb.ERROR_CODE_NONE


def _series(s, group_id: str) -> set[str]:
    """The names of the samples /metrics exports for this group."""
    return {sample.name for family in s.server.metrics.registry.collect() for sample in family.samples
            if sample.labels.get("group") == group_id}


async def test_an_abandoned_group_expires_from_memory_store_and_list(tmp_path):
    async with running_server(tmp_path, empty_group_retention_ms=RETENTION_MS) as s:
        await _abandon(s, "abandoned")
        busy = s.worker(group_id="busy")
        await rebalance(s.clock, [busy], advance_ms=3_000)
        await run_for(s.clock, [busy], RETENTION_MS // 2)
        assert await _group_ids(s.stub) == ["abandoned", "busy"]
        answers = await run_for(s.clock, [busy], RETENTION_MS)  # past the retention; busy heartbeats
        assert [a.error_code for a in answers] == [epb.ERROR_CODE_NONE]
        await settle()
        assert await _group_ids(s.stub) == ["busy"]
        described = await s.stub.DescribeGroup(pb.DescribeGroupRequest(group_id="abandoned"))
        assert described.error_code == epb.ERROR_CODE_GROUP_ID_NOT_FOUND
        assert s.server.metrics.registry.get_sample_value("remote_leader_groups_expired_total") == 1.0
        # ... and from /metrics: the callers choose group ids, so the series of every group
        # ever seen grew without bound (an audit's find)
        assert _series(s, "abandoned") == set()
        assert _series(s, "busy") >= {"remote_leader_group_members", "remote_leader_group_generation",
                                      "remote_leader_warmups_in_flight", "remote_leader_rebalances_total"}
    async with running_server(tmp_path, empty_group_retention_ms=RETENTION_MS) as s:
        assert await _group_ids(s.stub) == ["busy"]  # gone from the store too


async def test_a_group_that_comes_back_before_the_retention_stays(tmp_path):
    async with running_server(tmp_path, empty_group_retention_ms=RETENTION_MS) as s:
        await _abandon(s, "returning")
        await s.clock.advance(RETENTION_MS // 2)
        member = s.worker(group_id="returning")
        await rebalance(s.clock, [member], advance_ms=3_000)
        answers = await run_for(s.clock, [member], RETENTION_MS * 2)
        assert [a.error_code for a in answers] == [epb.ERROR_CODE_NONE]
        assert await _group_ids(s.stub) == ["returning"]


async def test_many_abandoned_groups_all_expire(tmp_path):
    retention_ms = 600_000  # longer than forming them all takes (3 s of fake time each)
    async with running_server(tmp_path, empty_group_retention_ms=retention_ms) as s:
        for i in range(40):
            await _abandon(s, f"app-{i:03}")
        assert len(await _group_ids(s.stub)) == 40
        for _ in range(6):
            await s.clock.advance(retention_ms // 4)
        await settle()
        assert await _group_ids(s.stub) == []
        assert s.server.coordinator.groups == {}


async def test_list_groups_pages_in_group_id_order(tmp_path):
    async with running_server(tmp_path) as s:
        for i in range(25):
            await _abandon(s, f"app-{i:02}")
        first = await s.stub.ListGroups(pb.ListGroupsRequest(page_size=10))
        assert [g.group_id for g in first.groups] == [f"app-{i:02}" for i in range(10)]
        assert first.next_page_token
        assert await _group_ids(s.stub, page_size=10) == [f"app-{i:02}" for i in range(25)]
        assert await _group_ids(s.stub) == [f"app-{i:02}" for i in range(25)]  # default page size
        for request, field in ((pb.ListGroupsRequest(page_size=-1), "page_size"),
                               (pb.ListGroupsRequest(page_token="not a token"), "page_token")):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await s.stub.ListGroups(request)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert caught.value.details().startswith(field)
