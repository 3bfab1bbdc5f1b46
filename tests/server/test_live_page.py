"""The live page over HTTP against a real server: /metrics as before, the groups list, a real
group of worker-library members on its page, the recent rebalances, and the same
authentication and per-group describe permission as DescribeGroup (server/auth.py)."""

from __future__ import annotations

import asyncio
import html
import re
import ssl
import urllib.parse
import uuid

import aiohttp
import pytest
import yarl

from assignor.cluster import AssignorError
from assignor.lag import Lag, LagKind
from assignor.model import AssignmentConfig, HostInfo, StateStore, TaskId
from assignor.topology import Subtopology, Topology
from client.member import GroupMember, MemberConfig, open_channel
from remote_leader.net import free_port
from remote_leader.pki import DevCa
from remote_leader.tls import ClientTls
from server.app import LeaderServer, Settings
from server.model import GroupView, MemberView
from server.web.app import (
    PICTURE_CELLS,
    _is_loopback,
    _probe_reason,
    _templates,
    group_context,
    read_log_tail,
)
from server.web.history import PageHistory, summarize

FAST = {"listen": "127.0.0.1:0", "initial_rebalance_delay_ms": 100, "min_session_timeout_ms": 500,
        "min_probe_interval_ms": 200, "drain_timeout_s": 1.0, "log_level": "warning"}
TOPOLOGY = Topology.of("orders", (Subtopology.of(0, ("orders",), 4, (StateStore("counts"),)),))



async def start(tmp_path, **settings) -> LeaderServer:
    server = LeaderServer(Settings(state_dir=tmp_path / "state", metrics_port=free_port(), **{**FAST, **settings}))
    await server.start()
    return server


async def get(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        return response.status, await response.text()


async def join_members(address: str, group: str, names: list[str], *, token_file=None) -> list[GroupMember]:
    channel = ClientTls(token_file=token_file).aio_channel(address) if token_file else open_channel(address)
    members = []
    for i, name in enumerate(names):
        config = MemberConfig(group_id=group, topology=TOPOLOGY, group_instance_id=name,
                              process_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{group}/{name}")),
                              endpoint=HostInfo("127.0.0.1", 7000 + i), rack=f"rack-{i % 2}",
                              assignment_config=AssignmentConfig(num_standby_replicas=1),
                              session_timeout_ms=2_000, heartbeat_interval_ms=200)
        member = GroupMember(channel, config, _NoState())
        await member.start()
        members.append(member)
    await asyncio.gather(*(m.wait_for_assignment(timeout=20) for m in members))
    return members


class _NoState:
    """A worker with no local state: every lag unknown (the lag source protocol)."""

    def task_lags(self):
        return {}

    def store_partition_lags(self):
        return {}


async def test_metrics_and_an_empty_groups_list(tmp_path):
    server = await start(tmp_path)
    try:
        base = f"http://127.0.0.1:{server.metrics_port}"
        status, text = await get(f"{base}/metrics")
        assert status == 200 and "remote_leader_rebalances" in text
        status, text = await get(f"{base}/")
        assert status == 200 and 'id="no-groups"' in text and 'http-equiv="refresh"' in text
        status, js = await get(f"{base}/static/plotly.min.js")
        assert status == 200 and len(js) > 1_000_000  # the whole bundle, from the installed package
        assert "cdn.plot.ly" not in text
    finally:
        await server.stop(0)


async def test_a_group_of_real_members_on_its_page(tmp_path):
    server = await start(tmp_path)
    members = []
    try:
        members = await join_members(f"127.0.0.1:{server.port}", "orders-app", ["w1", "w2"])
        base = f"http://127.0.0.1:{server.metrics_port}"
        status, listing = await get(f"{base}/")
        assert status == 200 and 'data-group="orders-app"' in listing and "Stable" in listing
        status, page = await get(f"{base}/groups/orders-app")
        assert status == 200
        for text in ('data-member="w1"', 'data-member="w2"', "127.0.0.1:7000", "rack-1", 'data-task="0_3"',
                     'data-role="active"', 'data-role="standby"', 'class="rebalance"', "member_joined"):
            assert text in page, text
        assert page.count('data-role="active"') == 4  # one active per task
        # the first rebalance waited at least the initial rebalance delay (100 ms) at its barrier
        durations = re.findall(r'<td class="num">(\d+\.\d\d) s</td>', page)
        assert durations and float(durations[-1]) >= 0.1, durations  # newest first: the last row is generation 1
        status, _ = await get(f"{base}/groups/nobody")
        assert status == 404
    finally:
        for member in members:
            await member.close()
        await server.stop(0)


#: Group ids a path would misread: a '/', a dot segment before one, markup, '%', '?' and '#',
#: and non-ASCII text.
AWKWARD_GROUPS = ["a/b", "../metrics", "<i>x</i>", "100%", "q?x=1#top", "Grüße/東京 ✓"]


async def test_every_group_link_opens_that_group_s_own_page(tmp_path):
    server = await start(tmp_path)
    members = []
    try:
        address = f"127.0.0.1:{server.port}"
        for group in AWKWARD_GROUPS:
            members += await join_members(address, group, ["w1"])
        base = f"http://127.0.0.1:{server.metrics_port}"
        status, listing = await get(f"{base}/")
        assert status == 200
        links = {html.unescape(group): html.unescape(href) for group, href in
                 re.findall(r'data-group="([^"]*)">\s*<td><a href="([^"]*)">', listing)}
        assert sorted(links) == sorted(AWKWARD_GROUPS)
        async with aiohttp.ClientSession() as session:
            for group, href in links.items():
                # what a browser requests for the link: relative to the list, dot segments resolved
                url = yarl.URL(urllib.parse.urljoin(f"{base}/", href), encoded=True)
                async with session.get(url) as response:
                    page = await response.text()
                assert response.status == 200, (group, href, str(url))
                assert f"<title>remote-leader: {html.escape(group)}</title>" in page, (group, href)
                assert 'data-member="w1"' in page
    finally:
        for member in members:
            await member.close()
        await server.stop(0)


async def test_a_restarted_server_shows_the_rebalances_from_its_log(tmp_path):
    server = await start(tmp_path)
    members = await join_members(f"127.0.0.1:{server.port}", "orders-app", ["w1", "w2"])
    for member in members:
        await member.close(leave=False)
    await server.stop(0)
    with (tmp_path / "state" / "rebalance-log" / "rebalances.jsonl").open("a") as log:
        log.write("not json\n")
    server = await start(tmp_path)
    try:
        status, page = await get(f"http://127.0.0.1:{server.metrics_port}/groups/orders-app")
        assert status == 200 and page.count('class="rebalance"') >= 1 and "member_joined" in page
    finally:
        await server.stop(0)


def test_the_log_tail_skips_a_cut_first_line_and_bad_lines(tmp_path):
    path = tmp_path / "rebalances.jsonl"
    path.write_text('{"group_id": "a", "generation": 1}\nnot json\n[1]\n{"group_id": "b", "generation": 2}\n')
    assert [r["group_id"] for r in read_log_tail(path)] == ["a", "b"]
    assert [r["group_id"] for r in read_log_tail(path, max_bytes=40)] == ["b"]
    assert read_log_tail(tmp_path / "missing.jsonl") == []


async def test_the_page_asks_what_describe_asks(tmp_path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens:\n  token-of-orders-0123456789: orders\n  token-of-billing-012345678: billing\n")
    acl = tmp_path / "acl.yaml"
    acl.write_text("acls:\n  - principal: orders\n    operations: [member, describe]\n    group: orders-app\n"
                   "  - principal: billing\n    operations: [describe]\n    group: billing-\n    pattern: prefixed\n")
    server = await start(tmp_path, auth_token_file=tokens, acl_file=acl)
    members = []
    try:
        client_token = tmp_path / "client-token"
        client_token.write_text("token-of-orders-0123456789\n")
        members = await join_members(f"127.0.0.1:{server.port}", "orders-app", ["w1"], token_file=client_token)
        base = f"http://127.0.0.1:{server.metrics_port}"
        assert (await get(f"{base}/"))[0] == 401
        assert (await get(f"{base}/", token="not-a-token"))[0] == 401
        status, listing = await get(f"{base}/", token="token-of-billing-012345678")
        assert status == 200 and "orders-app" not in listing
        assert (await get(f"{base}/groups/orders-app", token="token-of-billing-012345678"))[0] == 404
        status, page = await get(f"{base}/groups/orders-app", token="token-of-orders-0123456789")
        assert status == 200 and 'data-member="w1"' in page
        assert (await get(f"{base}/metrics"))[0] == 200  # the scraper's view is unchanged
    finally:
        for member in members:
            await member.close()
        await server.stop(0)


async def test_over_https_a_client_certificate_names_the_principal(tmp_path):
    ca = DevCa(tmp_path / "pki")
    server_cert, orders, stranger = ca.server(), ca.issue("orders", uris=("spiffe://corp/orders",)), ca.issue("stranger", cn="stranger")
    acl = tmp_path / "acl.yaml"
    acl.write_text("acls:\n  - principal: spiffe://corp/orders\n    operations: [member, describe]\n    group: orders-app\n")
    server = await start(tmp_path, tls_cert=server_cert.cert, tls_key=server_cert.key, tls_client_ca=ca.cert,
                         acl_file=acl, metrics_tls=True)

    async def fetch(path: str, issued) -> tuple[int, str]:
        context = ssl.create_default_context(cafile=str(ca.cert))
        if issued is not None:
            context.load_cert_chain(str(issued.cert), str(issued.key))
        async with aiohttp.ClientSession() as session, \
                session.get(f"https://127.0.0.1:{server.metrics_port}{path}", ssl=context) as response:
            return response.status, await response.text()

    members = []
    try:
        channel = ClientTls(ca=ca.cert, cert=orders.cert, key=orders.key).aio_channel(f"127.0.0.1:{server.port}")
        config = MemberConfig(group_id="orders-app", topology=TOPOLOGY, group_instance_id="w1",
                              process_id=str(uuid.uuid4()), assignment_config=AssignmentConfig(num_standby_replicas=1),
                              session_timeout_ms=2_000, heartbeat_interval_ms=200)
        members.append(GroupMember(channel, config, _NoState()))
        await members[0].start()
        await members[0].wait_for_assignment(timeout=20)
        assert (await fetch("/", None))[0] == 401
        status, page = await fetch("/groups/orders-app", orders)
        assert status == 200 and 'data-member="w1"' in page
        assert (await fetch("/groups/orders-app", stranger))[0] == 404
        assert (await fetch("/metrics", None))[0] == 200
    finally:
        for member in members:
            await member.close()
        await server.stop(0)


async def test_live_page_off_serves_only_metrics(tmp_path):
    server = await start(tmp_path, live_page="off")
    try:
        base = f"http://127.0.0.1:{server.metrics_port}"
        assert (await get(f"{base}/"))[0] == 404
        assert (await get(f"{base}/metrics"))[0] == 200
    finally:
        await server.stop(0)


@pytest.mark.parametrize(("remote", "loopback"), [("127.0.0.1", True), ("::1", True), ("::ffff:127.0.0.1", True),
                                                  ("10.0.0.7", False), ("::ffff:10.0.0.7", False), (None, False)])
def test_only_loopback_clients_count_as_local(remote, loopback):
    assert _is_loopback(remote) is loopback


def test_a_rebalance_record_in_the_page_s_words():
    # docs/interfaces.md "Rebalance log": b took 0_1 from a, 0_2 had no owner, c got a warm-up.
    record = {"schema": 1, "group_id": "g", "generation": 4, "time_ms": 1_000, "compute_ms": 2.5, "rebalance_ms": 3_100,
              "trigger": "member_joined",
              "input": {"clients": [{"id": "a", "prev_active": ["0_0", "0_1"]}, {"id": "b", "prev_active": []},
                                    {"id": "c", "prev_active": []}]},
              "output": {"clients": {"a": {"active": ["0_0"], "standby": [], "warmup": []},
                                     "b": {"active": ["0_1", "0_2"], "standby": [], "warmup": []},
                                     "c": {"active": [], "standby": [], "warmup": ["0_0"]}},
                         "probing_rebalance_needed": True}}
    summary = summarize(record)
    assert (summary.actives_moved, summary.actives_placed, summary.warmups, summary.members, summary.probing) == (1, 1, 1, 3, True)
    assert summary.rebalance_ms == 3_100
    history = PageHistory(max_rebalances=2)
    for generation in (1, 2, 3):
        history.record_rebalance({**record, "generation": generation})
    assert [r.generation for r in history.rebalances("g")] == [3, 2]


def test_warmup_history_keeps_lines_per_replica_and_skips_unknown_lags():
    history = PageHistory()
    history.sample("g", 1_000, [("0_1", "w3", 9_000), ("0_2", "w3", -2)])
    history.sample("g", 2_000, [("0_1", "w3", 4_000)])
    assert history.warmup_lines("g") == {"0_1 on w3": [(1_000, 9_000), (2_000, 4_000)]}
    history.forget(["other"])
    assert history.warmup_lines("g") == {}



def test_a_task_nobody_holds_still_has_its_row():
    """The task grid lists the topology's every task: an unassigned one (here 0_3, while its
    member is away) shows as an empty row, not as nothing."""
    held = tuple(TaskId(0, p) for p in range(3))
    member = MemberView(member_id="m1", group_instance_id="w1", process_id="p1", endpoint=None, rack=None,
                        client_tags={}, num_threads=1, version=1, latest_supported_version=1,
                        lags={task: Lag(LagKind.RUNNING) for task in held}, lags_updated_ms=0,
                        active=held, standby=(), warmup=(), session_timeout_ms=10_000)
    view = GroupView(group_id="orders-app", state="Stable", generation=3, commonly_supported_version=1,
                     members=(member,), topology=TOPOLOGY, config=AssignmentConfig(), next_probe_ms=None,
                     next_probe_reason="", reasons=(), last_rebalance_ms=0, last_rebalance_trigger="",
                     assignment_error=AssignorError.NONE)
    context = group_context(view, {}, [], now_ms=1_000)
    assert context["tasks"] == ["0_0", "0_1", "0_2", "0_3"]
    assert "0_3|m1" not in context["cells"] and context["cells"]["0_2|m1"]["role"] == "active"
    assert context["group"]["error"] == ""


def test_a_group_too_large_for_the_picture_gets_counts_and_its_warmups():
    """An audit's find: the tasks x members picture of a 20,000-task group was a 4.3 MB page
    rendered in 1 s on the event loop (heartbeats of every group waited); with 1,000 members it
    would be 20 million cells. Above ``PICTURE_CELLS`` the page shows no picture but the
    warm-ups, and is rendered bounded."""
    many = tuple(TaskId(0, p) for p in range(PICTURE_CELLS))
    runner = MemberView(member_id="m1", group_instance_id="w1", process_id="p1", endpoint=None, rack=None,
                        client_tags={}, num_threads=1, version=1, latest_supported_version=1,
                        lags={task: Lag(LagKind.RUNNING) for task in many}, lags_updated_ms=0,
                        active=many, standby=(), warmup=(), session_timeout_ms=10_000)
    warming = MemberView(member_id="m2", group_instance_id="w2", process_id="p2", endpoint=None, rack=None,
                         client_tags={}, num_threads=1, version=1, latest_supported_version=1,
                         lags={TaskId(0, 7): Lag.behind(5_000)}, lags_updated_ms=0,
                         active=(), standby=(), warmup=(TaskId(0, 7),), session_timeout_ms=10_000)
    view = GroupView(group_id="big", state="Stable", generation=3, commonly_supported_version=1,
                     members=(runner, warming), topology=None, config=AssignmentConfig(acceptable_recovery_lag=100),
                     next_probe_ms=None, next_probe_reason="", reasons=(), last_rebalance_ms=0,
                     last_rebalance_trigger="", assignment_error=AssignorError.NONE)
    context = group_context(view, {}, [], now_ms=1_000)
    assert context["tasks"] == [] and context["cells"] == {}
    assert context["picture"] == {"tasks": PICTURE_CELLS, "members": 2, "cells": 2 * PICTURE_CELLS, "limit": PICTURE_CELLS}
    assert context["warmup_rows"] == [{"task": "0_7", "member": "w2", "role": "warmup", "label": "W",
                                       "lag": "5,000", "state": "restoring"}]
    page = _templates.get_template("group.html").render(**context, refresh_s=2, title="t", now="")
    assert 'id="picture-omitted"' in page and 'id="assignment"' not in page
    assert 'data-task="0_7" data-member="w2"' in page
    assert len(page) < 20_000


@pytest.mark.parametrize(("state", "reason", "shown"), [
    ("Stable", "", "no probing rebalance is needed"),
    ("Empty", "", "no probing rebalance is needed"),
    ("PreparingRebalance", "", "rebalancing now: decided once the new assignment is out"),
    ("CompletingRebalance", "", "rebalancing now: decided once the new assignment is out"),
    ("Stable", "probing_rebalance", "probing_rebalance"),
])
def test_both_pages_say_why_no_probe_is_scheduled_in_the_same_words(state, reason, shown):
    """Seen by an operator mid-rebalance: the groups list showed warm-ups in flight, no probe
    scheduled and an empty "why", while the group's page said no probe was needed. Both read
    one rule now, and a group that is rebalancing says so."""
    view = GroupView(group_id="orders-app", state=state, generation=3, commonly_supported_version=1,
                     members=(), topology=TOPOLOGY, config=AssignmentConfig(), next_probe_ms=None,
                     next_probe_reason=reason, reasons=(), last_rebalance_ms=0, last_rebalance_trigger="",
                     assignment_error=AssignorError.NONE)
    assert group_context(view, {}, [], now_ms=1_000)["group"]["next_probe_reason"] == shown
    row = {"group_id": "orders-app", "state": state, "generation": 3, "members": 0, "warmups": 0,
           "next_probe": "none scheduled", "next_probe_reason": _probe_reason(state, reason)}
    page = _templates.get_template("groups.html").render(groups=[row], refresh_s=2, title="t", now="")
    assert f"<td>none scheduled</td><td>{html.escape(shown)}</td>" in page
