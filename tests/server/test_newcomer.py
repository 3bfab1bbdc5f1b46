"""A new user's first minutes: a busy port is one clear line and an exit, signals end the server
on uvloop, every flag says what it does, empty answers read as sentences, pipes close quietly,
and the demo against someone else's server says what it needs and leaves nothing behind."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote_leader.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
CLI = [sys.executable, "-m", "remote_leader.cli"]


@pytest.fixture
def busy_port():
    """A port some other program listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _serve(tmp_path: Path, *flags: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "serve", "--state-dir", str(tmp_path / "state"), "--log-level", "warning", *flags],
                            cwd=ROOT, env=ENV, stderr=subprocess.PIPE, text=True, **popen)


@pytest.mark.parametrize(
    ("which", "expected"),
    [
        pytest.param("grpc", "cannot listen on 127.0.0.1:{port} (--listen)", id="grpc-port"),
        pytest.param("metrics", "cannot listen on 127.0.0.1:{port} (--metrics-port)", id="metrics-port"),
    ],
)
def test_a_busy_port_exits_at_once_with_one_line_naming_it(tmp_path, busy_port, which, expected):
    flags = (["--listen", f"127.0.0.1:{busy_port}", "--metrics-port", "0"] if which == "grpc"
             else ["--listen", "127.0.0.1:0", "--metrics-port", str(busy_port)])
    started = time.monotonic()
    proc = _serve(tmp_path, *flags)
    try:
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert time.monotonic() - started < 15
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"remote-leader serve: {expected.format(port=busy_port)}"), stderr
    assert "Traceback" not in stderr


def _started_port(proc: subprocess.Popen) -> int:
    for line in proc.stderr:
        if line.startswith("{") and json.loads(line).get("event") == "server.started":
            return json.loads(line)["port"]
    raise AssertionError("the server never logged server.started")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_serve_on_uvloop_ends_on_a_signal(tmp_path, sig):
    pytest.importorskip("uvloop")
    proc = _serve(tmp_path, "--listen", "127.0.0.1:0", "--metrics-port", "0", "--event-loop", "uvloop",
                  "--log-level", "info", "--drain-timeout-s", "1")
    try:
        _started_port(proc)
        proc.send_signal(sig)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def _flags(parser: argparse.ArgumentParser, path: str = "remote-leader"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _flags(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_flag_of_every_command_says_what_it_does():
    flags = list(_flags(build_parser(None)))
    commands = {path for path, _ in flags}
    assert {"remote-leader serve", "remote-leader sidecar", "remote-leader assign", "remote-leader demo",
            "remote-leader describe", "remote-leader groups"} <= commands
    unexplained = [f"{path} {'/'.join(a.option_strings) or a.dest}" for path, a in flags
                   if not a.help or a.help.startswith("(") or a.help == argparse.SUPPRESS]
    assert unexplained == []


@pytest.mark.parametrize(("flag", "values"), [("--log-format", "json"), ("--event-loop", "uvloop"),
                                              ("--log-level", "warning")])
def test_serve_help_lists_allowed_values(flag, values):
    proc = subprocess.run([*CLI, "serve", "--help"], cwd=ROOT, env=dict(ENV, COLUMNS="200"), capture_output=True,
                          text=True, timeout=60)
    line = next(line for line in proc.stdout.splitlines() if line.strip().startswith(flag))
    assert values in line


def test_assignor_help_points_to_the_scenario_format_in_the_project():
    proc = subprocess.run([sys.executable, "-m", "assignor", "--help"], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=60)
    assert "docs/scenario-format.md" in proc.stdout
    assert (ROOT / "docs" / "scenario-format.md").is_file()
    assert "shared/spec" not in proc.stdout


@pytest.fixture
def default_server(tmp_path):
    """``remote-leader serve`` with its defaults (but a free port and no metrics)."""
    proc = _serve(tmp_path, "--listen", "127.0.0.1:0", "--metrics-port", "0", "--log-level", "info",
                  "--drain-timeout-s", "1")
    try:
        yield f"127.0.0.1:{_started_port(proc)}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_groups_on_a_server_without_groups_prints_a_sentence(default_server):
    """The sentence for people on standard error; the JSON on standard output, as for any
    answer (an operator audit: `groups | jq` broke on an empty server)."""
    proc = subprocess.run([*CLI, "groups", "--server", default_server], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stderr.strip()) == (0, f"no groups on {default_server}")
    assert json.loads(proc.stdout)["groups"] == []


def test_describe_into_a_closed_pipe_exits_quietly(default_server):
    proc = subprocess.Popen([*CLI, "describe", "nobody", "--server", default_server], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # like `| head` that has read all it wanted, before anything was written
    _, stderr = proc.communicate(timeout=60)
    assert b"Traceback" not in stderr and b"BrokenPipe" not in stderr


async def test_demo_against_a_default_server_says_which_flags_it_needs_and_leaves_no_group(tmp_path, capsys):
    from client.demo import DemoOptions, needed_flags, run
    from server.app import LeaderServer, Settings

    server = LeaderServer(Settings(listen="127.0.0.1:0", state_dir=tmp_path, metrics_port=0, log_level="warning",
                                   drain_timeout_s=1.0))
    await server.start()
    try:
        started = time.monotonic()
        code = await run(DemoOptions(server=f"127.0.0.1:{server.port}", timeout_s=40))
        elapsed = time.monotonic() - started
        groups = server.coordinator.list_groups()
    finally:
        await server.stop(0)
    out = capsys.readouterr().out
    assert code == 1
    assert elapsed < 15, "the demo must not wait for its timeout when the server refused its members"
    assert "INVALID_SESSION_TIMEOUT" in out and f"remote-leader serve {needed_flags()}" in " ".join(out.split())
    assert groups == []
