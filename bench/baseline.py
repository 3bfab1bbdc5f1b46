"""Same-run baselines for benchmarks: run a row on this checkout's assignor or on an older one.

    with assignor_roots("617930a") as roots:     # {"617930a": <tmp dir>, "this": <repo root>}
        baseline = run_row(__file__, row, roots["617930a"])

``git archive REV assignor`` unpacks the older assignor into a temporary directory; a row then
runs in a fresh process whose ``PYTHONPATH`` puts that directory first, so ``import assignor``
finds the old code while the benchmark scripts (``bench/``) stay this checkout's. The machine
is noisy (2 shared cores, speed drifting ±30% over minutes), so figures are read as ratios
against the baseline measured just before, in the same invocation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THIS = "this"


@contextmanager
def assignor_roots(baseline: str | None) -> Iterator[dict[str, str]]:
    """The assignor roots to run rows on: ``THIS`` checkout and, given a git revision, that one."""
    with tempfile.TemporaryDirectory() as directory:
        roots = {}
        if baseline:
            archive = subprocess.run(["git", "archive", baseline, "assignor"], cwd=ROOT, capture_output=True,
                                     check=True).stdout
            subprocess.run(["tar", "-x", "-C", directory], input=archive, check=True)
            roots[baseline] = directory
        roots[THIS] = str(ROOT)
        yield roots


def environment(assignor_root: str) -> dict[str, str]:
    """A child's environment that imports ``assignor`` from ``assignor_root`` first."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHASHSEED")}
    env["PYTHONPATH"] = assignor_root
    # as `python -m assignor` and the server's workers run: scipy's BLAS threads (started when
    # a warm start loads it) would spin on the other core and count in the row's CPU time
    env["OPENBLAS_NUM_THREADS"] = "1"
    return env


def run_row(script: str, row, assignor_root: str, flag: str = "--row", python: str = sys.executable) -> dict:
    """``script FLAG <row as JSON>`` in a fresh process of ``python`` on ``assignor_root``; its last
    output line is the row's result as JSON."""
    out = subprocess.run([python, script, flag, json.dumps(row)], capture_output=True, text=True,
                         cwd=ROOT, env=environment(assignor_root), check=False)
    if out.returncode:
        raise RuntimeError(f"{Path(script).name} {flag} {json.dumps(row)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def import_bench() -> None:
    """Let a row process import ``bench.*`` from this checkout without shadowing the assignor
    its ``PYTHONPATH`` chose (the checkout goes last on ``sys.path``)."""
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
