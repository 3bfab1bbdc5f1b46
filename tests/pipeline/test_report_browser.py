"""The what-if report of a real sweep, opened from disk in a real headless Chromium with the
network off: every section is there, every figure loads, and the axes speak the reader's words.
The screenshot lands in test-artifacts/."""

from __future__ import annotations

import asyncio

from pipeline.grid import expand_grid
from pipeline.sweep import run_sweep
from tests.browser import Browser

GRID = {
    "name": "browser",
    "group": {"clients": [4, 6], "racks": 2, "subtopologies": 1, "partitions": 8, "standbys": 1,
              "changelog_offsets": 200_000, "lag": "uniform:0:40000", "restore_rate": 20_000, "append_rate": 100},
    "events": ["lose_rack"],
    "configs": {"max_warmup_replicas": [1, 3], "acceptable_recovery_lag": [10_000, 100_000]},
}
SECTIONS = ["Summary", "Convergence: share of runs settled over time", "Tasks not running after each rebalance",
            "Task downtime by config", "Ranking for lose_rack"]


async def test_the_what_if_report_opens_offline_with_its_sections(spark, tmp_path):
    await asyncio.to_thread(run_sweep, spark, expand_grid(GRID), tmp_path, partitions=2, show_progress=False)
    browser = await asyncio.to_thread(Browser, 1280, 2400)
    try:
        browser.driver.set_network_conditions(offline=True, latency=0, download_throughput=0, upload_throughput=0)
        await asyncio.to_thread(browser.open, (tmp_path / "report.html").as_uri())
        headings = [h.text for h in browser.css("h2")]
        for section in SECTIONS:
            assert section in headings, headings
        assert any(h.startswith("Heatmap: max warm-up replicas × acceptable recovery lag") or
                   h.startswith("Heatmap: acceptable recovery lag (offsets) × max warm-up replicas") for h in headings), headings
        images = browser.css("img")
        assert len(images) >= 4
        assert all(browser.driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", image)
                   for image in images)
        text = browser.css("body")[0].text
        assert "c_max_warmup_replicas" not in text and "g_lag" not in text
        browser.screenshot("what-if-report.png")
    finally:
        await asyncio.to_thread(browser.close)
