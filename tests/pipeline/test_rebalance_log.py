"""One rebalance-log record measured in plain Python (what the analytics executors run)."""

from __future__ import annotations

import json

import pytest

from pipeline.rebalance_log import expand_paths, latest_per_group, line_metrics
from tests.pipeline.records import lines, other_group, scale_out_story


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        pytest.param(0, {"trigger": "member_joined", "members": 2, "actives_moved": 0, "warmups": 2,
                         "probing": True, "imbalance": 4.0, "balanced": False, "cross_rack_partitions": 0,
                         "actives_restoring": 0, "replicas_added": 2, "lag_latest": 4}, id="scale-out-warm-ups"),
        pytest.param(1, {"trigger": "early_probe", "actives_moved": 2, "unreported_actives": [], "warmups": 0,
                         "probing": False, "imbalance": 0.0, "balanced": True, "cross_rack_partitions": 2,
                         "lag_p50": 20.0, "lag_max": 50}, id="moves-on-early-probe"),
        pytest.param(2, {"trigger": "member_left", "members": 1, "unreported_actives": ["0_2", "0_3"],
                         "actives_moved": 0, "actives_restoring": 2,
                         "lag_p95": 5000.0, "lag_hist": [0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0]}, id="scale-in-restoring"),
    ],
)
def test_record_metrics_match_the_hand_counted_table(index, expected):
    row = line_metrics(json.dumps(scale_out_story()[index]), "f")
    assert row["error"] is None
    assert {key: row[key] for key in expected} == expected


@pytest.mark.parametrize(
    ("line", "field"),
    [
        pytest.param("{not json", "(line)", id="not-json"),
        pytest.param(json.dumps({"schema": 2}), "schema", id="future-schema"),
        pytest.param(json.dumps({**scale_out_story()[0], "generation": "7"}), "generation", id="generation-type"),
        pytest.param(json.dumps({**scale_out_story()[0], "output": {"clients": {"zz": {}}}}), "output.clients.zz",
                     id="output-names-unknown-client"),
        pytest.param(json.dumps({**scale_out_story()[0], "input": {"version": 1, "tasks": [{"id": "x"}],
                                                                  "clients": []}}), "tasks[0].id",
                     id="bad-task-id"),
    ],
)
def test_bad_lines_become_error_rows_naming_the_field(line, field):
    row = line_metrics(line, "f")
    assert row["error"].startswith(field), row["error"]


def test_state_dir_expands_to_the_log_and_its_rotations(tmp_path):
    folder = tmp_path / "rebalance-log"
    folder.mkdir()
    (folder / "rebalances.jsonl").write_text(lines(scale_out_story()))
    (folder / "rebalances.jsonl.1").write_text(lines(other_group()))
    (folder / "unrelated.txt").write_text("x")
    assert [p.rsplit("/", 1)[1] for p in expand_paths([str(tmp_path)])] == ["rebalances.jsonl", "rebalances.jsonl.1"]
    latest = latest_per_group([str(tmp_path)])
    assert sorted(latest) == ["clicks", "orders"]
    assert latest["orders"]["output"]["clients"]["a"]["active"] == ["0_0", "0_1", "0_2", "0_3"]


@pytest.mark.parametrize("value", [-1.5, "3 ms", True], ids=["negative", "text", "boolean"])
def test_a_compute_ms_that_is_not_milliseconds_is_a_bad_line_naming_it(value):
    """A negative or boolean compute_ms was measured as it was, a text one became "(record): could
    not convert string to float" with no field named."""
    row = line_metrics(json.dumps({**scale_out_story()[0], "compute_ms": value}), "f")
    assert row["error"] is not None and row["error"].startswith("compute_ms: "), row


def test_a_record_without_compute_ms_has_none_not_zero():
    """Counted as 0 ms, a record without one pulled its group's mean down."""
    record = {key: value for key, value in scale_out_story()[0].items() if key != "compute_ms"}
    row = line_metrics(json.dumps(record), "f")
    assert row["error"] is None and row["compute_ms"] is None
