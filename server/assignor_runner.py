"""Where the assignor runs, so that one group's large assignment never stalls the others.

The assignor is Python work that holds the GIL for seconds on a large group (1,000 members x
20,000 tasks): in a thread of the serving process it starves the event loop, and every other
group's heartbeats wait (docs/benchmarks.md, "A large assignment beside other groups"). Large
problems therefore go to a worker process; small ones (fewer than ``min_process_tasks``
tasks, milliseconds of work) stay in a thread, where shipping them would cost more than it
saves. The pool starts with the first large problem (it costs a process start and the
assignor's imports, about a second, once) and ends with the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import copyreg
import ctypes
import ctypes.util
import dataclasses
import multiprocessing
import os
import pickle
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from types import MappingProxyType

import assignor
from assignor.model import (
    AssignmentConfig,
    AssignmentProblem,
    AssignmentResult,
    ClientState,
    TaskId,
    TaskSpec,
)


def _reduce_mapping_proxy(proxy: MappingProxyType) -> tuple:
    return _read_only, (dict(proxy),)


def _read_only(mapping: dict) -> MappingProxyType:
    return MappingProxyType(mapping)


#: Tasks, clients or reasons per pickled piece: tens of milliseconds of C pickling each.
_PIECE = 2_000


def _pieces(items: tuple) -> list[bytes]:
    return [pickle.dumps(items[i:i + _PIECE], protocol=pickle.HIGHEST_PROTOCOL) for i in range(0, len(items), _PIECE)]


def _joined(pieces: list[bytes]) -> tuple:
    return tuple(item for piece in pieces for item in pickle.loads(piece))


def _ship_problem(problem: AssignmentProblem) -> tuple[list[bytes], list[bytes], AssignmentConfig]:
    """The problem as pickled pieces. Pickling holds the GIL for a whole call (half a second for
    50,000 tasks in one): piece by piece, in a thread, the event loop runs between pieces."""
    return _pieces(problem.tasks), _pieces(problem.clients), problem.config


def _ship_result(result: AssignmentResult) -> tuple[list[bytes], list[bytes], AssignmentResult]:
    clients = tuple(result.clients.items())
    rest = dataclasses.replace(result, clients={}, reasons=())
    return _pieces(clients), _pieces(result.reasons), rest


def _land_result(shipped: tuple[list[bytes], list[bytes], AssignmentResult]) -> AssignmentResult:
    clients, reasons, rest = shipped
    return dataclasses.replace(rest, clients=dict(_joined(clients)), reasons=_joined(reasons))


def _solve_shipped(shipped: tuple[list[bytes], list[bytes], AssignmentConfig]):
    """In the worker: unpack, solve, and send the result back in pieces as well."""
    tasks, clients, config = shipped
    return _ship_result(assignor.solve(AssignmentProblem(_joined(tasks), _joined(clients), config)))


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with(parent: int) -> None:
    """End this worker when the server process ends, however it ends: after a kill -9 of the
    server, its worker (90 MB) and multiprocessing's resource tracker lived on, adopted by
    init, and finished the assignment at hand for nobody (an HA audit's find; on a VM or under
    systemd's KillMode=process they piled up with every restart). Linux's parent-death signal;
    elsewhere nothing changes."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the server died before the signal was asked for
        os._exit(1)


def _warm(parent: int) -> None:
    """Worker initializer: bound to the server's life (``_die_with``), then the assignor's
    imports, those it defers included, and the solver, before the first problem. One BLAS
    thread: the assignor does no linear algebra, and scipy's BLAS would otherwise start a thread
    per core at import, which spin for CPU that the server's other processes need."""
    _die_with(parent)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    assignor.preload()
    assignor.solve(AssignmentProblem(tasks=(), clients=()))


class AssignorRunner:
    """Runs ``assign`` off the event loop: in a worker process for large problems (when
    ``processes`` > 0 and ``assign`` is the real assignor, which a process can import), else in
    a thread."""

    def __init__(self, assign: Callable[[AssignmentProblem], AssignmentResult] = assignor.solve,
                 processes: int = 1, min_process_tasks: int = 2_000) -> None:
        self._assign = assign
        self._processes = processes if assign is assignor.solve else 0
        self._min_process_tasks = min_process_tasks
        self._pool: ProcessPoolExecutor | None = None

    async def __call__(self, problem: AssignmentProblem) -> AssignmentResult:
        if self._processes <= 0 or len(problem.tasks) < self._min_process_tasks:
            return await asyncio.to_thread(self._assign, problem)
        pool = self._current_pool()  # first: it teaches pickle the read-only mappings the problem holds
        shipped = await asyncio.to_thread(_ship_problem, problem)
        try:
            answer = await asyncio.get_running_loop().run_in_executor(pool, _solve_shipped, shipped)
        except BrokenProcessPool:
            # A worker died (killed for memory, by an operator): the pool is unusable for good, and
            # every later large assignment failed until a restart (an audit's find). A new pool,
            # and this problem once more; a second death is this problem's ASSIGNMENT_ERROR.
            if self._pool is pool:
                pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
            answer = await asyncio.get_running_loop().run_in_executor(self._current_pool(), _solve_shipped, shipped)
        return await asyncio.to_thread(_land_result, answer)

    def _current_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # Client snapshots hold read-only mappings, which pickle does not know: ship them
            # as dicts, rebuilt as read-only mappings on the other side.
            copyreg.pickle(MappingProxyType, _reduce_mapping_proxy)
            self._pool = ProcessPoolExecutor(self._processes, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_warm, initargs=(os.getpid(),))
        return self._pool

    async def warm(self) -> None:
        """Solve a two-task problem in a thread before serving: the first solve in a process
        imports the solver (about 0.2 s), which the first rebalance after every start reported
        as its compute time (an audit saw 300-600 ms for a 6-task group, later ones 3-7 ms).
        Not scipy (``assignor.preload``): the thread path's small problems never load it."""
        if self._assign is assignor.solve:
            tasks = (TaskSpec(TaskId(0, 0), True, 0), TaskSpec(TaskId(0, 1), False))
            clients = (ClientState("a"), ClientState("b"))
            await asyncio.to_thread(assignor.solve, AssignmentProblem(tasks, clients, AssignmentConfig(num_standby_replicas=1)))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
