"""Hand-built rebalance-log records in the documented format (docs/interfaces.md).

Written by hand, not by the code under test, so the analytics' counts can be checked against
numbers a person can verify from these tables.
"""

from __future__ import annotations

import json
from typing import Any

STATEFUL = ["0_0", "0_1", "0_2", "0_3"]


def record(group: str, generation: int, time_ms: int, trigger: str, clients: list[dict[str, Any]],
           output: dict[str, dict[str, list[str]]], probing: bool, **extra: Any) -> dict[str, Any]:
    """One log line: ``clients`` are the input members, ``output`` maps client -> roles."""
    return {
        "schema": 1,
        "group_id": group,
        "generation": generation,
        "time_ms": time_ms,
        "compute_ms": 1.5,
        "trigger": trigger,
        "input": {
            "version": 1,
            "config": {"num_standby_replicas": 0, "acceptable_recovery_lag": 100},
            "tasks": [{"id": t, "stateful": True, "changelog_offsets": 10_000,
                       "partitions": [{"topic": "orders", "partition": i, "racks": ["r1"]}]}
                      for i, t in enumerate(STATEFUL)],
            "clients": clients,
        },
        "output": {
            "version": 1,
            "clients": {c: {"active": r.get("active", []), "standby": r.get("standby", []),
                            "warmup": r.get("warmup", [])} for c, r in output.items()},
            "probing_rebalance_needed": probing,
            "followup_rebalance_ms": 600_000 if probing else None,
            "future_field": "readers must ignore it",
        },
        **extra,
    }


def client(cid: str, rack: str, active: list[str] = (), standby: list[str] = (), lags: dict | None = None):
    return {"id": cid, "threads": 1, "rack": rack, "prev_active": list(active), "prev_standby": list(standby),
            "lags": lags or {}}


def lines(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


T0 = 1_763_763_000_000


def scale_out_story() -> list[dict[str, Any]]:
    """Group "orders": a scales out to a+b (b warms up two tasks), then settles on an early probe.

    gen 1 (t0)       member_joined   a runs all 4; b joins empty; b warms 0_2, 0_3; probing
    gen 2 (t0+60s)   early_probe     b caught up on 0_2, 0_3: they move to b (2 moved); settled
    gen 3 (t0+3600s) member_left     b leaves: a takes 0_2, 0_3 back (its lag 5000 > 100: restoring)
    """
    all4 = {t: "latest" for t in STATEFUL}
    return [
        record("orders", 1, T0, "member_joined",
               [client("a", "r1", active=STATEFUL, lags=all4), client("b", "r2")],
               {"a": {"active": STATEFUL}, "b": {"warmup": ["0_2", "0_3"]}}, probing=True),
        record("orders", 2, T0 + 60_000, "early_probe",
               [client("a", "r1", active=STATEFUL, lags=all4),
                client("b", "r2", standby=["0_2", "0_3"], lags={"0_2": 50, "0_3": 20})],
               {"a": {"active": ["0_0", "0_1"]}, "b": {"active": ["0_2", "0_3"]}}, probing=False),
        record("orders", 3, T0 + 3_600_000, "member_left",
               [client("a", "r1", active=["0_0", "0_1"],
                       lags={"0_0": "latest", "0_1": "latest", "0_2": 5000, "0_3": 5000})],
               {"a": {"active": STATEFUL}}, probing=False),
    ]


def other_group() -> list[dict[str, Any]]:
    """Group "clicks": two settled rebalances, nothing moves (the first from a rotated file)."""
    two = [client("x", "r1", active=["0_0", "0_1"], lags={"0_0": "latest", "0_1": "latest"}),
           client("y", "r1", active=["0_2", "0_3"], lags={"0_2": "latest", "0_3": "latest"})]
    out = {"x": {"active": ["0_0", "0_1"]}, "y": {"active": ["0_2", "0_3"]}}
    return [record("clicks", 4, T0 + 10_000, "config_changed", two, out, probing=False),
            record("clicks", 5, T0 + 20_000, "topology_changed", two, out, probing=False)]
