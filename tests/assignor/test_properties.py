"""Invariants of both assignors on random groups (house style: hypothesis for invariants)."""

from __future__ import annotations

import random
from dataclasses import replace
from types import MappingProxyType

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assignor import assign
from assignor.convergence import caught_up_clients
from tests.assignor.invariants import broken_rules
from tests.assignor.strategies import configs, groups

PROPERTY_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(group=groups(), config=configs("high_availability"))
def test_high_availability_keeps_every_rule(group, config):
    tasks, clients = group
    result = assign(tasks, clients, config)
    assert broken_rules(tasks, clients, config, result) == []


@PROPERTY_SETTINGS
@given(group=groups(), config=configs("sticky"))
def test_sticky_keeps_every_rule_and_never_probes(group, config):
    tasks, clients = group
    result = assign(tasks, clients, config)
    assert not result.probing_rebalance_needed
    assert sum(len(a.warmup) for a in result.clients.values()) == 0
    assert broken_rules(tasks, clients, config, result) == []


def _shuffled(tasks, clients, seed):
    rng = random.Random(seed)
    tasks = list(tasks)
    rng.shuffle(tasks)
    shuffled_clients = []
    for client in clients:
        lags = list(client.lags.items())
        rng.shuffle(lags)
        shuffled_clients.append(replace(client, lags=MappingProxyType(dict(lags))))
    rng.shuffle(shuffled_clients)
    return tasks, shuffled_clients


@PROPERTY_SETTINGS
@given(group=groups(max_clients=20, max_tasks=200), config=configs(), seed=st.integers(0, 2**32))
def test_same_output_for_any_input_order(group, config, seed):
    tasks, clients = group
    assert assign(*_shuffled(tasks, clients, seed), config) == assign(tasks, clients, config)


@PROPERTY_SETTINGS
@given(group=groups(max_clients=20, max_tasks=200), config=configs())
def test_settled_assignment_fed_back_is_returned_unchanged(group, config):
    """KIP-441 property 5: once no probing rebalance is needed, nothing moves any more."""
    tasks, clients = group
    result = assign(tasks, clients, config)
    for _ in range(60):
        if not result.probing_rebalance_needed:
            break
        clients = caught_up_clients(tasks, clients, result)
        result = assign(tasks, clients, config)
    assert not result.probing_rebalance_needed
    again = assign(tasks, caught_up_clients(tasks, clients, result), config)
    assert again.clients == result.clients
    assert not again.probing_rebalance_needed
