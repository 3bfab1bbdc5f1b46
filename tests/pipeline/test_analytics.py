"""Analytics of a rebalance log on Spark: counts checked against hand-built records."""

from __future__ import annotations

import pytest

from pipeline.analytics import analyze
from tests.pipeline.records import STATEFUL, T0, client, lines, other_group, record, scale_out_story


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
    """No report from an earlier run next to tables it does not describe, no scratch copies; what
    someone else put in an earlier output stays."""
    from pipeline.output import MARKER

    out = tmp_path / "out"
    analyze(spark, [str(state_dir)], out, bucket_s=3600, show_progress=False)
    (out / "notes.txt").write_text("mine")
    analyze(spark, [str(state_dir)], out, bucket_s=3600, report=False, show_progress=False)
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "bad_lines", "episodes", "groups", "lags", "notes.txt",
                                                     "records", "timeline"]


def test_a_first_assignment_places_tasks_and_a_departed_owner_s_tasks_move(spark, tmp_path):
    """An audit's find: every active no member reported running counted as moved, so a group's
    first assignment (nothing ran before) showed 4 moves. Moved is "on another member than its
    previous owner"; a task with none is placed. A record without compute_ms is left out of the
    mean (it counted as 0 ms)."""
    both = [client("x", "r1"), client("y", "r1")]
    first = record("fresh", 1, T0, "member_joined", both, {"x": {"active": STATEFUL[:2]}, "y": {"active": STATEFUL[2:]}},
                   probing=False)
    del first["compute_ms"]
    y_left = record("fresh", 2, T0 + 60_000, "member_left", [client("x", "r1", active=STATEFUL[:2])],
                    {"x": {"active": STATEFUL}}, probing=False)
    x_restarted = record("fresh", 3, T0 + 120_000, "member_rejoined", [client("x", "r1")], {"x": {"active": STATEFUL}},
                         probing=False)
    log = tmp_path / "rebalances.jsonl"
    log.write_text(lines([first, y_left, x_restarted]))
    out = tmp_path / "out"
    data = analyze(spark, [str(log)], out, bucket_s=3600, report=False, show_progress=False)
    records = spark.read.parquet(str(out / "records"))
    assert not {"unreported_actives", "active_owners"} & set(records.columns)
    moves = [(r["tasks_moved"], r["actives_moved"], r["actives_orphaned"], r["actives_new"])
             for r in records.orderBy("generation").collect()]
    assert moves == [(0, 0, 0, 4), (2, 0, 2, 0), (0, 0, 0, 0)]
    assert data["groups"][0]["compute_ms_mean"] == 1.5


def _episodes(group: str, count: int) -> list[dict]:
    """``count`` membership changes 20 s apart, the n-th settled ``n % 7 + 1`` s after it began."""
    members = [client("x", "r1", active=STATEFUL[:2]), client("y", "r1", active=STATEFUL[2:])]
    stay = {"x": {"active": STATEFUL[:2]}, "y": {"active": STATEFUL[2:]}}
    story = []
    for n in range(count):
        began = T0 + 20_000 * n
        story.append(record(group, 2 * n + 1, began, "member_joined", members, stay, probing=True))
        story.append(record(group, 2 * n + 2, began + 1000 * (n % 7 + 1), "early_probe", members, stay, probing=False))
    return story


def test_the_report_counts_what_it_leaves_out_and_draws_each_group_whole(spark, tmp_path, monkeypatch):
    """An audit's find: the report read the first 500 episodes, then said "450 more rows" of a
    table holding 15,950 more, drew the box plot's groups from those 500 (one from 20 of its 80
    episodes) and cut the timeline at 20,000 rows the same way."""
    import numpy as np

    import pipeline.analytics

    monkeypatch.setattr(pipeline.analytics, "TIMELINE_POINTS", 250)
    log = tmp_path / "rebalances.jsonl"
    log.write_text(lines(_episodes("big", 300) + _episodes("small", 230)))
    out = tmp_path / "out"
    data = analyze(spark, [str(log)], out, bucket_s=10, show_progress=False)
    assert (data["episodes_total"], len(data["episodes"])) == (530, 50)
    report = (out / "report.html").read_text()
    assert "480 more rows in the Parquet table" in report

    boxes = {b["group_id"]: b for b in data["episode_boxes"]}
    assert {g: b["episodes"] for g, b in boxes.items()} == {"big": 300, "small": 230}
    settle = [n % 7 + 1 for n in range(230)]
    assert boxes["small"]["quartiles"] == pytest.approx(list(np.percentile(settle, [25, 50, 75])))
    assert (boxes["small"]["min"], boxes["small"]["max"]) == (1.0, 7.0)

    assert {r["group_id"] for r in data["timeline"]} == {"small"} and len(data["timeline"]) == 230
    assert "1 of 2 groups drawn" in report and "1 with more than 250 buckets left out" in report


def _rotated_once_staged(tmp_path, monkeypatch):
    """A log dir whose oldest backup a rotation removes once analyze has staged the files."""
    import pipeline.analytics

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rebalances.jsonl").write_text(lines(scale_out_story()))
    (logs / "rebalances.jsonl.9").write_text(lines(other_group()))
    stage = pipeline.analytics.stage_files

    def stage_then_rotate(files, folder):
        staged = stage(files, folder)
        (logs / "rebalances.jsonl.9").unlink()
        return staged

    monkeypatch.setattr(pipeline.analytics, "stage_files", stage_then_rotate)
    return logs


def test_a_log_removed_while_analyze_runs_is_read_as_it_was(spark, tmp_path, monkeypatch):
    """An audit's find: a rotation removing the oldest backup during the run ended in
    FILE_NOT_EXIST naming an internal staged file: the run reads each file as it was staged."""
    logs = _rotated_once_staged(tmp_path, monkeypatch)
    data = analyze(spark, [str(logs)], tmp_path / "out", bucket_s=3600, report=False, show_progress=False)
    assert (data["counts"]["files"], data["counts"]["records"]) == (2, 5)


def test_a_log_removed_that_could_only_be_symlinked_is_named_as_given(spark, tmp_path, monkeypatch):
    """On another file system than --out a staged file is a symlink: its original removed, the
    error names the original, not the internal staged name."""
    import errno
    import os

    from pipeline.rebalance_log import InvalidLog

    def cross_device(*_args, **_kwargs):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(os, "link", cross_device)
    logs = _rotated_once_staged(tmp_path, monkeypatch)
    with pytest.raises(InvalidLog) as raised:
        analyze(spark, [str(logs)], tmp_path / "out", bucket_s=3600, report=False, show_progress=False)
    assert str(logs / "rebalances.jsonl.9") in str(raised.value) and "_staged_logs" not in str(raised.value)


def test_a_log_removed_before_it_is_staged_is_named(tmp_path):
    from pipeline.analytics import stage_files
    from pipeline.rebalance_log import InvalidLog

    gone = tmp_path / "rebalances.jsonl.9"
    with pytest.raises(InvalidLog, match=f"LOGS: {gone}: removed since the run started"):
        stage_files([str(gone)], tmp_path / "staged")
