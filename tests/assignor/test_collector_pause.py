"""``assign`` pauses the cyclic garbage collector only for its own duration (a speed measure)."""

from __future__ import annotations

import gc
import threading

import pytest

import assignor
from assignor import high_availability
from assignor.model import AssignmentConfig, AssignorKind, ClientState, TaskId, TaskSpec

TASKS = [TaskSpec(TaskId(0, p), True, 1000) for p in range(4)] + [TaskSpec(TaskId(1, 0), False)]
CLIENTS = [ClientState(id="a", threads=1), ClientState(id="b", threads=2)]


@pytest.fixture
def collector():
    was = gc.isenabled()
    yield
    gc.enable() if was else gc.disable()


@pytest.mark.parametrize("kind", [pytest.param(AssignorKind.HIGH_AVAILABILITY, id="high-availability"),
                                  pytest.param(AssignorKind.STICKY, id="sticky")])
@pytest.mark.parametrize("enabled", [pytest.param(True, id="caller-enabled"),
                                     pytest.param(False, id="caller-disabled")])
def test_collector_state_is_the_callers_again_after_assign(collector, kind, enabled):
    gc.enable() if enabled else gc.disable()
    result = assignor.assign(TASKS, CLIENTS, AssignmentConfig(assignor=kind, num_standby_replicas=1))
    assert gc.isenabled() is enabled
    assert set(result.active_owner()) == {spec.id for spec in TASKS}


def test_collector_is_off_during_assign_and_back_after_an_error(collector, monkeypatch):
    gc.enable()
    during = []

    def failing(tasks, clients, config, *options):
        during.append(gc.isenabled())
        raise RuntimeError("boom")

    monkeypatch.setattr(high_availability, "assign", failing)
    with pytest.raises(RuntimeError, match="boom"):
        assignor.assign(TASKS, CLIENTS, AssignmentConfig())
    assert during == [False]
    assert gc.isenabled()


def test_overlapping_calls_resume_the_collector_only_after_the_last(collector, monkeypatch):
    gc.enable()
    inside, release, states = threading.Event(), threading.Event(), []

    def slow(tasks, clients, config, *options):
        inside.set()
        release.wait(timeout=10)

    def quick(tasks, clients, config, *options):
        states.append(gc.isenabled())

    monkeypatch.setattr(high_availability, "assign", slow)
    worker = threading.Thread(target=assignor.assign, args=(TASKS, CLIENTS, AssignmentConfig()))
    worker.start()
    assert inside.wait(timeout=10)
    monkeypatch.setattr(high_availability, "assign", quick)
    assignor.assign(TASKS, CLIENTS, AssignmentConfig())
    states.append(gc.isenabled())  # the first call still runs: still paused
    release.set()
    worker.join(timeout=10)
    assert states == [False, False]
    assert gc.isenabled()
