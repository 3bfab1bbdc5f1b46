"""Pipeline benchmark: simulated what-if runs of 50 clients x 500 tasks on Spark.

    /work/venv/bin/python bench/bench_pipeline.py            # 1,000 runs on local[2], then 1 vs 2 cores
    /work/venv/bin/python bench/bench_pipeline.py --runs 200 --speedup-runs 100

Three measurements in one process, printed as one table:
1. plain Python, one process, no Spark: the baseline cost of a run (a sample of the runs);
2. the full sweep (``run_sweep``: simulate, write Parquet, rank, report) of ``--runs`` runs on
   ``local[2]``: runs per minute, against the 5-minute target for 1,000 runs;
3. the simulation stage alone on ``local[1]`` and then ``local[2]`` over the same
   ``--speedup-runs`` runs: the speed-up from one to two cores, next to what the machine gives
   at that moment to bare CPU-bound Python in 1 vs 2 processes (``multiprocessing``), measured
   in the same run: on a shared machine the second core may not be free.

The grid: 50 clients on 3 racks, 5 subtopologies x 100 partitions (60% stateful), 1 standby,
standbys 0-50k offsets behind; events scale_out:5, scale_in:5, lose_rack, rolling_restart:5
(five members restarted one by one); configs max_warmup_replicas 1, 2, 4, 8, 16 x early probe
on/off; repetitions fill up to ``--runs``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.grid import Plan, expand_grid  # noqa: E402
from pipeline.simulation import run_rows  # noqa: E402

EVENTS = ["scale_out:5", "scale_in:5", "lose_rack", "rolling_restart:5"]
WARMUPS = [1, 2, 4, 8, 16]
EARLY = [True, False]


def grid(runs: int) -> Plan:
    per_rep = len(EVENTS) * len(WARMUPS) * len(EARLY)
    plan = expand_grid({
        "name": "bench-50x500",
        "repetitions": max(1, -(-runs // per_rep)),
        "group": {"clients": 50, "racks": 3, "subtopologies": 5, "partitions": 100, "stateful_share": 0.6,
                  "standbys": 1, "changelog_offsets": 1_000_000, "lag": "uniform:0:50000",
                  "restore_rate": 10_000, "append_rate": 100},
        "events": EVENTS,
        "configs": {"max_warmup_replicas": WARMUPS, "early_probe": EARLY},
    })
    # Repetition-major, so that any prefix holds every event and config (the grid's own order
    # within a repetition keeps the configs of one group together).
    ordered = sorted(plan.runs, key=lambda r: r.point["rep"])
    return Plan(plan.name, tuple(ordered[:runs]), plan.skipped, plan.axes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--speedup-runs", type=int, default=200)
    parser.add_argument("--baseline-runs", type=int, default=40)
    parser.add_argument("--partitions", type=int, default=None)
    parser.add_argument("--skip-full", action="store_true", help="only the baseline and the 1 vs 2 cores part")
    args = parser.parse_args(argv)

    from pipeline.spark import spark_session
    from pipeline.sweep import run_sweep, simulate_runs

    rows: list[tuple[str, int, float]] = []
    plan = grid(args.runs)
    sample = grid(args.baseline_runs)
    started = time.perf_counter()
    for spec in sample.runs:
        run_rows(spec)
    rows.append(("plain Python, 1 process (baseline)", len(sample.runs), time.perf_counter() - started))
    print(f"baseline: {len(sample.runs)} runs in {rows[-1][2]:.1f} s", file=sys.stderr)

    full = None
    if not args.skip_full:
        with tempfile.TemporaryDirectory() as out:
            spark = spark_session("local[2]", app_name="bench-pipeline")
            try:
                started = time.perf_counter()
                data = run_sweep(spark, plan, out, partitions=args.partitions)
                full = time.perf_counter() - started
                rows.append(("full sweep on local[2] (simulate, Parquet, rank, report)", len(plan.runs), full))
                unsettled, errors = data["counts"]["unsettled"], data["counts"]["errors"]
            finally:
                spark.stop()

    machine = _machine_speedup()

    speed = grid(args.speedup_runs)
    stage: dict[str, float] = {}
    for master in ("local[1]", "local[2]"):
        spark = spark_session(master, app_name=f"bench-pipeline-{master}")
        try:
            partitions = args.partitions or 16
            started = time.perf_counter()
            simulate_runs(spark, speed, partitions).write.format("noop").mode("overwrite").save()
            stage[master] = time.perf_counter() - started
            rows.append((f"simulation stage on {master}", len(speed.runs), stage[master]))
        finally:
            spark.stop()

    print()
    print(f"| measurement | runs | seconds | runs/min |  (cpus: {os.cpu_count()}, load: {os.getloadavg()[0]:.1f})")
    print("| --- | ---: | ---: | ---: |")
    for name, count, seconds in rows:
        print(f"| {name} | {count:,} | {seconds:,.1f} | {60 * count / seconds:,.0f} |")
    print()
    if full is not None:
        print(f"full sweep: {len(plan.runs):,} runs in {full:,.1f} s "
              f"({'within' if full <= 300 else 'OVER'} the 5-minute target for 1,000 runs"
              f"{'' if len(plan.runs) == 1000 else ', scaled: ' + format(full * 1000 / len(plan.runs), ',.0f') + ' s per 1,000'}); "
              f"{unsettled} unsettled, {errors} errors")
    print(f"speed-up local[1] -> local[2]: {stage['local[1]'] / stage['local[2]']:.2f}x; "
          f"bare Python 1 -> 2 processes on this machine now: {machine:.2f}x "
          f"(plain-Python baseline {60 * rows[0][1] / rows[0][2]:,.0f} runs/min)")
    return 0


def _burn(_: int) -> int:
    total = 0
    for i in range(4_000_000):
        total += i
    return total


def _machine_speedup() -> float:
    """How much a second process speeds up CPU-bound Python here, now (the ceiling for Spark)."""
    import multiprocessing

    took = {}
    for processes in (1, 2):
        with multiprocessing.Pool(processes) as pool:
            pool.map(_burn, range(processes))
            started = time.perf_counter()
            pool.map(_burn, range(8), chunksize=1)
            took[processes] = time.perf_counter() - started
    return took[1] / took[2]


if __name__ == "__main__":
    sys.exit(main())
