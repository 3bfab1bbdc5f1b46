"""Checks a result document against a worked scenario's ``expect`` (shared/scenarios/README.md)."""

from __future__ import annotations

import math
from collections import Counter


def cross_rack_partitions(scenario: dict, output: dict) -> int:
    """Input partitions read by a client in a rack that holds no replica of them."""
    racks = {client["id"]: client.get("rack") for client in scenario["clients"]}
    partitions = {task["id"]: task.get("partitions", []) for task in scenario["tasks"]}
    count = 0
    for client_id, roles in output["clients"].items():
        for task in roles["active"] + roles["standby"] + roles["warmup"]:
            for tp in partitions[task]:
                if racks[client_id] not in tp.get("racks", []):
                    count += 1
    return count


def unmet_expectations(scenario: dict, expect: dict, output: dict) -> list[str]:
    problems = []
    clients = output["clients"]
    for client, tasks in expect.get("active_exact", {}).items():
        if clients[client]["active"] != sorted(tasks, key=_order):
            problems.append(f"active_exact {client}: {clients[client]['active']} != {tasks}")
    for key, role in (("active_count", "active"), ("standby_count", "standby")):
        for client, count in expect.get(key, {}).items():
            if len(clients[client][role]) != count:
                problems.append(f"{key} {client}: {len(clients[client][role])} != {count}")
    warmups = sum(len(roles["warmup"]) for roles in clients.values())
    if warmups < expect.get("warmup_min", 0) or warmups > expect.get("warmup_max", math.inf):
        problems.append(f"warm-ups {warmups} outside [{expect.get('warmup_min')}, {expect.get('warmup_max')}]")
    if "probing_rebalance_needed" in expect and output["probing_rebalance_needed"] != expect["probing_rebalance_needed"]:
        problems.append(f"probing_rebalance_needed {output['probing_rebalance_needed']}")
    for client, cap in expect.get("subtopology_cap", {}).items():
        per_subtopology = Counter(task.split("_")[0] for task in clients[client]["active"])
        if per_subtopology and max(per_subtopology.values()) > cap:
            problems.append(f"subtopology_cap {client}: {dict(per_subtopology)} > {cap}")
    if "cross_rack_partitions" in expect:
        crossing = cross_rack_partitions(scenario, output)
        if crossing != expect["cross_rack_partitions"]:
            problems.append(f"cross_rack_partitions {crossing} != {expect['cross_rack_partitions']}")
    return problems


def _order(task: str) -> tuple[int, int]:
    subtopology, partition = task.split("_")
    return int(subtopology), int(partition)
