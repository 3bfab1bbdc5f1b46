"""The live page in a real headless Chromium, over a real server and real worker-library members
whose state stores restore at a simulated rate (client.demo's SimulatedWorker): the members and
tasks appear, a newcomer's warm-ups show up, finish, and the page follows by itself (KIP-441
"Scaling Out"). Screenshots land in test-artifacts/."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

from assignor.model import AssignmentConfig, HostInfo, StateStore
from assignor.topology import Subtopology, Topology
from client.demo import Changelogs, SimulatedWorker
from client.member import GroupMember, MemberConfig, open_channel
from remote_leader.net import free_port
from server.app import LeaderServer, Settings
from tests.browser import Browser
from tests.server.test_live_page import AWKWARD_GROUPS, join_members

GROUP = "orders-app"
TOPOLOGY = Topology.of("orders", (Subtopology.of(0, ("orders",), 6, (StateStore("counts"),)),))
CONFIG = AssignmentConfig(num_standby_replicas=1, acceptable_recovery_lag=2_000, max_warmup_replicas=2)



class Workers:
    """Simulated workers, each a real GroupMember, and the clock that restores their state."""

    def __init__(self, address: str) -> None:
        self.channel = open_channel(address)
        self.changelogs = Changelogs(TOPOLOGY.task_ids(), initial=60_000, write_rate=100)
        self.workers: dict[str, SimulatedWorker] = {}
        self._ticker = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            self.changelogs.tick(now - last)
            for worker in self.workers.values():
                worker.tick(now - last)
            last = now

    async def start(self, name: str, seeded: bool) -> SimulatedWorker:
        worker = SimulatedWorker(name, TOPOLOGY, self.changelogs, restore_rate=6_000)
        if seeded:
            worker.seed_caught_up(TOPOLOGY.task_ids())
        config = MemberConfig(group_id=GROUP, topology=TOPOLOGY, group_instance_id=name,
                              process_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"browser-test/{name}")),
                              endpoint=HostInfo(f"10.1.0.{len(self.workers) + 1}", 8080),
                              rack=f"zone-{'abc'[len(self.workers) % 3]}", assignment_config=CONFIG,
                              session_timeout_ms=2_000, heartbeat_interval_ms=200, retry_backoff_ms=50)
        worker.member = GroupMember(self.channel, config, worker, on_assignment=worker.on_assignment)
        self.workers[name] = worker
        await worker.member.start()
        return worker

    async def close(self) -> None:
        self._ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._ticker
        for worker in self.workers.values():
            await worker.member.close()
        await self.channel.close()


def _cells(browser: Browser, member: str, role: str) -> int:
    return len(browser.css(f'#assignment td[data-member="{member}"][data-role="{role}"]'))


async def test_the_live_page_follows_a_scale_out_until_the_warm_ups_finish(tmp_path):
    server = LeaderServer(Settings(listen="127.0.0.1:0", state_dir=tmp_path, metrics_port=free_port(),
                                   initial_rebalance_delay_ms=300, min_session_timeout_ms=500, min_probe_interval_ms=1_000,
                                   drain_timeout_s=1.0, log_level="warning"))
    await server.start()
    workers = Workers(f"127.0.0.1:{server.port}")
    browser = await asyncio.to_thread(Browser)
    run = asyncio.to_thread
    try:
        for name in ("I1", "I2"):
            await workers.start(name, seeded=True)
        page = f"http://127.0.0.1:{server.metrics_port}/groups/{GROUP}"
        await run(browser.open, page)
        await run(browser.wait, lambda d: len(browser.css("#members tr.member")) == 2
                  and len(browser.css("#assignment tr[data-task]")) == 6
                  and len(browser.css('#assignment td[data-role="active"]')) == 6, 30, "two members running six tasks")

        await workers.start("I3", seeded=False)  # no state: KIP-441 gives it warm-ups, no actives
        await run(browser.wait, lambda d: _cells(browser, "I3", "warmup") >= 1 and _cells(browser, "I3", "active") == 0
                  and int(browser.css("#warmups")[0].text) >= 1
                  and d.execute_script("const p = document.getElementById('warmup-plot');"
                                       "return p && p.data ? Math.max(...p.data.map(t => t.x.length)) : 0") >= 3,
                  30, "I3's warm-ups and their progress plot")
        await run(browser.screenshot, "live-page-warmup.png")

        # The warm-ups catch up, the leader probes early, and I3 takes over actives: the page
        # shows it without being told to reload.
        await run(browser.wait, lambda d: browser.css("#warmups")[0].text == "0" and _cells(browser, "I3", "active") >= 1
                  and "no probing rebalance is needed" in browser.css("#next-probe")[0].text, 40,
                  "the warm-ups finished and I3 running actives")
        # (the page reloads itself: every read goes through a wait)
        rebalances = await run(browser.wait, lambda d: [row.text for row in browser.css("#rebalances tr.rebalance")], 10,
                               "the recent rebalances")
        assert len(rebalances) >= 2 and any("early_probe" in r or "probing_rebalance" in r for r in rebalances), rebalances
        await run(browser.screenshot, "live-page-settled.png")

        await run(browser.open, f"http://127.0.0.1:{server.metrics_port}/")
        row = await run(browser.wait, lambda d: browser.css(f'#groups tr.group[data-group="{GROUP}"]')[0].text, 10,
                        "the groups list")
        assert "Stable" in row
        await run(browser.screenshot, "live-page-groups.png")
    finally:
        await run(browser.close)
        await workers.close()
        await server.stop(0)


async def test_each_group_link_in_the_list_opens_that_group_s_page(tmp_path):
    """The browser resolves each link itself (dot segments, escapes), as a click would."""
    server = LeaderServer(Settings(listen="127.0.0.1:0", state_dir=tmp_path, metrics_port=free_port(),
                                   initial_rebalance_delay_ms=100, min_session_timeout_ms=500,
                                   drain_timeout_s=1.0, log_level="warning"))
    await server.start()
    members = []
    browser = await asyncio.to_thread(Browser)
    run = asyncio.to_thread
    try:
        for group in AWKWARD_GROUPS:
            members += await join_members(f"127.0.0.1:{server.port}", group, ["w1"])
        await run(browser.open, f"http://127.0.0.1:{server.metrics_port}/")
        links = await run(browser.wait, lambda d: d.execute_script(
            "return Array.from(document.querySelectorAll('#groups tr.group'),"
            " row => [row.dataset.group, row.querySelector('a').href])"), 10, "the groups list")
        assert sorted(group for group, _ in links) == sorted(AWKWARD_GROUPS)
        for group, href in links:
            await run(browser.open, href)
            title = await run(browser.wait, lambda d: d.title, 10, f"the page of {group!r}")
            assert title == f"remote-leader: {group}", (group, href)
            assert await run(browser.wait, lambda d: browser.css('#members tr.member[data-member="w1"]'), 10,
                             f"{group!r}'s member")
    finally:
        await run(browser.close)
        for member in members:
            await member.close()
        await server.stop(0)
