"""Shapes the other benches never drew, each against an older assignor in the same run.

    PYTHONPATH=. .venv/bin/python bench/bench_odd_shapes.py --baseline REV   # a few minutes

A sweep of some 150 shapes (twenty-third session, docs/benchmarks.md "Shapes no bench had
drawn") found these out of proportion with their size; the rows keep them measured:
subtopologies of one partition each, a few clients with racks and two standbys, client tags
of two or three keys. Groups are built here (``odd_group``, seeded); ``lags`` is ``fresh``
(nobody has state) or ``settled-joined`` (round-robin actives caught up, standbys on the next
clients, 30% of them lagging, the last 10% of the clients new). Columns: ``s`` one call of
``assign`` in a fresh process (building the group excluded), ``CPU s`` its CPU time, ``RSS
MB`` the process's peak; ``REV s`` the same row on the assignor of git revision REV, run just
before it.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import time
from pathlib import Path
from types import MappingProxyType

sys.path.append(str(Path(__file__).resolve().parent.parent))  # bench.*, after PYTHONPATH's assignor

from bench.baseline import THIS, assignor_roots, run_row  # noqa: E402

# (name, clients, tasks, subtopologies, standbys, lags, racks, strategy, tag keys, tag values)
ROWS = [
    ("one-partition subtopologies", 1000, 5_000, 5_000, 1, "fresh", 0, "none", 0, 0),
    ("one-partition subtopologies", 1000, 10_000, 10_000, 1, "fresh", 0, "none", 0, 0),
    ("one-partition subtopologies", 1000, 20_000, 20_000, 1, "fresh", 0, "none", 0, 0),
    ("two-partition subtopologies", 1000, 20_000, 10_000, 1, "fresh", 0, "none", 0, 0),
    ("two-partition subtopologies", 1000, 20_000, 10_000, 1, "settled-joined", 0, "none", 0, 0),
    ("racks, few clients", 10, 10_000, 200, 2, "fresh", 5, "min_traffic", 0, 0),
    ("racks, few clients", 10, 20_000, 200, 2, "settled-joined", 3, "balance_subtopology", 0, 0),
    ("racks, 2 standbys", 100, 20_000, 200, 2, "settled-joined", 3, "balance_subtopology", 0, 0),
    ("tags", 500, 20_000, 200, 2, "fresh", 0, "none", 2, 20),
    ("tags", 500, 20_000, 200, 2, "fresh", 0, "none", 3, 5),
    ("tags", 500, 20_000, 200, 2, "fresh", 0, "none", 3, 50),
    ("tags", 500, 20_000, 200, 1, "fresh", 0, "none", 3, 5),
]


def odd_group(clients: int, tasks: int, subtopologies: int, standbys: int, lags: str, racks: int, strategy: str,
              tag_keys: int, tag_values: int, seed: int = 1):
    """A group of ``tasks`` over ``subtopologies`` (80% of them stateful, changelogs of 10^6
    offsets), ``clients`` of one thread; with ``racks``, clients in racks in turn and each
    task reading one partition replicated in two racks; with ``tag_keys``, each client's
    value of key j is ``(client // (j + 1)) % tag_values`` (keys whose values mix)."""
    from assignor.model import AssignmentConfig, ClientState, TaskId, TaskSpec, TopicPartition
    from bench.workloads import round_robin_history

    rng = random.Random(seed)
    per = max(1, -(-tasks // subtopologies))
    stateful_subtopologies = round(subtopologies * 0.8) if subtopologies > 1 else 1
    rack_names = [f"r{i}" for i in range(racks)]
    specs = []
    for index in range(tasks):
        subtopology, partition = divmod(index, per)
        stateful = subtopology < stateful_subtopologies
        inputs = (TopicPartition(f"s{subtopology}-in", partition,
                                 frozenset(rng.sample(rack_names, k=max(1, min(2, racks - 1))))),) if racks else ()
        specs.append(TaskSpec(TaskId(subtopology, partition), stateful, 1_000_000 if stateful else None, inputs))
    ids = [f"c{i:05d}" for i in range(clients)]
    keys = [f"k{j}" for j in range(tag_keys)]
    old = 0 if lags == "fresh" else max(1, round(clients * 0.9))
    active, standby, reported = round_robin_history(specs, ids, old, standbys, rng)
    members = [
        ClientState(id=c, rack=rack_names[i % racks] if racks else None,
                    tags=MappingProxyType({k: f"v{(i // (j + 1)) % tag_values}" for j, k in enumerate(keys)}),
                    prev_active=frozenset(active[c]), prev_standby=frozenset(standby[c]),
                    lags=MappingProxyType(reported[c]))
        for i, c in enumerate(ids)
    ]
    config = AssignmentConfig(num_standby_replicas=standbys, rack_aware_strategy=strategy,
                              rack_aware_assignment_tags=tuple(keys))
    return specs, members, config


def time_row(row: list) -> dict:
    from assignor import assign

    specs, members, config = odd_group(*row[1:])
    started, started_cpu = time.perf_counter(), time.process_time()
    result = assign(specs, members, config)
    seconds, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    return {"seconds": seconds, "cpu": cpu, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "standbys": sum(len(a.standby) for a in result.clients.values())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", metavar="REV", help="also run each row on the assignor of git revision REV")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(time_row(json.loads(args.row))))
        return 0
    header = ["shape", "clients x tasks (subtopologies)", "standbys", "lags", "racks / tags", "s", "CPU s", "RSS MB"]
    if args.baseline:
        header += [f"{args.baseline} s", f"{args.baseline} RSS MB", "CPU ratio"]
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    with assignor_roots(args.baseline) as roots:
        for row in ROWS:
            name, clients, tasks, subtopologies, standbys, lags, racks, strategy, keys, values = row
            base = run_row(__file__, list(row), roots[args.baseline]) if args.baseline else None
            mine = run_row(__file__, list(row), roots[THIS])
            where = f"{racks} racks, {strategy}" if racks else f"{keys} keys x {values} values" if keys else "-"
            cells = [name, f"{clients:,} x {tasks:,} ({subtopologies:,})", str(standbys), lags, where,
                     f"{mine['seconds']:.2f}", f"{mine['cpu']:.2f}", f"{mine['rss_mb']:.0f}"]
            if base:
                cells += [f"{base['seconds']:.2f}", f"{base['rss_mb']:.0f}", f"{mine['cpu'] / base['cpu']:.2f}"]
            print(" | ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
