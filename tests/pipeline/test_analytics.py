"""Analytics of a rebalance log on Spark: counts checked against hand-built records."""

from __future__ import annotations

import pytest

from pipeline.analytics import analyze
from tests.pipeline.records import T0, lines, other_group, scale_out_story


@pytest.fixture
def state_dir(tmp_path):
    """The current log plus one rotated file, with one bad line and one duplicated record."""
    folder = tmp_path / "state" / "rebalance-log"
    folder.mkdir(parents=True)
    story = scale_out_story()
    (folder / "rebalances.jsonl").write_text(lines(story[1:]) + lines(other_group()[1:]))
    rotated = lines([story[0], story[1]]) + lines(other_group()[:1]) + "{torn line\n"
    (folder / "rebalances.jsonl.1").write_text(rotated)
    return tmp_path / "state"


def test_analytics_counts_rebalances_moves_episodes_and_lags(spark, state_dir, tmp_path):
    out = tmp_path / "out"
    data = analyze(spark, [str(state_dir)], out, bucket_s=3600, show_progress=False)
    assert data["counts"] == {"files": 2, "records": 5, "groups": 2, "bad_lines": 1, "duplicates": 1}

    groups = {r["group_id"]: r for r in data["groups"]}
    orders, clicks = groups["orders"], groups["clicks"]
    assert (orders["rebalances"], orders["tasks_moved_total"], orders["warmups_max"]) == (3, 4, 2)
    assert orders["mean_interval_s"] == pytest.approx(1800.0) and orders["per_hour"] == pytest.approx(3.0)
    assert (orders["episodes"], orders["settle_max_s"]) == (2, 60.0)
    assert (clicks["rebalances"], clicks["tasks_moved_total"], clicks["episodes"]) == (2, 0, 0)

    episodes = [(e["start_generation"], e["end_generation"], e["rebalances"], e["settle_s"])
                for e in data["episodes"] if e["group_id"] == "orders"]
    assert episodes == [(1, 2, 2, 60.0), (3, 3, 1, 0.0)]

    timeline = [(r["bucket_ms"] - T0 + 600_000, r["rebalances"]) for r in data["timeline"] if r["group_id"] == "orders"]
    assert timeline == [(0, 2), (3_600_000, 1)]
    lag = {r["group_id"]: r["hist"] for r in data["lag_hist"]}
    assert lag["orders"] == [0, 0, 2, 0, 2, 0, 0, 0, 0, 0, 0]
    assert data["bad"][0]["error"].startswith("(line)") and data["bad"][0]["count"] == 1

    records = spark.read.parquet(str(out / "records"))
    assert [r["tasks_moved"] for r in records.where("group_id = 'orders'").orderBy("generation").collect()] == [0, 2, 2]
    report = (out / "report.html").read_text()
    assert report.count("data:image/png;base64,") >= 5 and ">orders<" in report


def _group_log(group: str) -> str:
    """The "orders" story under another group name: 3 records, one group per file below."""
    return lines([{**r, "group_id": group} for r in scale_out_story()])


def test_analyze_reads_every_named_file_exactly_whatever_its_name(spark, tmp_path):
    """Hadoop reads a path as a glob and skips names starting with ``_`` or ``.``: ``run[12]``
    read ``run1``, ``_server2.jsonl`` was dropped, ``x{a,b}.jsonl`` ended in a traceback."""
    logs = tmp_path / "logs"
    named = {"run1/rebalances.jsonl": "wrong", "run[12]/rebalances.jsonl": "glob", "_server2.jsonl": "under",
             ".hidden.jsonl": "dot", "x{a,b}.jsonl": "braces", "a:b %20.jsonl": "colon"}
    for name, group in named.items():
        (logs / name).parent.mkdir(parents=True, exist_ok=True)
        (logs / name).write_text(_group_log(group))
    out = tmp_path / "out [1] {a,b}"  # the staged copies live under --out: its name is literal too

    data = analyze(spark, [str(logs / "run[12]")], out, bucket_s=3600, show_progress=False)
    assert [g["group_id"] for g in data["groups"]] == ["glob"]

    files = [str(logs / name) for name in named if "/" not in name]
    data = analyze(spark, files, out, bucket_s=3600, show_progress=False)
    assert data["counts"]["files"] == 4 and data["counts"]["records"] == 12
    assert sorted(g["group_id"] for g in data["groups"]) == ["braces", "colon", "dot", "under"]


def test_analyze_leaves_only_what_this_run_wrote(spark, state_dir, tmp_path):
    """No report from an earlier run next to tables it does not describe, and no scratch copies."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.html").write_text("an earlier run's report")
    analyze(spark, [str(state_dir)], out, bucket_s=3600, report=False, show_progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["bad_lines", "episodes", "groups", "lags", "records",
                                                     "timeline"]
