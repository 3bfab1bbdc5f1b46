"""Build one group shape and time `assign` on it (build time excluded).

usage: python bench/repro/shape.py --clients N --tasks T [options]   (prints one JSON line)
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import sys
import time
from pathlib import Path
from types import MappingProxyType

sys.path.append(str(Path(__file__).resolve().parents[2]))

from assignor import assign  # noqa: E402
from assignor.lag import Lag  # noqa: E402
from assignor.model import LATEST, AssignmentConfig, ClientState, TaskId, TaskSpec, TopicPartition  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--clients", type=int, required=True)
p.add_argument("--tasks", type=int, required=True)
p.add_argument("--subtopologies", type=int, default=10)
p.add_argument("--stateful-share", type=float, default=0.8)
p.add_argument("--standbys", type=int, default=1)
p.add_argument("--threads", default="1", help="k | mix:a,b (alternating) | rand:a-b")
p.add_argument("--lags", default="fresh",
               help="fresh | caught (every client caught up on every stateful task) | partial:F "
                    "(each client reports F of the tasks, random lags) | settled | settled-joined | "
                    "alllag (every client reports every task, all beyond acceptable lag) | "
                    "somelag:F (each client reports share F, all lagging) | fed | fed-joined | fed-left "
                    "(a fresh result fed back twice, caught up: settled by this assignor, whatever the "
                    "threads; then 10%% of members join, or 1%% leave)")
p.add_argument("--racks", type=int, default=0)
p.add_argument("--strategy", default="none")
p.add_argument("--tag-keys", type=int, default=0)
p.add_argument("--tag-values", type=int, default=3)
p.add_argument("--assignor", default="high_availability")
p.add_argument("--warmups", type=int, default=2)
p.add_argument("--acceptable", type=int, default=10_000)
p.add_argument("--changelog", type=int, default=1_000_000)
p.add_argument("--seed", type=int, default=1)
p.add_argument("--profile", default="")
p.add_argument("--repeat", type=int, default=1)
a = p.parse_args()

rng = random.Random(a.seed)
T, N = a.tasks, a.clients
per = max(1, -(-T // a.subtopologies))
stateful_subs = round(a.subtopologies * a.stateful_share) if a.subtopologies > 1 else (1 if a.stateful_share > 0 else 0)
rack_names = [f"r{i}" for i in range(a.racks)]
specs = []
for index in range(T):
    sub, part = divmod(index, per)
    stateful = sub < stateful_subs
    inputs = ()
    if a.racks:
        inputs = (TopicPartition(f"s{sub}-in", part, frozenset(rng.sample(rack_names, k=max(1, min(2, a.racks - 1))))),)
    specs.append(TaskSpec(TaskId(sub, part), stateful, a.changelog if stateful else None, inputs))
stateful_ids = [s.id for s in specs if s.stateful]


def threads_of(i: int) -> int:
    t = a.threads
    if t.startswith("mix:"):
        vals = [int(x) for x in t[4:].split(",")]
        return vals[i % len(vals)]
    if t.startswith("rand:"):
        lo, hi = (int(x) for x in t[5:].split("-"))
        return rng.randint(lo, hi)
    return int(t)


ids = [f"c{i:05d}" for i in range(N)]
tag_keys = [f"k{j}" for j in range(a.tag_keys)]


def tags_of(i: int):
    # tag values vary per key with different strides so that combinations mix
    return MappingProxyType({k: f"v{(i // (j + 1)) % a.tag_values}" for j, k in enumerate(tag_keys)})


mode = a.lags
clients: list[ClientState] = []
if mode in ("settled", "settled-joined"):
    # round-robin settled group; for settled-joined, the last 10% are new
    old = N if mode == "settled" else max(1, round(N * 0.9))
    lags = {c: {} for c in ids}
    act = {c: [] for c in ids}
    stb = {c: [] for c in ids}
    for index, spec in enumerate(specs):
        owner = ids[index % old]
        act[owner].append(spec.id)
        if not spec.stateful:
            continue
        lags[owner][spec.id] = LATEST
        for r in range(1, min(a.standbys, old - 1) + 1):
            h = ids[(index + r) % old]
            stb[h].append(spec.id)
            lags[h][spec.id] = rng.randint(20_000, 200_000) if rng.random() < 0.3 else rng.randint(0, 5_000)
    for i, c in enumerate(ids):
        clients.append(ClientState(id=c, threads=threads_of(i), rack=rack_names[i % a.racks] if a.racks else None,
                                   tags=tags_of(i), prev_active=frozenset(act[c]), prev_standby=frozenset(stb[c]),
                                   lags=MappingProxyType({t: Lag.coerce(v) if not isinstance(v, Lag) else v
                                                          for t, v in lags[c].items()})))
elif mode.startswith("fed"):
    fed_config = AssignmentConfig(num_standby_replicas=a.standbys, acceptable_recovery_lag=a.acceptable,
                                  max_warmup_replicas=a.warmups, rack_aware_strategy=a.strategy,
                                  rack_aware_assignment_tags=tuple(tag_keys), assignor=a.assignor)
    stateful_set = frozenset(stateful_ids)
    old = N if mode != "fed-joined" else max(1, round(N * 0.9))
    clients = [ClientState(id=c, threads=threads_of(i), rack=rack_names[i % a.racks] if a.racks else None,
                           tags=tags_of(i)) for i, c in enumerate(ids[:old])]
    for _ in range(3):
        prev = assign(specs, clients, fed_config)
        fed = []
        for client in clients:
            ca = prev.clients[client.id]
            lg = {t: LATEST for t in ca.active if t in stateful_set}
            for t in (*ca.standby, *ca.warmup):
                lg[t] = Lag.coerce(rng.randint(20_000, 200_000) if rng.random() < 0.3 else rng.randint(0, 5_000))
            fed.append(ClientState(id=client.id, threads=client.threads, rack=client.rack, tags=client.tags,
                                   prev_active=frozenset(ca.active), prev_standby=frozenset(ca.standby) | frozenset(ca.warmup),
                                   lags=MappingProxyType(lg)))
        clients = fed
    if mode == "fed-joined":
        clients += [ClientState(id=c, threads=threads_of(old + i), rack=rack_names[(old + i) % a.racks] if a.racks else None,
                                tags=tags_of(old + i)) for i, c in enumerate(ids[old:])]
    elif mode == "fed-left":
        gone = set(rng.sample(range(N), max(1, N // 100)))
        clients = [client for i, client in enumerate(clients) if i not in gone]
else:
    for i, c in enumerate(ids):
        lg: dict[TaskId, Lag] = {}
        if mode == "caught":
            lg = {t: Lag.coerce(rng.randint(0, a.acceptable)) for t in stateful_ids}
        elif mode == "alllag":
            lg = {t: Lag.coerce(rng.randint(a.acceptable + 1, a.changelog)) for t in stateful_ids}
        elif mode.startswith("partial:"):
            f = float(mode.split(":")[1])
            for t in stateful_ids:
                if rng.random() < f:
                    lg[t] = Lag.coerce(rng.randint(0, 3 * a.acceptable + 10))
        elif mode.startswith("somelag:"):
            f = float(mode.split(":")[1])
            for t in stateful_ids:
                if rng.random() < f:
                    lg[t] = Lag.coerce(rng.randint(a.acceptable + 1, a.changelog))
        elif mode != "fresh":
            raise SystemExit(f"unknown lags {mode}")
        clients.append(ClientState.from_report(c, lg, threads=threads_of(i),
                                               rack=rack_names[i % a.racks] if a.racks else None, tags=tags_of(i)))

config = AssignmentConfig(num_standby_replicas=a.standbys, acceptable_recovery_lag=a.acceptable,
                          max_warmup_replicas=a.warmups, rack_aware_strategy=a.strategy,
                          rack_aware_assignment_tags=tuple(tag_keys), assignor=a.assignor)
reports = sum(len(c.lags) for c in clients)
times = []
cpus = []
for _ in range(a.repeat):
    if a.profile:
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        res = assign(specs, clients, config)
        prof.disable()
        times.append(time.perf_counter() - t0)
        prof.dump_stats(a.profile)
        st = pstats.Stats(a.profile, stream=sys.stderr)
        st.sort_stats("tottime").print_stats(14)
        st.sort_stats("cumtime").print_stats(25)
    else:
        t0 = time.perf_counter()
        c0 = time.process_time()
        res = assign(specs, clients, config)
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
n_warm = sum(len(ca.warmup) for ca in res.clients.values())
print(json.dumps({"argv": " ".join(sys.argv[1:]), "s": round(min(times), 3), "cpu": round(min(cpus), 3) if cpus else None, "reports": reports,
                  "warmups": n_warm, "probing": res.probing_rebalance_needed,
                  "rack": res.rack_awareness.enabled}), flush=True)
