"""What "balanced" means (KIP-441 "Defining balance", made precise in scenario.md "Balance").

Load is tasks per thread. A set of counts is balanced within ``balance_factor`` b when for
every pair of clients s, d with load(s) > load(d), moving b tasks from s to d would not leave
s at or above d: (n_s - b) / t_s < (n_d + b) / t_d. With equal threads this is "most minus
fewest <= b". Quotas are the per-client windows the assignor fills to get there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


def is_balanced(counts: Mapping[str, int], threads: Mapping[str, int], balance_factor: int) -> bool:
    """The pairwise rule of scenario.md "Balance", checked in O(n) on its extreme pair.

    (n_s - b)/t_s < (n_d + b)/t_d must hold for every s, d; it suffices to check the client
    with the largest (n - b)/t against the one with the smallest (n + b)/t, unless they are
    the same client (then the rule never compares a client with itself: check the runners-up).
    """
    if len(counts) < 2:
        return True
    b = balance_factor
    # Loads scaled by the threads' least common multiple: integers, exact as fractions, and
    # much cheaper to build and sort (a thousand Fractions took 6 ms per check).
    scale = math.lcm(*{threads[c] for c in counts})
    per_thread = {c: scale // threads[c] for c in counts}
    high = sorted((((counts[c] - b) * per_thread[c], c) for c in counts), reverse=True)
    low = sorted(((counts[c] + b) * per_thread[c], c) for c in counts)
    for hi_value, hi_client in high[:2]:
        for lo_value, lo_client in low[:2]:
            if hi_client == lo_client:
                continue
            load_s = counts[hi_client] * per_thread[hi_client]
            load_d = counts[lo_client] * per_thread[lo_client]
            if load_s > load_d and not hi_value < lo_value:
                return False
    return True


def replicas_balanced(counts: Mapping[str, int], threads: Mapping[str, int], balance_factor: int) -> bool:
    """scenario.md's stateful balance (actives plus standbys of stateful tasks): a rule only
    when every client runs as many threads."""
    return len(set(threads.values())) > 1 or is_balanced(counts, threads, balance_factor)


def imbalance(counts: Mapping[str, int], threads: Mapping[str, int]) -> float:
    """Spread of load, max minus min tasks per thread: a metric for reports, not a rule."""
    if not counts:
        return 0.0
    loads = [counts[c] / threads[c] for c in counts]
    return max(loads) - min(loads)


@dataclass(frozen=True, slots=True)
class Quota:
    """How many items a client should get: at least ``floor``, at most ``ceiling``."""

    floor: int
    ceiling: int


def quotas(total: int, threads: Mapping[str, int], *, limit: int | None = None) -> dict[str, Quota]:
    """Per-client windows [floor(share), ceil(share)] of ``total`` items by thread share.

    Any counts inside these windows are balanced with balance_factor 1 (scenario.md):
    (n_s - 1)/t_s <= total/T < (n_d + 1)/t_d. ``limit`` caps every client (a client can hold
    at most one replica of each task), which can only matter when there are few tasks.
    """
    capacity = sum(threads.values())
    by_threads: dict[int, Quota] = {}  # clients of equal threads share one (most groups: one for all)
    result = {}
    for client, t in threads.items():
        quota = by_threads.get(t)
        if quota is None:
            floor, rest = divmod(total * t, capacity) if capacity else (0, 0)
            ceiling = floor + (rest != 0)
            if limit is not None:
                floor, ceiling = min(floor, limit), min(ceiling, limit)
            quota = by_threads[t] = Quota(floor, ceiling)
        result[client] = quota
    return result
