"""The assignor across group shapes: 1 to 500 subtopologies, fresh / scale-out / scale-in,
0-2 standbys, with and without rack awareness, each row against an older assignor in the same run.

    PYTHONPATH=. .venv/bin/python bench/bench_shapes.py --baseline REV          # a few minutes
    PYTHONPATH=. .venv/bin/python bench/bench_shapes.py --baseline REV --full   # every combination
    PYTHONPATH=. .venv/bin/python bench/bench_shapes.py --large                 # 5,000 x 100,000
    PYTHONPATH=. .venv/bin/python bench/bench_shapes.py --baseline REV --rack   # rack-aware rows only
    PYTHONPATH=. .venv/bin/python bench/bench_shapes.py --baseline REV --settled   # groups our assignor settled
    PYTHONPATH=. .venv/bin/python bench/bench_shapes.py --baseline REV --varied    # ... whose changelog sizes vary
    PYTHONPATH=. .venv/bin/python bench/bench_shapes.py --baseline REV --few       # 3-10 clients x 50,000 tasks
    PYTHONPATH=. .venv/bin/python bench/bench_shapes.py --settled --baseline-python OTHER/bin/python
        # this assignor in another environment (other dependency versions: ortools, numpy)

Groups come from ``bench.workloads.settled_then_joined``: a settled group (round-robin actives,
caught up; standbys on the next clients, 30% lagging), then ``scale-out`` (10% of the clients are
new), ``scale-in`` (10% left), ``replace`` (10% of the clients new and 6.7% gone in the same
rebalance) or ``fresh`` (nobody ran anything). With racks, clients sit in 3
racks in turn and every task reads one partition with replicas in two of them. The issue's shape
is 200 subtopologies of 100 partitions, scale-out, 1 standby.

``--varied`` rows are settled rows whose changelog sizes vary (``bench.workloads.tasks_of``,
``within_lag_share``): 20% of the stateful tasks within the acceptable lag, the others 10^5 to
10^8 offsets, with 1 or 2 standbys.

``--settled`` rows start instead from a group this checkout's assignor settled
(``bench.workloads.settled_by_assignor``: the layout a group running remote-leader has, which
the round robin above is not), of which 10% are new (scale-out) or 10%, 2%, 1%, 0.3% or 0.1% left at random
(scale-in; the scenario column shows the share). Each group is written to a scenario file
once, and every assignor is timed on that file.

Columns: ``s`` is the median of ``--repeat`` calls of ``assign``, each in a fresh process
(imports, those the assignor defers to its first warm start included, building the domain
objects and a warm-up call excluded: a server's worker process pays them once, at start; one
BLAS thread, as the server's workers and ``python -m assignor`` run), range in brackets; ``RSS
MB`` the largest peak of those processes; ``REV s`` / ``ratio``: the same row on the assignor of
git revision REV (or, with ``--baseline-python``, this checkout's assignor run by another
interpreter: a venv with other versions of its dependencies), its calls alternating with this
code's in the same invocation (the machine's speed drifts); ``CPU s`` the CPU time of the same
calls (for ``cli`` rows, of the whole process), which the 2 shared cores' load disturbs far
less than wall time, and ``CPU ratio`` this code's median CPU time over the baseline's. ``cli``
rows time
``python -m assignor FILE`` end to end (process start, imports, JSON parsing, assignment,
output) on the scenario written as JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # bench.*, after PYTHONPATH's assignor

from bench.baseline import THIS, assignor_roots, environment, run_row  # noqa: E402

SUBTOPOLOGIES = (1, 10, 50, 200, 500)
# (kind, scenario, subtopologies, clients, tasks, standbys, racks, strategy)
DEFAULT_ROWS = [
    *(("assign", "scale-out", s, 1000, 20_000, 1, 3, "none") for s in SUBTOPOLOGIES),
    *(("assign", "scale-out", s, 500, 20_000, 1, 3, "balance_subtopology") for s in SUBTOPOLOGIES),
    ("assign", "scale-out", 200, 500, 20_000, 1, 3, "min_traffic"),
    ("assign", "fresh", 200, 500, 20_000, 1, 3, "balance_subtopology"),
    ("assign", "fresh", 200, 1000, 20_000, 1, 0, "none"),
    ("assign", "scale-in", 200, 1000, 20_000, 1, 0, "none"),
    ("assign", "scale-out", 200, 1000, 20_000, 0, 0, "none"),
    ("assign", "scale-out", 200, 1000, 20_000, 2, 0, "none"),
    *(("assign", "replace", s, 1000, 20_000, 1, 0, "none") for s in (10, 200, 500)),
    *(("cli", "scale-out", s, 1000, 20_000, 1, 3, "none") for s in (1, 200, 500)),
    *(("cli", "scale-in", s, 1000, 20_000, 1, 0, "none") for s in (1, 200, 500)),
]
FULL_ROWS = [
    ("assign", scenario, s, clients, 20_000, standbys, racks, strategy)
    for scenario, s, standbys, (clients, racks, strategy) in itertools.product(
        ("fresh", "scale-out", "scale-in"), SUBTOPOLOGIES, (0, 1, 2),
        ((1000, 0, "none"), (500, 3, "balance_subtopology"), (500, 3, "min_traffic")))
]
# scale-out as the row; scale-in (10% gone) and replace as the shapes a large group meets too
LARGE_ROWS = [("assign", scenario, s, 5000, 100_000, 1, 0, "none")
              for scenario in ("scale-out", "scale-in", "replace") for s in (1, 200, 500)]
# (..., share): groups settled by this checkout's assignor, then that share new or gone
SETTLED_ROWS = [
    *(("assign", scenario, s, 1000, 20_000, 1, 0, "none", share)
      for scenario, share in (("scale-out", 0.1), ("scale-in", 0.1), ("scale-in", 0.01))
      for s in (1, 10, 20, 50, 200, 300, 500)),
    *(("assign", "scale-in", s, 1000, 20_000, 1, 0, "none", share) for share in (0.001, 0.003)
      for s in (50, 200, 500)),
    *(("assign", "scale-in", s, 500, 20_000, 1, 3, "balance_subtopology", share) for share in (0.01, 0.02)
      for s in (50, 300)),
]

# few clients, many tasks: a new application's first instances, where every client but one or
# two holds a replica of every task (the standby dealing's swaps: docs/benchmarks.md, "Few clients")
FEW_ROWS = [
    *(("assign", "fresh", s, clients, 50_000, standbys, 0, "none")
      for clients, standbys in ((3, 1), (4, 2), (6, 3)) for s in (1, 100, 500)),
    *(("assign", "scale-out", s, 10, 50_000, 2, 0, "none") for s in (100, 500)),
]

# (..., share, within-lag share): settled groups whose changelog sizes vary, a share of them
# within the acceptable lag (hub prices that differ, as in real applications)
VARIED_ROWS = [
    *(("assign", "scale-in", s, 1000, 20_000, standbys, 0, "none", share, 0.2)
      for standbys, share, s in ((1, 0.01, 20), (1, 0.1, 300), (1, 0.1, 200), (2, 0.01, 20), (2, 0.1, 200))),
    ("assign", "scale-out", 200, 1000, 20_000, 1, 0, "none", 0.1, 0.2),
]


def _group(scenario: str, subtopologies: int, clients: int, tasks: int, standbys: int, racks: int):
    from bench.workloads import settled_then_joined

    return settled_then_joined(clients, tasks, standbys, subtopologies=subtopologies, racks=racks,
                               scenario=scenario)


def _config(standbys: int, strategy: str):
    from assignor.model import AssignmentConfig

    return AssignmentConfig(num_standby_replicas=standbys, rack_aware_strategy=strategy)


def time_assign(row: list, repeat: int) -> dict:
    """In a fresh process: ``repeat`` calls of ``assign`` on the row's group."""
    _, scenario, subtopologies, clients, tasks, standbys, racks, strategy = row
    specs, members = _group(scenario, subtopologies, clients, tasks, standbys, racks)
    return _timed_calls(specs, members, _config(standbys, strategy), repeat)


def time_assign_file(path: str, repeat: int) -> dict:
    """In a fresh process: ``repeat`` calls of ``assign`` on the scenario file's group."""
    from assignor.scenario import parse_problem_text

    with open(path, encoding="utf-8") as handle:
        problem = parse_problem_text(handle.read())
    return _timed_calls(list(problem.tasks), list(problem.clients), problem.config, repeat)


def _timed_calls(specs: list, members: list, config, repeat: int) -> dict:
    import assignor
    from assignor import assign

    assign(specs[:20], members[:3], config)  # warm the imports and the solver
    preload = getattr(assignor, "preload", None)  # the deferred imports too, as the server's workers do
    if preload is not None:
        preload()
    else:  # an older assignor: the same import, so that neither side's timed call pays it
        import scipy.sparse.csgraph  # noqa: F401
    times, cpu = [], []
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        result = assign(specs, members, config)
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return {
        "seconds": statistics.median(times), "range": [min(times), max(times)], "cpu": statistics.median(cpu),
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "warmups": sum(len(a.warmup) for a in result.clients.values()),
        "probing": result.probing_rebalance_needed,
        "cross_rack": result.rack_awareness.cross_rack_after,
    }


def write_scenario(row: list, path: str) -> None:
    from assignor.model import AssignmentProblem
    from assignor.scenario import problem_to_document
    from bench.workloads import settled_by_assignor

    _, scenario, subtopologies, clients, tasks, standbys, racks, strategy, *share = row
    if share:
        specs, members = settled_by_assignor(clients, tasks, standbys, scenario=scenario, changed_share=share[0],
                                             subtopologies=subtopologies, racks=racks,
                                             within_lag_share=share[1] if len(share) > 1 else 0.0)
    else:
        specs, members = _group(scenario, subtopologies, clients, tasks, standbys, racks)
    problem = AssignmentProblem(tuple(specs), tuple(members), _config(standbys, strategy))
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(problem_to_document(problem), handle)


def time_cli(path: str, assignor_root: str, repeat: int, python: str = sys.executable) -> dict:
    """``python -m assignor`` as an installed package runs it: its bytecode compiled once
    beforehand (as pip and scripts/bootstrap.sh do), not again in every timed process where
    PYTHONDONTWRITEBYTECODE is set; the same for this checkout and a baseline."""
    subprocess.run([python, "-m", "compileall", "-q", str(Path(assignor_root) / "assignor")], check=True,
                   stdout=subprocess.DEVNULL)
    times, cpu = [], []
    for _ in range(repeat):
        started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([python, "-m", "assignor", path], check=True, stdout=subprocess.DEVNULL,
                       env=environment(assignor_root), cwd=tempfile.gettempdir())
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(time.perf_counter() - started)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return {"seconds": statistics.median(times), "range": [min(times), max(times)], "cpu": statistics.median(cpu),
            "rss_mb": None,
            "warmups": None, "probing": None, "cross_rack": None}


def measure(row: list, root: str, repeat: int, scenario_file: str, python: str = sys.executable) -> dict:
    if row[0] == "cli":
        return time_cli(scenario_file, root, repeat, python)
    if len(row) > 8:  # a settled row: its group is in the file
        return run_row(__file__, [scenario_file, repeat], root, flag="--file-row", python=python)
    return run_row(__file__, [row, repeat], root, python=python)


def interleaved(row: list, runs: dict[str, tuple[str, str]], repeat: int, scenario_file: str) -> dict[str, dict]:
    """``repeat`` single calls per assignor, alternating (baseline, this, baseline, ...), each in a
    fresh process: the machine's speed drifts over minutes, so that both see the same drift.
    ``runs``: per name, the assignor's root and the interpreter that runs it."""
    measured_by: dict[str, list[dict]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, (root, python) in runs.items():
            measured_by[name].append(measure(row, root, 1, scenario_file, python))
    results = {}
    for name, measured in measured_by.items():
        seconds = [m["seconds"] for m in measured]
        results[name] = {**measured[-1], "seconds": statistics.median(seconds), "range": [min(seconds), max(seconds)],
                         "cpu": statistics.median(m["cpu"] for m in measured),
                         "rss_mb": None if measured[0]["rss_mb"] is None else max(m["rss_mb"] for m in measured)}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="REV", help="also run each row on the assignor of git revision REV")
    parser.add_argument("--baseline-python", metavar="PYTHON",
                        help="also run each row with this interpreter (a venv with other dependency versions) "
                             "on this checkout's assignor")
    parser.add_argument("--repeat", type=int, default=3, help="calls per row (median shown)")
    parser.add_argument("--full", action="store_true", help="every scenario x subtopologies x standbys x racks")
    parser.add_argument("--large", action="store_true", help="only the 5,000 clients x 100,000 tasks rows")
    parser.add_argument("--rack", action="store_true", help="only the rack-aware rows (of the default or --full set)")
    parser.add_argument("--settled", action="store_true",
                        help="only the rows of groups this checkout's assignor settled (scale-out, scale-in)")
    parser.add_argument("--varied", action="store_true",
                        help="only settled rows whose changelog sizes vary, 20%% within the acceptable lag")
    parser.add_argument("--few", action="store_true", help="only the rows of 3-10 clients x 50,000 tasks")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--file-row", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        row, repeat = json.loads(args.row)
        print(json.dumps(time_assign(row, repeat)))
        return 0
    if args.file_row:
        path, repeat = json.loads(args.file_row)
        print(json.dumps(time_assign_file(path, repeat)))
        return 0
    if args.baseline and args.baseline_python:
        parser.error("--baseline and --baseline-python: one at a time")
    label = args.baseline or (f"python {args.baseline_python}" if args.baseline_python else None)
    rows = LARGE_ROWS if args.large else FEW_ROWS if args.few else SETTLED_ROWS if args.settled else VARIED_ROWS if args.varied \
        else FULL_ROWS if args.full else DEFAULT_ROWS
    if args.rack:
        rows = [row for row in rows if row[7] != "none"]
    header = ["kind", "scenario", "subtopologies", "clients x tasks (standbys, racks)", "strategy", "s", "CPU s",
              "RSS MB", "warm-ups", "probing", "cross-rack"]
    if label:
        header[7:7] = [f"{label} s", f"{label} CPU s", "CPU ratio"]
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    with assignor_roots(args.baseline) as roots, tempfile.TemporaryDirectory() as scratch:
        runs = {name: (root, sys.executable) for name, root in roots.items()}
        if args.baseline_python:  # first, as a baseline revision is
            runs = {label: (roots[THIS], args.baseline_python), **runs}
        for row in rows:
            kind, scenario, subtopologies, clients, tasks, standbys, racks, strategy, *share = row
            scenario_file = str(Path(scratch) / "scenario.json")
            if kind == "cli" or share:
                write_scenario(list(row), scenario_file)
            if share:
                scenario = f"{scenario} {share[0]:.1%}".replace(".0%", "%")
                if len(share) > 1:
                    scenario += f", {share[1]:.0%} within lag"
            results = interleaved(list(row), runs, args.repeat, scenario_file)
            mine = results[THIS]
            cells = [kind, scenario, str(subtopologies), f"{clients:,} x {tasks:,} ({standbys}, {racks})", strategy,
                     f"{mine['seconds']:.2f} ({mine['range'][0]:.2f}–{mine['range'][1]:.2f})", f"{mine['cpu']:.2f}",
                     "" if mine["rss_mb"] is None else f"{mine['rss_mb']:.0f}",
                     "" if mine["warmups"] is None else str(mine["warmups"]),
                     "" if mine["probing"] is None else str(mine["probing"]),
                     "" if mine["cross_rack"] is None else f"{mine['cross_rack']:,}"]
            if label:
                base = results[label]
                cells[7:7] = [f"{base['seconds']:.2f}", f"{base['cpu']:.2f}", f"{mine['cpu'] / base['cpu']:.2f}"]
            print(" | ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
