"""The simulation sweep on Spark: grid in, Parquet tables and one HTML report out.

The driver only expands the grid (small specs) and collects aggregates; every run is
simulated inside the executors (``mapPartitions`` over ``pipeline.simulation.run_rows``).
Each run depends on its own spec and seed only, so the tables are the same whatever the
partitioning or the cluster. Runnable as ``remote-leader simulate`` or with ``spark-submit``
(docs/pipeline.md).

Tables under ``OUT/``: ``runs`` (one row per run), ``steps`` (one row per simulated
rebalance), ``configs`` (per event and config: aggregates and rank), ``config_ranking``
(per config over all events), and ``report.html``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from pipeline.grid import Plan, load_grid
from pipeline.simulation import RunSpec, run_rows

_G = [("clients", "long"), ("threads", "long"), ("racks", "long"), ("subtopologies", "long"),
      ("partitions", "long"), ("stateful_share", "double"), ("standbys", "long"), ("changelog_offsets", "long"),
      ("lag", "string"), ("restore_rate", "double"), ("append_rate", "double")]
_C = [("assignor", "string"), ("acceptable_recovery_lag", "long"), ("max_warmup_replicas", "long"),
      ("probing_interval_s", "double"), ("early_probe", "boolean"), ("min_probe_interval_s", "double"),
      ("rack_strategy", "string")]
RUN_COLUMNS: list[tuple[str, str]] = [
    *[(f"g_{n}", t) for n, t in _G], *[(f"c_{n}", t) for n, t in _C],
    ("start", "string"), ("rep", "long"), ("run_id", "string"), ("seed", "long"), ("event", "string"),
    ("config", "string"), ("clients_before", "long"), ("clients_after", "long"), ("tasks", "long"),
    ("settled", "boolean"), ("settle_time_s", "double"), ("rebalances", "long"), ("downtime_task_s", "double"),
    ("offsets_restored", "double"), ("peak_warmups", "long"), ("tasks_moved", "long"),
    ("cross_rack_partitions", "long"), ("imbalance", "double"), ("balanced", "boolean"),
    ("simulated_s", "double"), ("error", "string"),
]
STEP_COLUMNS: list[tuple[str, str]] = [
    ("run_id", "string"), ("step", "long"), ("time_s", "double"), ("trigger", "string"), ("members", "long"),
    ("moved", "long"), ("warmups", "long"), ("tasks_down", "long"), ("imbalance", "double"),
    ("probing", "boolean"), ("downtime_s", "double"),
]
DOWNTIME_RESOLUTION_S = 60.0
#: Distinct errors the report lists, the commonest first (their count says how many more there are)
REPORTED_ERRORS = 20


def ddl(columns: list[tuple[str, str]]) -> str:
    return ", ".join(f"`{name}` {kind}" for name, kind in columns)


def simulate_partition(specs: Any) -> Any:
    """Executor side: simulate each (index, spec JSON) of a partition; yields run rows with steps."""
    run_names = [name for name, _ in RUN_COLUMNS]
    step_names = [name for name, _ in STEP_COLUMNS]
    for _, text in specs:
        row, steps = run_rows(RunSpec.from_json(text))
        yield (*(row.get(name) for name in run_names), [tuple(s[n] for n in step_names) for s in steps])


def simulate_runs(spark: Any, plan: Plan, partitions: int | None = None) -> Any:
    """The runs DataFrame (with a ``steps`` array column); lazy until an action runs it."""
    sc = spark.sparkContext
    specs = [(index, spec.to_json()) for index, spec in enumerate(plan.runs)]
    count = partitions or max(1, min(len(specs), sc.defaultParallelism * 8))
    schema = f"{ddl(RUN_COLUMNS)}, `steps` array<struct<{', '.join(f'{n}: {t}' for n, t in STEP_COLUMNS)}>>"
    rdd = sc.parallelize(specs, count).mapPartitions(simulate_partition)
    return spark.createDataFrame(rdd, schema=schema)


def config_tables(runs: Any) -> tuple[Any, Any]:
    """Per (event, config) aggregates ranked within the event, and the overall config ranking.

    Rank: most runs settled, then least mean task downtime (in whole task-minutes: a few
    task-seconds of restoring the last ``acceptable_recovery_lag`` offsets are not worth a
    10-minute-slower convergence), then shortest median time to settle, then fewest rebalances:
    availability first, as KIP-441 puts it. Configs equal on all four share a rank.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ok = runs.where(F.col("error").isNull())
    keys = ["event", "config", *[f"c_{n}" for n, _ in _C]]
    per = ok.groupBy(*keys).agg(
        F.count("*").alias("runs"),
        F.avg(F.col("settled").cast("double")).alias("settled_share"),
        F.avg("settle_time_s").alias("settle_time_mean_s"),
        F.percentile("settle_time_s", 0.5).alias("settle_time_p50_s"),
        F.percentile("settle_time_s", 0.95).alias("settle_time_p95_s"),
        F.avg("rebalances").alias("rebalances_mean"),
        F.avg("downtime_task_s").alias("downtime_mean_task_s"),
        F.percentile("downtime_task_s", 0.95).alias("downtime_p95_task_s"),
        F.avg("offsets_restored").alias("offsets_restored_mean"),
        F.max("peak_warmups").alias("peak_warmups_max"),
        F.avg("tasks_moved").alias("tasks_moved_mean"),
        F.avg("cross_rack_partitions").alias("cross_rack_mean"),
        F.avg("imbalance").alias("imbalance_mean"),
    )
    downtime_units = F.floor(F.col("downtime_mean_task_s") / DOWNTIME_RESOLUTION_S)
    order = [F.desc("settled_share"), F.asc(downtime_units), F.asc_nulls_last("settle_time_p50_s"),
             F.asc("rebalances_mean")]
    per = per.withColumn("rank", F.rank().over(Window.partitionBy("event").orderBy(*order)))
    overall = per.groupBy("config", *[f"c_{n}" for n, _ in _C]).agg(
        F.avg("rank").alias("mean_rank"),
        F.sum("runs").alias("runs"),
        F.avg("settled_share").alias("settled_share"),
        F.avg("downtime_mean_task_s").alias("downtime_mean_task_s"),
        F.avg("settle_time_p50_s").alias("settle_time_p50_s"),
        F.avg("rebalances_mean").alias("rebalances_mean"),
    )
    overall = overall.withColumn(
        "overall_rank",
        F.rank().over(Window.orderBy(F.asc("mean_rank"), F.asc(F.floor(F.col("downtime_mean_task_s") / DOWNTIME_RESOLUTION_S)),
                                     F.asc_nulls_last("settle_time_p50_s"))),
    )
    return per, overall


def convergence_curves(settle_times: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (event, config), the share of its runs settled by each time a run settled: the exact
    empirical distribution, a step at every settle time (at most one point per run; a sweep has
    at most ``pipeline.grid.MAX_RUNS``). Sampled at fixed times instead (0, 30, 60 ... s), configs that settled at
    different moments between two samples drew as one line, "a = b", while the ranking beside it
    gave them different medians (a new user's find). Every curve of an event runs on to that
    event's last settle time, so that a config whose other runs never settled ends level."""
    last: dict[str, float] = defaultdict(float)
    for row in settle_times:
        if row["times"]:
            last[row["event"]] = max(last[row["event"]], row["times"][-1])
    curves = []
    for row in settle_times:
        event, config, runs = row["event"], row["config"], row["runs"]
        points = {0.0: 0}
        for settled, time_s in enumerate(row["times"], start=1):
            points[float(time_s)] = settled
        points.setdefault(last[event], len(row["times"]))
        curves += [{"event": event, "config": config, "t": t, "share": count / runs} for t, count in sorted(points.items())]
    return curves


def report_data(runs: Any, steps: Any, per: Any, overall: Any, plan: Plan) -> dict[str, Any]:
    """The small aggregates the report draws, computed in Spark; only these reach the driver."""
    from pyspark.sql import functions as F

    ok = runs.where(F.col("error").isNull())
    settle_times = ok.groupBy("event", "config").agg(
        F.count("*").alias("runs"),
        F.sort_array(F.collect_list(F.when(F.col("settled"), F.col("settle_time_s")))).alias("times"))
    down_curves = (
        steps.join(ok.select("run_id", "event", "config"), "run_id")
        .withColumn("bucket", F.expr("cast(floor(time_s / 60) * 60 as double)"))
        .groupBy("event", "config", "bucket")
        .agg(F.avg("tasks_down").alias("tasks_down"), F.avg("imbalance").alias("imbalance"))
    )
    heat_axes = [a for a in plan.axes if a not in ("event", "start")]
    heatmaps = []
    for i, x in enumerate(heat_axes):
        for y in heat_axes[i + 1:]:
            cells = (ok.groupBy("event", x, y)
                     .agg(F.avg("downtime_task_s").alias("downtime"), F.avg("settle_time_s").alias("settle"))
                     .orderBy("event", x, y).collect())
            heatmaps.append({"x": x, "y": y, "cells": [r.asDict() for r in cells]})
            if len(heatmaps) >= 4:
                break
        if len(heatmaps) >= 4:
            break
    counts = runs.agg(
        F.count("*").alias("runs"),
        F.sum(F.col("error").isNotNull().cast("long")).alias("errors"),
        F.sum((~F.col("settled")).cast("long")).alias("unsettled"),
    ).first().asDict()
    # the commonest first, as many as the report shows: any 20 of them, unsaid, before
    error_kinds = runs.where(F.col("error").isNotNull()).groupBy("error").count()
    errors = [r.asDict() for r in error_kinds.orderBy(F.desc("count"), "error").limit(REPORTED_ERRORS).collect()]
    return {
        "name": plan.name,
        "counts": counts,
        "errors": errors,
        "error_kinds": error_kinds.count() if len(errors) == REPORTED_ERRORS else len(errors),
        "skipped": list(plan.skipped),
        "configs": [r.asDict() for r in per.orderBy("event", "rank").collect()],
        "overall": [r.asDict() for r in overall.orderBy("overall_rank").collect()],
        "curves": convergence_curves([r.asDict() for r in settle_times.orderBy("event", "config").collect()]),
        "down_curves": [r.asDict() for r in down_curves.orderBy("event", "config", "bucket").collect()],
        "heatmaps": heatmaps,
    }


def run_sweep(spark: Any, plan: Plan, out: str | Path, *, partitions: int | None = None,
              report: bool = True, show_progress: bool = True) -> dict[str, Any]:
    """Simulate every run of ``plan`` and write the tables (and the report) under ``out``."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from pipeline.output import claim_out
    from pipeline.spark import progress, read_table

    out = claim_out(out, "simulate")
    runs_full = simulate_runs(spark, plan, partitions).persist(StorageLevel.MEMORY_AND_DISK)
    label = f"simulate {len(plan.runs)} runs"
    with progress(spark, label, enabled=show_progress):
        runs = runs_full.drop("steps")
        runs.orderBy("run_id").write.mode("overwrite").parquet(str(out / "runs"))
    runs = read_table(spark, out, "runs")
    steps = runs_full.select(F.explode("steps").alias("s")).select("s.*")
    steps.orderBy("run_id", "step").write.mode("overwrite").parquet(str(out / "steps"))
    steps = read_table(spark, out, "steps")
    runs_full.unpersist()
    per, overall = config_tables(runs)
    per.orderBy("event", "rank").write.mode("overwrite").parquet(str(out / "configs"))
    overall.orderBy("overall_rank").write.mode("overwrite").parquet(str(out / "config_ranking"))
    data = report_data(runs, read_table(spark, out, "steps"), read_table(spark, out, "configs"),
                       read_table(spark, out, "config_ranking"), plan)
    if report:
        from pipeline.report import sweep_report

        write_report(out, sweep_report(data))
    else:
        write_report(out, None)
    return data



def main(argv: list[str] | None = None) -> int:
    """``spark-submit pipeline/sweep.py --grid GRID.yaml --out DIR`` (or ``python -m pipeline.sweep``)."""
    parser = argparse.ArgumentParser(prog="sweep", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grid", required=True, help="grid YAML (see examples/grid.yaml)")
    parser.add_argument("--out", required=True, help="output directory: Parquet tables and report.html")
    parser.add_argument("--master", default=None, help="Spark master (default local[2]; spark-submit's own)")
    parser.add_argument("--partitions", type=int, default=None, help="Spark partitions for the runs")
    parser.add_argument("--no-report", action="store_true", help="skip report.html")


MAX_PARTITIONS = 100_000


def argument_problem(out: str, partitions: int | None, master: str | None = None, *,
                     command: str) -> str | None:
    """``--out``, ``--partitions`` and ``--master`` checked before Spark starts: the flag and the
    problem, or None."""
    from pipeline.output import out_problem
    from pipeline.spark import master_problem

    if problem := master_problem(master):
        return problem
    if partitions is not None and not 1 <= partitions <= MAX_PARTITIONS:
        return f"--partitions: expected an integer in [1, {MAX_PARTITIONS}], got {partitions}"
    return out_problem(out, command)


def write_report(out: Path, html: str | None) -> None:
    """``report.html`` for this run's tables, or none: a report left from an earlier run in the
    same ``--out`` would describe other tables."""
    target = out / "report.html"
    if html is None:
        target.unlink(missing_ok=True)
    else:
        target.write_text(html, encoding="utf-8")


def run_from_args(args: argparse.Namespace) -> int:
    from pipeline.output import discard_out
    from pipeline.simulation import InvalidSpec
    from pipeline.spark import command_session

    try:
        plan = load_grid(args.grid)
    except InvalidSpec as error:
        print(f"simulate: invalid grid: {error}", file=sys.stderr)
        return 2
    existed = Path(args.out).exists()
    problem = argument_problem(args.out, args.partitions, args.master, command="simulate")
    if problem:
        print(f"simulate: {problem}", file=sys.stderr)
        return 2
    if not plan.runs:
        print(f"simulate: the grid expands to no runnable runs: {plan.nothing_runnable()}", file=sys.stderr)
        discard_out(args.out, existed)
        return 2
    print(f"grid {plan.name!r}: {len(plan.runs)} runs, {len(plan.skipped)} combinations skipped", file=sys.stderr)
    with command_session("simulate", args.master, f"remote-leader simulate {plan.name}", args.out, existed) as spark:
        if spark is None:
            return 2
        data = run_sweep(spark, plan, args.out, partitions=args.partitions, report=not args.no_report)
    counts = data["counts"]
    print(json.dumps({"out": str(args.out), **counts}), file=sys.stdout)
    best = data["overall"][:1]
    if best:
        print(f"best config overall: {best[0]['config']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
