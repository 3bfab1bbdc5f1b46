"""Assignor benchmarks: assign time and peak memory, and rounds to settle.

    .venv/bin/python bench/bench_assignor.py            # everything (a few minutes)
    .venv/bin/python bench/bench_assignor.py --quick    # smaller rows only
    .venv/bin/python bench/bench_assignor.py --floor-sweep   # one instance joining 540 group shapes
    .venv/bin/python bench/bench_assignor.py --floor-sweep-wide   # 288 more: other sizes and topologies
    .venv/bin/python bench/bench_assignor.py --floor-sweep-crowded   # 72 of many clients, few replicas each
    .venv/bin/python bench/bench_assignor.py --baseline REV --repeat 3   # timing rows beside REV's

With ``--baseline REV`` each timing row also runs on the assignor of git revision ``REV``
(``bench.baseline``), interleaved with this checkout's, best of ``--repeat`` each, and prints
the ratio: the machine is noisy, so a change is judged against a baseline of the same run.

Each timing row is measured in a fresh subprocess (end to end: imports excluded, building
the domain objects excluded, one ``assign`` call included), so the peak-RSS growth is the
call's own memory. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # after a baseline's assignor on PYTHONPATH (bench.baseline)

TIMING_ROWS = [(10, 100, 1), (100, 2000, 1), (500, 10000, 1), (1000, 20000, 1), (1000, 20000, 2)]
JOIN_ROWS = [(9, 100), (19, 200), (49, 1000)]


def _rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def time_one(clients: int, tasks: int, standbys: int) -> dict:
    """Runs inside a subprocess: one assign call on a group where 10% of clients are new."""
    from assignor import assign
    from assignor.model import AssignmentConfig
    from bench.workloads import settled_then_joined

    specs, members = settled_then_joined(clients, tasks, standbys)
    config = AssignmentConfig(num_standby_replicas=standbys)
    assign(specs[:10], members[:2], config)  # warm the imports and the solver
    rss_before = _rss_kb()
    started = time.perf_counter()
    result = assign(specs, members, config)
    elapsed = time.perf_counter() - started
    return {
        "seconds": elapsed,
        "rss_growth_mb": max(0, _rss_kb() - rss_before) / 1024,
        "warmups": sum(len(a.warmup) for a in result.clients.values()),
        "probing": result.probing_rebalance_needed,
    }


def timing_table(rows, baseline: str | None = None, repeat: int = 1) -> None:
    from bench.baseline import THIS, assignor_roots, run_row

    extra = f" {baseline} assign s | ratio |" if baseline else ""
    print(f"| clients | tasks | standbys | assign s |{extra} peak RSS growth MB | warm-ups | probing |")
    print("| ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if baseline else "") + " ---: | ---: | --- |")
    with assignor_roots(baseline) as roots:
        for clients, tasks, standbys in rows:
            best: dict[str, dict] = {}
            for _ in range(repeat):
                for name, root in roots.items():
                    row = run_row(__file__, [clients, tasks, standbys], root, flag="--time-one")
                    if name not in best or row["seconds"] < best[name]["seconds"]:
                        best[name] = row
            row = best[THIS]
            cells = f"| {clients} | {tasks} | {standbys} | {row['seconds']:.2f} |"
            if baseline:
                cells += f" {best[baseline]['seconds']:.2f} | {row['seconds'] / best[baseline]['seconds']:.2f} |"
            print(f"{cells} {row['rss_growth_mb']:.0f} | {row['warmups']} | {row['probing']} |", flush=True)


def join_settled_group(old_clients: int, task_count: int, standbys: int = 1, max_warmups: int = 2,
                       subtopologies: int = 10, stateful_share: float = 0.8) -> dict:
    """One fresh instance joins a settled group; count probing rebalances and relocations."""
    from assignor.convergence import settle
    from assignor.model import AssignmentConfig, ClientState
    from bench.workloads import tasks_of

    specs = tasks_of(task_count, subtopologies=subtopologies, stateful_share=stateful_share)
    config = AssignmentConfig(num_standby_replicas=standbys, max_warmup_replicas=max_warmups)
    members = [ClientState(id=f"c{i:03d}") for i in range(old_clients)]
    _, members = settle(specs, members, config, max_rounds=10_000)
    before = {t: c.id for c in members for t in c.prev_active}
    members = members + [ClientState(id="joiner")]
    results, members = settle(specs, members, config, max_rounds=10_000)
    after = {t: c.id for c in members for t in c.prev_active}
    stateful = {s.id for s in specs if s.stateful}
    relocated = sum(1 for t in stateful if before[t] != after[t])
    joiner_actives = sum(1 for t in stateful if after[t] == "joiner")
    stateless_moved = [t for t in before if t not in stateful and before[t] != after[t]]
    joiner = next(c for c in members if c.id == "joiner")
    return {
        "joiner_stateful_replicas": sum(1 for t in (*joiner.prev_active, *joiner.prev_standby) if t in stateful),
        "moved_among_old": sum(1 for t in before if before[t] != after[t] and after[t] != "joiner"),
        "probing_rebalances": len(results) - 1,
        "relocated": relocated,
        "stateful": len(stateful),
        "joiner_stateful_actives": joiner_actives,
        "stateless_relocated": len(stateless_moved),
        "stateless_to_joiner": sum(1 for t in stateless_moved if after[t] == "joiner"),
        "settled": not results[-1].probing_rebalance_needed,
    }


def join_table() -> None:
    print("| group | tasks | probing rebalances until settled | stateful actives relocated | "
          "moved to the new instance | stateless actives relocated (to the new instance) | "
          "Kafka (measured): probing, relocated |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    kafka = {9: "66, 71 of 80", 19: "147, 141 of 160", 49: "765, 751 of 800"}
    for old, tasks in JOIN_ROWS:
        row = join_settled_group(old, tasks)
        print(f"| {old} → {old + 1} | {tasks} | {row['probing_rebalances']} | {row['relocated']} of "
              f"{row['stateful']} | {row['joiner_stateful_actives']} | {row['stateless_relocated']} "
              f"({row['stateless_to_joiner']}) | {kafka[old]} |", flush=True)


def floor_sweep(wide: bool = False, crowded: bool = False) -> None:
    """One instance joins settled groups of many shapes: does each settle in KIP-441's floor,
    ceil(newcomer's stateful replicas / max_warmup_replicas) probing rebalances, moving no active
    among the old clients? (docs/assignor.md, "Scaling out at the floor"). ``wide``: 288 shapes
    the 540 do not draw (other sizes, 5 subtopologies at 60% stateful or 25 at 90%).
    ``crowded``: 72 shapes drawn after the wide sweep's rules were written, of many clients
    with few replicas each, where a newcomer often leaves the replica ceiling where it was."""
    if wide:
        shapes = [(old, tasks, standbys, warmups, subtopologies, share) for old in (8, 10, 15, 30)
                  for tasks in (40, 75, 120, 300) for standbys in (0, 1, 2) for warmups in (1, 2, 4)
                  for subtopologies, share in ((5, 0.6), (25, 0.9))]
    elif crowded:
        shapes = [(old, tasks, standbys, warmups, subtopologies, share) for old in (25, 33, 45)
                  for tasks in (60, 110, 200) for standbys in (1, 2) for warmups in (1, 2)
                  for subtopologies, share in ((8, 0.75), (30, 0.9))]
    else:
        shapes = [(old, tasks, standbys, warmups, 10, 0.8) for old in (3, 4, 5, 6, 7, 9, 11, 13, 19, 24)
                  for tasks in (50, 60, 100, 150, 200, 400) for standbys in (0, 1, 2) for warmups in (1, 2, 3)]
    missed = []
    for old, tasks, standbys, warmups, subtopologies, share in shapes:
        row = join_settled_group(old, tasks, standbys, warmups, subtopologies, share)
        floor = math.ceil(row["joiner_stateful_replicas"] / warmups)
        if row["probing_rebalances"] != floor or row["moved_among_old"]:
            missed.append(f"{old} clients, {tasks} tasks, {standbys} standbys, {warmups} warm-ups, "
                          f"{subtopologies} subtopologies at {share:.0%} stateful: "
                          f"{row['probing_rebalances']} probing rebalances (floor {floor}), "
                          f"{row['moved_among_old']} actives moved among old clients")
    print(f"| {len(shapes)} join shapes | at the floor, nothing moved among old clients: "
          f"{len(shapes) - len(missed)} | missed: {len(missed)} |")
    for line in missed:
        print(f"  missed: {line}")


def random_scaling_rounds(scenarios: int) -> None:
    from assignor.convergence import settle, settle_bound
    from tests.assignor.test_convergence import _random_group, _scaling_event

    rounds = []
    worst_ratio = 0.0
    for seed in range(scenarios):
        rng = random.Random(seed)
        tasks, clients, config = _random_group(rng)
        _, clients = settle(tasks, clients, config, max_rounds=10_000)
        _, clients = _scaling_event(rng, clients, 0)
        bound = settle_bound(tasks, clients, config)
        results, _ = settle(tasks, clients, config, max_rounds=10_000)
        rounds.append(len(results))
        worst_ratio = max(worst_ratio, len(results) / bound)
    rounds.sort()
    p90 = rounds[math.ceil(0.9 * len(rounds)) - 1]
    print(f"| {scenarios} seeded scaling events | rounds to settle: mean {statistics.mean(rounds):.2f}, "
          f"p90 {p90}, max {rounds[-1]} | worst rounds / bound {worst_ratio:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--floor-sweep", action="store_true", help="only the join-shape sweep (a few minutes)")
    parser.add_argument("--floor-sweep-wide", action="store_true", help="only the 288 further join shapes")
    parser.add_argument("--floor-sweep-crowded", action="store_true",
                        help="only 72 join shapes of many clients with few replicas each")
    parser.add_argument("--baseline", metavar="REV", help="also time each row on the assignor of this git revision")
    parser.add_argument("--repeat", type=int, default=1, help="best of N timings per row (and per baseline row)")
    parser.add_argument("--timing-only", action="store_true", help="only the assign-time rows")
    parser.add_argument("--time-one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.time_one:
        clients, tasks, standbys = json.loads(args.time_one)
        print(json.dumps(time_one(clients, tasks, standbys)))
        return
    print(f"# assignor benchmark ({os.cpu_count()} cores, Python {sys.version.split()[0]})\n")
    if args.floor_sweep or args.floor_sweep_wide or args.floor_sweep_crowded:
        floor_sweep(wide=args.floor_sweep_wide, crowded=args.floor_sweep_crowded)
        return
    timing_table(TIMING_ROWS[:3] if args.quick else TIMING_ROWS, args.baseline, args.repeat)
    if args.timing_only:
        return
    print()
    join_table()
    print()
    random_scaling_rounds(40 if args.quick else 200)


if __name__ == "__main__":
    main()
