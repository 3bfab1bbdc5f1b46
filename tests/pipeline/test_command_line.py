"""The commands as people run them, each in a process of its own: what they print and what they
leave behind."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.pipeline.records import lines, scale_out_story

ROOT = Path(__file__).resolve().parents[2]


def _environment(scratch: Path) -> dict[str, str]:
    """This checkout's code, ``scratch`` as ``$TMPDIR``, no Spark log configuration inherited."""
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": str(ROOT)}
    env.pop("SPARK_SUBMIT_OPTS", None)
    return env


def test_the_code_zip_is_removed_when_the_process_ends(tmp_path):
    """An audit's find: every simulate and analyze left a 160 KB remote-leader-code-*.zip in $TMPDIR."""
    script = ("from pipeline.spark import ship_code\n"
              "class Context:\n    def addPyFile(self, path): print(path)\n"
              "class Session:\n    sparkContext = Context()\n"
              "ship_code(Session())\n")
    run = subprocess.run([sys.executable, "-c", script], env=_environment(tmp_path), capture_output=True, text=True,
                         check=True)
    shipped = Path(run.stdout.strip())
    assert shipped.is_relative_to(tmp_path) and not shipped.exists()
    assert [p.name for p in tmp_path.iterdir()] == []


def test_a_failing_analyze_says_one_line_and_leaves_nothing_behind(tmp_path):
    """A truncated .gz, the whole command: Spark's start-up notes and its Java stacks came on
    stderr with our line, the code zip stayed in $TMPDIR, an empty --out stayed."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rebalances.jsonl").write_text(lines(scale_out_story()))
    whole = gzip.compress(lines(scale_out_story() * 20).encode())
    (logs / "rebalances.jsonl.1.gz").write_bytes(whole[: len(whole) // 2])
    scratch, out = tmp_path / "tmp", tmp_path / "out"
    scratch.mkdir()
    run = subprocess.run([sys.executable, "-m", "pipeline.cli", "analyze", str(logs), "--out", str(out),
                          "--master", "local[1]"], env=_environment(scratch), capture_output=True, text=True,
                         timeout=240)
    # the one line the JVM itself prints for Spark's --add-modules, before any of Spark's code runs
    said = [line for line in run.stderr.splitlines() if line != "WARNING: Using incubator modules: jdk.incubator.vector"]
    # and the progress line a log gets every ~10 s of a slow job (pipeline.spark.progress): on a
    # loaded machine the job outlasts it, and that line is ours, not Spark's noise
    said = [line for line in said if not re.fullmatch(r"measure rebalance log \(2 files\): \d+/\d+ Spark tasks, +[\d.]+ s", line)]
    assert run.returncode == 2 and run.stdout == "", run
    assert len(said) == 3 and said[1].startswith("measure rebalance log (2 files): ") and said[1].endswith(" stopped")
    assert [said[0], said[2]] == ["analyze: 2 log files", f"analyze: LOGS: {logs / 'rebalances.jsonl.1.gz'}: could not "
                                                          "be read (EOFException: Unexpected end of input stream)"], said
    assert not out.exists()
    assert [p.name for p in scratch.iterdir() if p.name.startswith("remote-leader")] == []


def test_a_simulate_stopped_by_ctrl_c_or_sigterm_says_one_line_and_leaves_no_scratch(tmp_path):
    """A new user's find: Ctrl-C printed py4j's 99-line traceback, and SIGTERM skipped the
    scratch folder's removal (``$TMPDIR/remote-leader-spark-*`` stayed). Either signal now ends
    the command at once with one line, the signal's exit status, and nothing left in $TMPDIR."""
    import signal
    import time

    grid = tmp_path / "grid.yaml"
    grid.write_text((ROOT / "examples" / "grid.yaml").read_text())
    for number, name in ((signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")):
        scratch, out = tmp_path / f"tmp-{name}", tmp_path / f"out-{name}"
        scratch.mkdir()
        command = subprocess.Popen([sys.executable, "-m", "remote_leader.cli", "simulate", "--grid", str(grid), "--out",
                                    str(out), "--master", "local[1]"], env=_environment(scratch), cwd=ROOT,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 180
        said = []
        while time.monotonic() < deadline:  # Spark is up and working: its progress line is out
            line = command.stderr.readline()
            said.append(line)
            if "Spark tasks" in line or not line:
                break
        command.send_signal(number)
        _, rest = command.communicate(timeout=60)
        assert command.returncode == 128 + number, (said, rest)
        lines_after = [line for line in rest.splitlines() if "Spark tasks" not in line]
        assert lines_after == [f"simulate: stopped by {name}; what {out} holds is incomplete"], rest
        assert list(scratch.iterdir()) == []
