"""Inclusive wall time of selected assignor functions on one shape (low overhead: few wrappers).

usage: python bench/repro/parts.py SHAPE-ARGS...   (the arguments of bench/repro/shape.py)
"""
import runpy
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))
import assignor.flow as flow  # noqa: E402
import assignor.high_availability as ha  # noqa: E402
import assignor.target as target  # noqa: E402

spent = defaultdict(float)
calls = defaultdict(int)


def wrap(owner, name, label=None):
    fn = getattr(owner, name)
    label = label or f"{getattr(owner, '__name__', owner)}.{name}"

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[label] += time.perf_counter() - t0
            calls[label] += 1
    setattr(owner, name, timed)


T = target
for owner, names in [
    (T._SubtopologyHubs, ["close", "realize", "receivers", "__init__"]),
    (T._StandbyFlow, ["solve", "standbys", "deal", "plant_trees", "add_classes", "__init__", "by_active"]),
    (T._TaskClasses, ["build", "decode", "add"]),
    (T._Hub, ["deal"]),
    (T, ["_deal_greedily", "_trade_hub_units", "_tree_pools", "active_target", "standby_target", "_deal_hub_units",
         "_capped_active_target", "_relaxed_active_target", "_hub_standbys_fit", "_settle_leavers", "chain_prone",
         "_active_ways", "standby_ways"]),
    (flow.FlowGraph, ["solve"]),
    (ha, ["_place_stateful"]),
]:
    for n in names:
        if hasattr(owner, n):
            wrap(owner, n, f"{owner.__name__}.{n}")
sys.argv = ["shape.py", *sys.argv[1:]]
runpy.run_path(str(Path(__file__).resolve().parent / "shape.py"), run_name="__main__")
for label, s in sorted(spent.items(), key=lambda kv: -kv[1]):
    print(f"{s:8.3f} {calls[label]:7d}  {label}", file=sys.stderr)
