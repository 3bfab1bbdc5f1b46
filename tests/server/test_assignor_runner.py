"""Large assignments run in a worker process (server/assignor_runner.py), with the same result."""

from __future__ import annotations

import asyncio
import os
import signal
from types import MappingProxyType

import assignor
from assignor.model import LATEST, AssignmentConfig, AssignmentProblem, ClientState, TaskId, TaskSpec
from server.assignor_runner import AssignorRunner


def _problem() -> AssignmentProblem:
    tasks = tuple(TaskSpec(TaskId(s, p), stateful=s < 2, changelog_offsets=1_000 if s < 2 else None)
                  for s in range(3) for p in range(4))
    clients = (
        ClientState("a", prev_active=frozenset(t.id for t in tasks[:6]),
                    lags=MappingProxyType({t.id: LATEST for t in tasks[:6] if t.stateful}),
                    tags=MappingProxyType({"zone": "z1"})),
        ClientState("b", prev_active=frozenset(t.id for t in tasks[6:]), tags=MappingProxyType({"zone": "z2"})),
        ClientState("c"),
    )
    return AssignmentProblem(tasks, clients, AssignmentConfig(num_standby_replicas=1))


def test_a_large_problem_runs_in_a_worker_process_with_the_same_result():
    problem = _problem()
    runner = AssignorRunner(processes=1, min_process_tasks=len(problem.tasks))
    try:
        result = asyncio.run(runner(problem))
        assert runner._pool is not None  # it went to the pool, not a thread
    finally:
        runner.close()
    assert result == assignor.solve(problem)


def test_a_worker_process_that_died_is_replaced_and_the_problem_solved():
    """A protocol audit's find: once its worker was killed (out of memory, an operator), the
    pool was broken for good and every later large assignment of every group failed until the
    server restarted. The runner starts a new pool and solves the problem there."""
    problem = _problem()
    runner = AssignorRunner(processes=1, min_process_tasks=len(problem.tasks))

    async def kill_then_solve() -> tuple:
        first = await runner(problem)
        broken = runner._pool
        for process in list(broken._processes.values()):
            os.kill(process.pid, signal.SIGKILL)
            process.join(10)
        again = await runner(problem)
        return first, again, broken

    try:
        first, again, broken = asyncio.run(kill_then_solve())
        assert runner._pool is not None and runner._pool is not broken
    finally:
        runner.close()
    assert first == again == assignor.solve(problem)


def test_small_problems_and_injected_assignors_stay_in_a_thread():
    problem = _problem()
    calls = []

    def fake(p):
        calls.append(p)
        return assignor.solve(p)

    for runner in (AssignorRunner(processes=1, min_process_tasks=len(problem.tasks) + 1),
                   AssignorRunner(fake, processes=1, min_process_tasks=1)):
        asyncio.run(runner(problem))
        assert runner._pool is None
        runner.close()
    assert calls == [problem]


def test_a_problem_of_many_pieces_crosses_to_the_worker_and_back_unchanged():
    """Problems and results travel in pickled pieces (the GIL is released between them): a
    problem of several pieces solves as it does in this process."""
    tasks = tuple(TaskSpec(TaskId(s, p), stateful=s % 2 == 0, changelog_offsets=10_000 if s % 2 == 0 else None)
                  for s in range(9) for p in range(500))
    clients = tuple(
        ClientState(f"c{i:02d}", prev_active=frozenset(t.id for t in tasks[i::30] if not t.stateful),
                    lags=MappingProxyType({t.id: 50 * i for t in tasks[i::15] if t.stateful}))
        for i in range(30)
    )
    problem = AssignmentProblem(tasks, clients, AssignmentConfig(num_standby_replicas=1))
    runner = AssignorRunner(processes=1, min_process_tasks=1)
    try:
        result = asyncio.run(runner(problem))
        assert runner._pool is not None
    finally:
        runner.close()
    assert result == assignor.solve(problem)


_SERVER_STAND_IN = """
import asyncio, sys, time
from tests.server.test_assignor_runner import _problem
from server.assignor_runner import AssignorRunner
problem = _problem()
runner = AssignorRunner(processes=1, min_process_tasks=len(problem.tasks))
asyncio.run(runner(problem))
print(*runner._pool._processes, flush=True)
time.sleep(600)
"""


def test_a_worker_process_ends_with_a_server_killed_outright():
    """An HA audit's find: after a kill -9 of a replica, its assignor worker (90 MB) lived on,
    adopted by init, and so did multiprocessing's resource tracker; they piled up with every
    restart where nothing else reaps them (a VM, systemd's KillMode=process)."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    server = subprocess.Popen([sys.executable, "-c", _SERVER_STAND_IN], cwd=root, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(root)})
    try:
        (worker,) = map(int, server.stdout.readline().split())
        os.kill(worker, 0)  # alive
        server.kill()
        server.wait(10)
        for _ in range(100):
            if not Path(f"/proc/{worker}").exists() or "Z" in Path(f"/proc/{worker}/stat").read_text().split()[2]:
                break
            time.sleep(0.1)
        else:
            os.kill(worker, signal.SIGKILL)
            raise AssertionError(f"worker {worker} outlived its server")
    finally:
        server.kill()
