"""Digest of the full AssignmentResult of many random groups, for comparing two assignors.

usage: PYTHONPATH=ROOT python bench/repro/diff_subs.py --groups 300 [--seed 1] [--start 0] [--large]
Prints one line per group: index, shape, digest. Run under two roots and diff the outputs.
Groups vary: 1-3 standbys (0 on some), 2-1,000 clients, 1-20,000 subtopologies of 1-4
partitions, fresh / settled (a previous result fed back with lags) / partial lags, racks with
balance_subtopology or min_traffic on some, unequal threads on some.
"""
from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from pathlib import Path
from types import MappingProxyType

sys.path.append(str(Path(__file__).resolve().parents[2]))

from assignor import assign  # noqa: E402
from assignor.lag import Lag  # noqa: E402
from assignor.model import LATEST, AssignmentConfig, ClientState, TaskId, TaskSpec, TopicPartition  # noqa: E402


def digest(result) -> str:
    h = hashlib.sha256()
    for cid in sorted(result.clients):
        ca = result.clients[cid]
        h.update(repr((cid, ca.active, ca.standby, ca.warmup)).encode())
    h.update(repr((result.probing_rebalance_needed, result.followup_rebalance_ms)).encode())
    h.update(repr(sorted(result.reasons, key=repr)).encode())
    h.update(repr(result.reasons).encode())
    h.update(repr(result.rack_awareness).encode())
    return h.hexdigest()[:16]


def build(rng: random.Random, clients: int, subs: int, parts: int, racks: int, threads: str):
    rack_names = [f"r{i}" for i in range(racks)]
    stateful_share = rng.choice([1.0, 0.8, 0.5])
    changelog = rng.choice([1_000_000, 1_000_000, 5_000, None])
    specs = []
    for sub in range(subs):
        stateful = rng.random() < stateful_share
        p = parts if rng.random() < 0.8 else rng.randint(1, 4)
        for part in range(p):
            inputs = ()
            if racks:
                inputs = (TopicPartition(f"s{sub}-in", part, frozenset(rng.sample(rack_names, k=max(1, min(2, racks - 1))))),)
            specs.append(TaskSpec(TaskId(sub, part), stateful, changelog if stateful else None, inputs))
    ids = [f"c{i:05d}" for i in range(clients)]

    def thread_of(i):
        if threads == "one":
            return 1
        if threads == "mix":
            return (1, 2, 4)[i % 3]
        return rng.randint(1, 8)
    thr = {c: thread_of(i) for i, c in enumerate(ids)}
    rack = {c: (rack_names[i % racks] if racks else None) for i, c in enumerate(ids)}
    return specs, ids, thr, rack


def fresh_clients(ids, thr, rack, lags=None):
    return [ClientState.from_report(c, (lags or {}).get(c, {}), threads=thr[c], rack=rack[c]) for c in ids]


def partial_lags(rng, specs, ids, share):
    stateful = [s.id for s in specs if s.stateful]
    out = {}
    for c in ids:
        lg = {}
        for t in stateful:
            if rng.random() < share:
                lg[t] = Lag.coerce(rng.randint(0, 40_000))
        out[c] = lg
    return out


def settled_from(rng, result, specs, ids, thr, rack, leave: float, join: float):
    """Feed ``result`` back: actives LATEST, standbys/warm-ups with lags; some leave, some join."""
    stateful = {s.id for s in specs if s.stateful}
    old = list(result.clients)
    gone = set(rng.sample(old, k=int(len(old) * leave))) if leave else set()
    if len(gone) >= len(old):
        gone = set()
    out = []
    for c in ids:
        if c in gone:
            continue
        ca = result.clients.get(c)
        lags = {}
        act, stb = frozenset(), frozenset()
        if ca is not None:
            act = frozenset(ca.active)
            stb = frozenset(ca.standby)
            for t in ca.active:
                if t in stateful:
                    lags[t] = LATEST
            for t in (*ca.standby, *ca.warmup):
                lags[t] = Lag.coerce(rng.randint(20_000, 200_000) if rng.random() < 0.3 else rng.randint(0, 5_000))
        out.append(ClientState(id=c, threads=thr[c], rack=rack[c], prev_active=act, prev_standby=stb,
                               lags=MappingProxyType(lags)))
    extra = int(len(ids) * join)
    for k in range(extra):
        c = f"n{k:05d}"
        out.append(ClientState(id=c, threads=thr[ids[k % len(ids)]], rack=rack[ids[k % len(ids)]]))
    return out


def random_group(index: int, seed: int):
    rng = random.Random(seed * 1_000_003 + index)
    kind = rng.random()
    if kind < 0.06:  # very many subtopologies, few partitions
        clients = rng.choice([10, 30, 100, 300])
        subs = rng.choice([5000, 10000, 20000])
        parts = rng.choice([1, 1, 2])
        while subs * parts > 20000 or (clients >= 300 and subs * parts > 5000):
            subs //= 2
    elif kind < 0.35:  # many subtopologies, funnels
        clients = rng.choice([20, 50, 100, 200, 400])
        subs = rng.choice([200, 500, 1000, 2000])
        parts = rng.randint(1, 4)
        while subs * parts > 4000:
            subs //= 2
    elif kind < 0.55:  # many clients
        clients = rng.choice([300, 600, 1000])
        subs = rng.choice([50, 200, 1000])
        parts = rng.randint(1, 3)
        while subs * parts > 3000:
            subs //= 2
    else:  # small
        clients = rng.randint(2, 40)
        subs = rng.randint(1, 60)
        parts = rng.randint(1, 4)
    standbys = rng.choice([0, 1, 1, 1, 2, 2, 3])
    racks = rng.choice([0, 0, 0, 3, 5])
    strategy = rng.choice(["balance_subtopology", "min_traffic"]) if racks else "none"
    threads = rng.choice(["one", "one", "mix", "rand"])
    lags = rng.choice(["fresh", "settled", "settled", "partial", "settled-leave", "settled-join"])
    assignor_kind = "sticky" if rng.random() < 0.1 else "high_availability"
    return dict(clients=clients, subs=subs, parts=parts, standbys=standbys, racks=racks, strategy=strategy,
                threads=threads, lags=lags, assignor=assignor_kind, seed=seed * 1_000_003 + index)


LARGE = [
    dict(clients=1000, subs=20000, parts=1, standbys=1, racks=0, strategy="none", threads="one", lags="fresh"),
    dict(clients=1000, subs=10000, parts=2, standbys=1, racks=0, strategy="none", threads="one", lags="fresh"),
    dict(clients=1000, subs=5000, parts=4, standbys=1, racks=0, strategy="none", threads="one", lags="fresh"),
    dict(clients=1000, subs=2000, parts=4, standbys=2, racks=0, strategy="none", threads="one", lags="fresh"),
    dict(clients=1000, subs=10000, parts=2, standbys=1, racks=0, strategy="none", threads="one", lags="settled-join"),
    dict(clients=1000, subs=20000, parts=1, standbys=0, racks=0, strategy="none", threads="one", lags="fresh"),
    dict(clients=1000, subs=20000, parts=1, standbys=2, racks=0, strategy="none", threads="one", lags="fresh"),
    dict(clients=500, subs=5000, parts=2, standbys=1, racks=3, strategy="balance_subtopology", threads="mix",
         lags="settled-leave"),
]


def run(spec: dict):
    rng = random.Random(spec.get("seed", 7))
    specs, ids, thr, rack = build(rng, spec["clients"], spec["subs"], spec["parts"], spec["racks"], spec["threads"])
    config = AssignmentConfig(num_standby_replicas=spec["standbys"], rack_aware_strategy=spec["strategy"],
                              assignor=spec.get("assignor", "high_availability"))
    lags = spec["lags"]
    if lags == "partial":
        members = fresh_clients(ids, thr, rack, partial_lags(rng, specs, ids, rng.choice([0.05, 0.3])))
        return assign(specs, members, config)
    first = assign(specs, fresh_clients(ids, thr, rack), config)
    if lags == "fresh":
        return first
    leave = 0.1 if lags == "settled-leave" else 0.0
    join = 0.1 if lags == "settled-join" else 0.0
    members = settled_from(rng, first, specs, ids, thr, rack, leave, join)
    second = assign(specs, members, config)
    if lags == "settled":  # one more round: the previous result's warm-ups caught up
        members = settled_from(rng, second, specs, ids, thr, rack, 0.0, 0.0)
        return digest(second) + digest(assign(specs, members, config))
    return second


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--groups", type=int, default=300)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--large", action="store_true")
    a = p.parse_args()
    todo = [(f"L{i}", s) for i, s in enumerate(LARGE)] if a.large else \
        [(str(i), random_group(i, a.seed)) for i in range(a.start, a.start + a.groups)]
    for name, spec in todo:
        t0 = time.perf_counter()
        out = run(spec)
        d = out if isinstance(out, str) else digest(out)
        shape = ",".join(f"{k}={v}" for k, v in spec.items() if k != "seed")
        print(f"{name} {shape} {d}", flush=True)
        print(f"{name} {time.perf_counter() - t0:.2f}s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
