"""The report's drawing rules, without Spark: identical curves share one labelled line, axes
in people's words, degenerate data says so instead of drawing one point, buckets follow the
log's span, and the heat-map's numbers stay readable on their colour."""

from __future__ import annotations

import pytest

from pipeline.analytics import bucket_for_span
from pipeline.report import (
    SHOWN_SKIPPED,
    _event_lines,
    _same_curves,
    _timeline,
    axis_label,
    sweep_report,
    with_empty_buckets,
)
from pipeline.sweep import REPORTED_ERRORS, convergence_curves


def test_configs_with_the_same_curve_share_one_line_naming_them_all():
    series = {"a": [(1, 0.5), (2, 1.0)], "b": [(2, 1.0), (1, 0.5)], "c": [(1, 0.2), (2, 1.0)]}
    assert _same_curves(series, ["a", "b", "c"]) == [("a = b", [(1, 0.5), (2, 1.0)]), ("c", [(1, 0.2), (2, 1.0)])]


def test_convergence_curves_step_at_every_settle_time_so_different_configs_stay_apart():
    """A new user's find: sampled at 0, 30, 60 ... s, configs that settled at 240/300 s and at
    240/267.5 s drew as one line "a = b" beside a ranking that gave them different medians. The
    curves are the exact shares now; an unsettled run keeps its config's curve below 1, level
    to the event's last settle time."""
    rows = [{"event": "scale_out", "config": "a", "runs": 2, "times": [240.0, 300.0]},
            {"event": "scale_out", "config": "b", "runs": 2, "times": [240.0, 267.5]},
            {"event": "scale_out", "config": "c", "runs": 2, "times": [10.0]},
            {"event": "scale_in", "config": "a", "runs": 1, "times": []}]
    curves = convergence_curves(rows)
    by: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for row in curves:
        by.setdefault((row["event"], row["config"]), []).append((row["t"], row["share"]))
    assert by["scale_out", "a"] == [(0.0, 0.0), (240.0, 0.5), (300.0, 1.0)]
    assert by["scale_out", "b"] == [(0.0, 0.0), (240.0, 0.5), (267.5, 1.0), (300.0, 1.0)]
    assert by["scale_out", "c"] == [(0.0, 0.0), (10.0, 0.5), (300.0, 0.5)]
    assert by["scale_in", "a"] == [(0.0, 0.0)]
    series = {c: by["scale_out", c] for c in "abc"}
    assert [label for label, _ in _same_curves(series, ["a", "b", "c"])] == ["a", "b", "c"]


@pytest.mark.parametrize(("name", "label"), [("c_max_warmup_replicas", "max warm-up replicas"), ("g_lag", "standby lag at the start"),
                                             ("acceptable_recovery_lag", "acceptable recovery lag (offsets)"),
                                             ("c_something_new", "something new")])
def test_axes_speak_the_reader_s_words(name, label):
    assert axis_label(name) == label


def test_a_single_point_is_no_data_not_a_plot():
    rows = [{"event": "scale_out:2", "config": "a", "bucket": 0.0, "tasks_down": 3.0}]
    html = _event_lines(rows, ["scale_out:2"], {}, "bucket", "tasks_down", xlabel="x", ylabel="y", settled_share=False)
    assert "no data" in html and "<img" not in html
    timeline = [{"group_id": "g", "bucket_ms": 0, "rebalances": 4}]
    assert "no data" in _timeline(timeline, "rebalances", "rebalances")
    timeline.append({"group_id": "g", "bucket_ms": 60_000, "rebalances": 1})
    assert "<img" in _timeline(timeline, "rebalances", "rebalances")


@pytest.mark.parametrize(("span_s", "bucket_s"), [(0, 1), (50, 1), (300, 5), (3_600, 60), (6 * 3_600, 600),
                                                  (7 * 86_400, 10_800), (10 ** 9, 604_800)])
def test_timeline_buckets_follow_the_log_s_span(span_s, bucket_s):
    assert bucket_for_span(span_s) == bucket_s


def test_an_empty_bucket_counts_zero_rebalances_not_the_previous_bucket_s():
    """Drawn as steps, 2 rebalances at 0 s and 1 at 3,600 s (20-minute buckets) looked like 2 per
    bucket for the whole hour."""
    assert with_empty_buckets([(3600.0, 1), (0.0, 2)], 1200) == [(0.0, 2), (1200.0, 0.0), (3600.0, 1)]
    assert with_empty_buckets([(0.0, 2), (1200.0, 1)], 1200) == [(0.0, 2), (1200.0, 1)]


def test_a_sweep_report_says_how_many_failures_and_skips_it_does_not_list():
    """It listed any 20 of the distinct errors and the first 50 skipped combinations, unsaid."""
    errors = [{"error": f"e{i}", "count": 30 - i} for i in range(REPORTED_ERRORS)]
    data = {"name": "g", "counts": {"runs": 500, "unsettled": 0, "errors": 400}, "configs": [], "overall": [],
            "curves": [], "down_curves": [], "heatmaps": [], "errors": errors, "error_kinds": 35,
            "skipped": [f"combination {i}" for i in range(SHOWN_SKIPPED + 7)]}
    page = sweep_report(data)
    assert "15 more rows" in page and "and 7 more" in page
