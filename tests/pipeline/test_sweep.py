"""The sweep on Spark: the same rows as plain Python, whatever the partitioning; tables and report."""

from __future__ import annotations

import pytest

from pipeline.grid import expand_grid
from pipeline.simulation import clear_warm_start_cache, run_rows
from pipeline.sweep import run_sweep, simulate_runs

GRID = {
    "name": "tiny",
    "group": {"clients": [4, 6], "racks": 2, "subtopologies": 1, "partitions": 8, "standbys": 1,
              "changelog_offsets": 200_000, "lag": "uniform:0:40000", "restore_rate": 20_000, "append_rate": 100},
    "events": ["scale_out:2", "lose_rack"],
    "configs": {"assignor": ["high_availability", "sticky"], "max_warmup_replicas": [1, 3]},
}


def _as_python(row) -> dict:
    data = row.asDict(recursive=True)
    data["steps"] = [dict(s) for s in data["steps"]]
    return data


@pytest.mark.parametrize("partitions", [pytest.param(1, id="one-partition"), pytest.param(5, id="five-partitions")])
def test_executors_compute_the_same_runs_as_plain_python(spark, partitions):
    plan = expand_grid(GRID)
    assert len(plan.runs) == 16
    expected = {}
    for spec in plan.runs:
        clear_warm_start_cache()  # the expectation: every run from scratch, no cached warm start
        row, steps = run_rows(spec)
        expected[spec.run_id] = {**row, "steps": [{k: v for k, v in s.items() if k != "run_id"} | {"run_id": spec.run_id}
                                                  for s in steps]}
    got = {r["run_id"]: _as_python(r) for r in simulate_runs(spark, plan, partitions).collect()}
    assert got.keys() == expected.keys()
    for run_id, row in expected.items():
        assert got[run_id] == row, run_id


def test_sweep_writes_ranked_tables_and_a_self_contained_report(spark, tmp_path):
    plan = expand_grid(GRID)
    data = run_sweep(spark, plan, tmp_path, partitions=3, show_progress=False)
    runs = spark.read.parquet(str(tmp_path / "runs"))
    assert runs.count() == 16 and runs.where("error is not null").count() == 0
    steps = spark.read.parquet(str(tmp_path / "steps"))
    assert steps.count() == runs.groupBy().sum("rebalances").first()[0]
    configs = spark.read.parquet(str(tmp_path / "configs")).collect()
    assert sorted({(r["event"], r["runs"]) for r in configs}) == [("lose_rack", 2), ("scale_out:2", 2)]
    for event in ("lose_rack", "scale_out:2"):
        assert min(r["rank"] for r in configs if r["event"] == event) == 1
    assert len(data["overall"]) == 4
    html = (tmp_path / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 4
    assert "Ranking for lose_rack" in html and "<script" not in html


def test_a_sweep_without_report_leaves_no_earlier_report_behind(spark, tmp_path):
    from pipeline.output import claim_out

    claim_out(tmp_path, "simulate")
    (tmp_path / "report.html").write_text("an earlier run's report")
    run_sweep(spark, expand_grid({"group": {"clients": 3}, "events": ["scale_out:1"]}), tmp_path, report=False,
              show_progress=False)
    assert not (tmp_path / "report.html").exists()
