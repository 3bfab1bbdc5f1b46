"""KIP-708 after a member joins: how many standbys end beside their active's tag value.

    PYTHONPATH=. .venv/bin/python bench/bench_tags.py [--groups N] [--baseline REV]

Random small tagged groups (2-9 clients, each in one of 2-3 zones; 1-4 subtopologies of 2-10
stateful tasks; 1 standby; ``max_warmup_replicas`` 1 or 2), settled by the assignor (each
result fed back with every replica caught up, ``assignor.convergence.settle``), then joined by
one client in a random zone and settled again. Columns: ``co-located`` standbys sharing their
active's zone at the end, summed over the groups; ``fresh`` the same for a fresh assignment of
the final clients (no state); ``worse than fresh`` groups that end with more than that; the
probing ``rounds`` the joins took. With ``--baseline REV`` the assignor of git revision REV
runs the same groups in its own process.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from types import MappingProxyType

sys.path.append(str(Path(__file__).resolve().parent.parent))  # bench.*, after PYTHONPATH's assignor

from bench.baseline import THIS, assignor_roots, run_row  # noqa: E402


def _group(seed: int):
    from assignor.model import AssignmentConfig, ClientState, TaskId, TaskSpec

    rng = random.Random(seed)
    zones = [f"z{i}" for i in range(rng.choice([2, 3]))]
    tasks = [TaskSpec(TaskId(s, p), True, 100_000) for s in range(rng.randint(1, 4)) for p in range(rng.randint(2, 10))]
    clients = [ClientState(f"c{i}", tags=MappingProxyType({"zone": rng.choice(zones)})) for i in range(rng.randint(2, 8))]
    config = AssignmentConfig(num_standby_replicas=1, acceptable_recovery_lag=100, max_warmup_replicas=rng.choice([1, 2]),
                              rack_aware_assignment_tags=("zone",))
    newcomer = ClientState(f"c{len(clients)}", tags=MappingProxyType({"zone": rng.choice(zones)}))
    return tasks, clients, config, newcomer


def _co_located(clients, result) -> int:
    zone = {c.id: c.tags["zone"] for c in clients}
    active = {task: client for client, roles in result.clients.items() for task in roles.active}
    return sum(zone[client] == zone[active[task]] for client, roles in result.clients.items() for task in roles.standby)


def measure(groups: int) -> dict:
    from assignor import assign
    from assignor.convergence import settle

    totals = {"co-located": 0, "fresh": 0, "worse than fresh": 0, "rounds": 0}
    for seed in range(groups):
        tasks, clients, config, newcomer = _group(seed)
        _, clients = settle(tasks, clients, config, max_rounds=40)
        results, clients = settle(tasks, [*clients, newcomer], config, max_rounds=40)
        fresh = [type(c)(c.id, c.threads, tags=c.tags) for c in clients]
        ended, anew = _co_located(clients, results[-1]), _co_located(fresh, assign(tasks, fresh, config))
        totals["co-located"] += ended
        totals["fresh"] += anew
        totals["worse than fresh"] += ended > anew
        totals["rounds"] += len(results) - 1
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=150)
    parser.add_argument("--baseline", metavar="REV", help="also run the groups on the assignor of git revision REV")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(measure(json.loads(args.row))))
        return 0
    columns = ["co-located", "fresh", "worse than fresh", "rounds"]
    print("assignor | groups | " + " | ".join(columns))
    print("--- | --- | " + " | ".join("---" for _ in columns))
    with assignor_roots(args.baseline) as roots:
        for name, root in roots.items():
            row = run_row(__file__, args.groups, root)
            label = "this checkout" if name == THIS else name
            print(f"{label} | {args.groups} | " + " | ".join(str(row[c]) for c in columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
