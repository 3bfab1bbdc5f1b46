"""Differential check: a digest of the whole AssignmentResult per random group.

usage: PYTHONPATH=<tree> python bench/repro/diff_lags.py START COUNT [--large]
Run it on two trees and diff the outputs. Groups vary clients (2-1,000), subtopologies
(1-500), standbys (0-3), threads (equal, mixed, random, 1 and 64), lags (fresh, settled by
feeding a result back, a member joining or leaving it, partial random lags, some 'latest'),
racks with balance_subtopology or min_traffic, changelog sizes.
"""
from __future__ import annotations

import hashlib
import random
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))

from assignor import assign  # noqa: E402
from assignor.lag import UNKNOWN, Lag  # noqa: E402
from assignor.model import LATEST, AssignmentConfig, ClientState, TaskId, TaskSpec, TopicPartition  # noqa: E402


def digest(result) -> str:
    parts = [repr(sorted((cid, tuple(sorted(ca.active)), tuple(sorted(ca.standby)), tuple(sorted(ca.warmup)))
                         for cid, ca in result.clients.items())),
             repr((result.probing_rebalance_needed, result.followup_rebalance_ms)),
             repr(sorted(map(repr, result.reasons))), repr(result.rack_awareness)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def threads_for(rng: random.Random, n: int) -> list[int]:
    kind = rng.choice(["equal", "equal", "mix", "rand", "mix64"])
    if kind == "equal":
        k = rng.choice([1, 1, 2, 4])
        return [k] * n
    if kind == "mix":
        a, b = rng.sample([1, 2, 3, 4, 8], 2)
        return [a if i % 2 else b for i in range(n)]
    if kind == "mix64":
        return [1 if i % 2 else 64 for i in range(n)]
    return [rng.randint(1, 8) for _ in range(n)]


def build(index: int, large: bool):
    rng = random.Random(index * 7919 + (1 if large else 0))
    if large:
        n = rng.choice([100, 500, 1000])
        subs = rng.choice([5, 10, 50, 200])
        tasks_total = rng.choice([5000, 10000, 20000])
    else:
        n = int(round(2 ** rng.uniform(1, 10)))
        n = max(2, min(1000, n))
        subs = int(round(2 ** rng.uniform(0, 9)))
        subs = max(1, min(500, subs))
        tasks_total = rng.randint(max(subs, n // 2), max(subs, min(4000, 20 * n)))
    per = max(1, tasks_total // subs)
    stateful_share = rng.choice([0.0, 0.5, 0.8, 1.0])
    changelog_mode = rng.choice(["fixed", "fixed", "varied", "none"])
    racks = rng.choice([0, 0, 0, 2, 3])
    rack_names = [f"r{i}" for i in range(racks)]
    specs = []
    for sub in range(subs):
        stateful = rng.random() < stateful_share
        for part in range(per):
            if changelog_mode == "fixed":
                cl = 1_000_000
            elif changelog_mode == "varied":
                cl = rng.choice([0, 5_000, 50_000, 1_000_000])
            else:
                cl = None
            inputs = ()
            if racks:
                inputs = (TopicPartition(f"s{sub}-in", part, frozenset(rng.sample(rack_names, k=max(1, min(2, racks - 1))))),)
            specs.append(TaskSpec(TaskId(sub, part), stateful, cl if stateful else None, inputs))
    stateful_ids = [s.id for s in specs if s.stateful]
    ids = [f"c{i:05d}" for i in range(n)]
    threads = threads_for(rng, n)
    standbys = rng.randint(0, 3)
    strategy = "none"
    if racks:
        strategy = rng.choice(["balance_subtopology", "min_traffic"])
    acceptable = rng.choice([0, 10_000, 10_000, 100_000])
    config = AssignmentConfig(num_standby_replicas=standbys, acceptable_recovery_lag=acceptable,
                              max_warmup_replicas=rng.choice([1, 2, 5, 100]), rack_aware_strategy=strategy)
    mode = rng.choice(["fresh", "partial", "partial", "latest", "settled", "settled", "settled-join",
                       "settled-leave"])

    def lag_value(r: random.Random):
        x = r.random()
        if x < 0.1:
            return UNKNOWN
        if x < 0.2:
            return LATEST
        return Lag.behind(r.randint(0, 3 * max(1, acceptable) + 10))

    def rack_of(i):
        return rack_names[i % racks] if racks else None

    clients = []
    if mode in ("fresh", "partial", "latest"):
        share = rng.choice([0.002, 0.01, 0.05, 0.2, 0.6]) if mode != "fresh" else 0
        for i, c in enumerate(ids):
            lg = {}
            if share:
                for t in stateful_ids:
                    if rng.random() < share:
                        lg[t] = lag_value(rng) if mode == "latest" else Lag.behind(rng.randint(0, 3 * max(1, acceptable) + 10))
            clients.append(ClientState.from_report(c, lg, threads=threads[i], rack=rack_of(i)))
        return specs, clients, config, mode
    # settled: feed a result back
    first = [ClientState.from_report(c, {}, threads=threads[i], rack=rack_of(i)) for i, c in enumerate(ids)]
    prev = assign(specs, first, config)
    rounds = rng.choice([0, 1, 2])
    for _ in range(rounds + 1):
        nxt = []
        for i, c in enumerate(ids):
            ca = prev.clients[c]
            lg = {}
            for t in ca.active:
                if t in stateful_ids_set(stateful_ids):
                    lg[t] = LATEST
            for t in (*ca.standby, *ca.warmup):
                lg[t] = Lag.behind(rng.randint(0, 5_000) if rng.random() < 0.7 else rng.randint(20_000, 200_000))
            nxt.append(ClientState(id=c, threads=threads[i], rack=rack_of(i), prev_active=frozenset(ca.active),
                                   prev_standby=frozenset(ca.standby) | frozenset(ca.warmup), lags=lg))
        clients = nxt
        prev = assign(specs, clients, config)
    if mode == "settled-join":
        extra = max(1, n // 10) if rng.random() < 0.5 else 1
        for j in range(extra):
            i = n + j
            clients.append(ClientState(id=f"c{i:05d}", threads=rng.choice(threads), rack=rack_of(i)))
    elif mode == "settled-leave" and len(clients) > 2:
        gone = max(1, len(clients) // rng.choice([10, 100, 1000]))
        for _ in range(min(gone, len(clients) - 1)):
            clients.pop(rng.randrange(len(clients)))
    return specs, clients, config, mode


_SETS: dict[int, frozenset] = {}


def stateful_ids_set(ids):
    key = id(ids)
    s = _SETS.get(key)
    if s is None:
        s = _SETS[key] = frozenset(ids)
    return s


def main() -> None:
    start, count = int(sys.argv[1]), int(sys.argv[2])
    large = "--large" in sys.argv
    for index in range(start, start + count):
        _SETS.clear()
        specs, clients, config, mode = build(index, large)
        t0 = time.perf_counter()
        result = assign(specs, clients, config)
        spent = time.perf_counter() - t0
        print(f"{index} {digest(result)} {mode} n={len(clients)} tasks={len(specs)} sb={config.num_standby_replicas} "
              f"threads={len(set(c.threads for c in clients))} rack={config.rack_aware_strategy}", flush=True)
        print(f"# {index} {spent:.3f}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
