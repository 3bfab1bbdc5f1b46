"""KIP-925 rack awareness at scale: time, memory, cross-rack partitions and optimality gap.

    PYTHONPATH=. .venv/bin/python bench/bench_rack.py [--quick] [--repeat N] [--baseline REV]

Each row runs in a fresh process (peak RSS is per row). Columns:
- ``scenario``: ``fresh`` (no previous assignment, nobody has state) or ``scale-out`` (the group
  the same strategy settled, fed back with every replica caught up, plus 5% new clients);
- ``REV assign s`` / ``ratio`` (with ``--baseline REV``): the same row on the assignor of git
  revision REV, run just before this code's, and this code's median over it (a scale-out row
  starts from the group each code settled itself);
- ``none s``: ``assign`` with rack awareness off (the baseline: target computation and placement);
- ``assign s`` / ``RSS MB``: the whole ``assign`` call with the strategy on, and the row's peak RSS;
  times are medians of ``--repeat`` calls (3) interleaved with the baseline's, range in brackets;
- ``rack s``: ``optimize_actives`` + ``optimize_standbys`` alone, on the same balanced target;
- ``cross before/after``: cross-rack partitions of the actives (RackAwareReport);
- ``gap``: solver cost of the tasks x racks graph minus that of the full tasks x clients graph
  (KIP-925's own), where the full graph has at most ``FULL_ARC_LIMIT`` arcs.

The group: 20 subtopologies, 80% stateful, each task reading
1-2 input partitions whose replicas sit in 1 or 2 of the racks, clients spread over racks in turn.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # bench.*, after PYTHONPATH's assignor

from bench.baseline import THIS, assignor_roots  # noqa: E402
from bench.baseline import run_row as run_in  # noqa: E402

ROWS = [
    # (scenario, strategy, tasks, clients, racks, standbys)
    ("fresh", "balance_subtopology", 20_000, 500, 3, 1),
    ("fresh", "min_traffic", 20_000, 500, 3, 1),
    ("scale-out", "balance_subtopology", 20_000, 500, 3, 1),
    ("scale-out", "min_traffic", 20_000, 500, 3, 1),
    ("fresh", "balance_subtopology", 5_000, 100, 3, 1),
    ("fresh", "min_traffic", 5_000, 100, 3, 1),
    ("scale-out", "balance_subtopology", 5_000, 100, 3, 1),
    ("fresh", "balance_subtopology", 1_000, 50, 3, 1),
    ("fresh", "min_traffic", 1_000, 50, 5, 2),
]
QUICK_ROWS = [row for row in ROWS if row[2] < 20_000]
FULL_ARC_LIMIT = 2_500_000


def rack_group(task_count: int, client_count: int, rack_count: int, seed: int = 7):
    from assignor.model import ClientState, TaskId, TaskSpec, TopicPartition

    rng = random.Random(seed)
    racks = [f"r{i}" for i in range(rack_count)]
    subtopologies = 20
    per = max(1, task_count // subtopologies)
    specs = []
    for index in range(task_count):
        subtopology, partition = divmod(index, per)
        inputs = []
        for topic in range(rng.choice((1, 2))):
            replicas = frozenset(rng.sample(racks, k=rng.choice((1, 2))))
            inputs.append(TopicPartition(f"s{subtopology}-in{topic}", partition, replicas))
        stateful = subtopology < subtopologies * 0.8
        specs.append(TaskSpec(TaskId(subtopology, partition), stateful, 1_000_000 if stateful else None,
                              tuple(inputs)))
    clients = [ClientState(id=f"c{i:05d}", threads=1, rack=racks[i % rack_count]) for i in range(client_count)]
    return specs, clients


def scale_out_group(specs, members, config, added: int):
    """The group ``config`` settled, fed back with every replica caught up, plus ``added`` new
    clients (racks in turn): the probing rebalance a large group pays for scaling out."""
    from assignor import assign
    from assignor.model import LATEST, ClientState

    result = assign(specs, members, config)
    stateful = {spec.id for spec in specs if spec.stateful}
    racks = sorted({m.rack for m in members})
    grown = []
    for member in members:
        mine = result.clients[member.id]
        lags = {t: LATEST for t in mine.active if t in stateful} | dict.fromkeys(mine.standby, 0)
        grown.append(ClientState(id=member.id, threads=member.threads, rack=member.rack,
                                 prev_active=frozenset(mine.active), prev_standby=frozenset(mine.standby), lags=lags))
    grown += [ClientState(id=f"n{i:05d}", threads=1, rack=racks[i % len(racks)]) for i in range(added)]
    return grown


def run_row(scenario: str, strategy: str, tasks: int, clients: int, racks: int, standbys: int,
            repeat: int = 3) -> dict:
    import numpy as np

    from assignor import assign, rack_aware
    from assignor.model import AssignmentConfig
    from assignor.rack_flow import solve_compressed, solve_full
    from assignor.ranking import rank_clients
    from assignor.target import CostModel, Group, active_target, standby_target

    specs, members = rack_group(tasks, clients, racks)
    none = AssignmentConfig(num_standby_replicas=standbys)
    config = AssignmentConfig(num_standby_replicas=standbys, rack_aware_strategy=strategy)
    added = 0
    if scenario == "scale-out":
        added = max(1, clients // 20)
        members = scale_out_group(specs, members, config, added)
    none_times, assign_times = [], []
    for _ in range(repeat):  # interleaved, so that a noisy spell hits both alike
        started = time.perf_counter()
        assign(specs, members, none)
        none_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        result = assign(specs, members, config)
        assign_times.append(time.perf_counter() - started)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    group = Group.of(specs, members)
    ranking = rank_clients(specs, members, config.acceptable_recovery_lag)
    costs = CostModel(lag_aware=True)
    target = active_target(group, ranking, costs)
    started = time.perf_counter()
    actives, report = rack_aware.optimize_actives(group, target, config, ranking)
    actives_s = time.perf_counter() - started
    standby = standby_target(group, ranking, costs, actives, standbys)
    started = time.perf_counter()
    rack_aware.optimize_standbys(group, actives, standby, config, ranking)
    rack_s = actives_s + time.perf_counter() - started

    gap = None
    if tasks * (clients + added) <= FULL_ARC_LIMIT:
        racks_list = sorted({m.rack for m in members})
        gap = 0
        for kind, kind_costs in ((group.stateful, rack_aware.stateful_costs(config)),
                                 (group.stateless, rack_aware.STATELESS_COSTS)):
            problem = rack_aware.placement_problem(group, target, config, kind, racks_list, kind_costs, ranking)
            gap += problem.cost(solve_compressed(problem)) - problem.cost(solve_full(problem))
        del np
    return {
        "scenario": scenario, "strategy": strategy, "tasks": tasks, "clients": clients, "added": added,
        "racks": racks, "standbys": standbys,
        "none_s": statistics.median(none_times), "assign_s": statistics.median(assign_times),
        "assign_range": (min(assign_times), max(assign_times)), "rss_mb": rss, "rack_s": rack_s,
        "before": result.rack_awareness.cross_rack_before, "after": result.rack_awareness.cross_rack_after,
        "check_before": report.cross_rack_before, "gap": gap,
    }


def _size(row: dict) -> str:
    added = f" + {row['added']}" if row["added"] else ""
    return f"{row['tasks']:,} x {row['clients']}{added} ({row['racks']}, {row['standbys']})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 20,000-task rows")
    parser.add_argument("--repeat", type=int, default=3, help="assign calls per strategy and row (median shown)")
    parser.add_argument("--baseline", metavar="REV",
                        help="also time each row on the assignor of git revision REV, just before this code's run")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(run_row(*json.loads(args.row))))
        return 0
    header = ["scenario", "strategy", "tasks x clients (racks, standbys)", "none s", "assign s", "RSS MB", "rack s",
              "cross before", "cross after", "gap"]
    if args.baseline:
        header[5:5] = [f"{args.baseline} assign s", "ratio"]
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    with assignor_roots(args.baseline) as roots:
        for row in QUICK_ROWS if args.quick else ROWS:
            baseline = run_in(__file__, [*row, args.repeat], roots[args.baseline]) if args.baseline else None
            r = run_in(__file__, [*row, args.repeat], roots[THIS])
            cells = [
                r["scenario"], r["strategy"], _size(r),
                f"{r['none_s']:.2f}", f"{r['assign_s']:.2f} ({r['assign_range'][0]:.2f}–{r['assign_range'][1]:.2f})",
                f"{r['rss_mb']:.0f}", f"{r['rack_s']:.2f}",
                f"{r['before']:,}", f"{r['after']:,}", "n/a (too big)" if r["gap"] is None else str(r["gap"]),
            ]
            if baseline:
                cells[5:5] = [f"{baseline['assign_s']:.2f}", f"{r['assign_s'] / baseline['assign_s']:.2f}"]
            print(" | ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
