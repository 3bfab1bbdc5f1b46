"""`remote-leader serve`'s event-loop setting: chosen by flag or environment, a bad value named,
and a real server process under uvloop that answers and drains on SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from remote_leader.v1 import group_leader_pb2 as pb
from remote_leader.v1 import group_leader_pb2_grpc as pb_grpc
from server import cli

ROOT = Path(__file__).resolve().parents[2]


def _args(**flags: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    argv = ["serve"] + [f"--{k.replace('_', '-')}={v}" for k, v in flags.items()]
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    ("flags", "environ", "expected"),
    [
        pytest.param({}, {}, "auto", id="default-auto"),
        pytest.param({}, {"REMOTE_LEADER_EVENT_LOOP": "asyncio"}, "asyncio", id="from-environment"),
        pytest.param({"event_loop": "uvloop"}, {"REMOTE_LEADER_EVENT_LOOP": "asyncio"}, "uvloop", id="flag-wins"),
    ],
)
def test_event_loop_setting(flags, environ, expected):
    assert cli.settings_from(_args(**flags), environ).event_loop == expected


def test_unknown_event_loop_names_the_flag():
    with pytest.raises(cli.SettingsError, match="^--event-loop: expected one of auto, uvloop, asyncio, got 'trio'"):
        cli.settings_from(_args(event_loop="trio"), {})


@pytest.mark.parametrize(("environ", "message"), [
    # an audit's find: a bad value from the environment was named by the flag nobody gave
    pytest.param({"REMOTE_LEADER_LIVE_PAGE": "xx"}, "^REMOTE_LEADER_LIVE_PAGE: expected one of loopback, on, off",
                 id="live-page"),
    pytest.param({"REMOTE_LEADER_EVENT_LOOP": "trio"}, "^REMOTE_LEADER_EVENT_LOOP: expected one of", id="event-loop"),
    pytest.param({"REMOTE_LEADER_MAX_GROUPS": "0"}, "^REMOTE_LEADER_MAX_GROUPS: must be >= 1", id="limit"),
])
def test_a_bad_value_from_the_environment_names_the_variable(environ, message):
    with pytest.raises(cli.SettingsError, match=message):
        cli.settings_from(_args(), environ)


def test_asyncio_choice_runs_the_standard_loop():
    assert cli._event_loop_runner("asyncio") is asyncio.run


def test_uvloop_choice_uses_uvloop_when_installed():
    uvloop = pytest.importorskip("uvloop")
    assert cli._event_loop_runner("uvloop") is uvloop.run
    assert cli._event_loop_runner("auto") is uvloop.run


async def test_serve_under_uvloop_answers_and_drains(tmp_path):
    pytest.importorskip("uvloop")
    proc = subprocess.Popen(
        [sys.executable, "-m", "remote_leader.cli", "serve", "--listen", "127.0.0.1:0", "--state-dir", str(tmp_path),
         "--metrics-port", "0", "--event-loop", "uvloop", "--log-level", "info"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stderr=subprocess.PIPE, text=True,
    )
    try:
        port = None
        for line in proc.stderr:
            event = json.loads(line)
            if event.get("event") == "server.started":
                port = event["port"]
                break
        assert port, "the server never logged server.started"
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            answer = await pb_grpc.GroupLeaderStub(channel).ListGroups(pb.ListGroupsRequest(), timeout=10)
        assert list(answer.groups) == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _real_state_db(path: Path) -> None:
    """A real SQLite state database of several pages (the layout GroupStore writes)."""
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE groups (group_id TEXT PRIMARY KEY, snapshot TEXT NOT NULL, updated_ms INTEGER NOT NULL)")
        db.executemany("INSERT INTO groups VALUES (?, ?, ?)", [(f"g{i}", json.dumps({"pad": "x" * 400}), i) for i in range(100)])
    db.close()


@pytest.mark.parametrize("kind", ["random-bytes", "truncated", "directory"])
def test_serve_refuses_an_unreadable_state_db_in_one_line_and_exits(tmp_path, kind):
    """A state.db that is not a readable SQLite database: one line naming the file, a non-zero
    exit at once (no thread left to keep the process alive), and the file untouched."""
    import hashlib

    state_dir = tmp_path / "state"
    state_dir.mkdir()
    db = state_dir / "state.db"
    if kind == "random-bytes":
        db.write_bytes(os.urandom(4096))
    elif kind == "truncated":
        _real_state_db(db)
        db.write_bytes(db.read_bytes()[:5000])
    else:
        db.mkdir()
    before = hashlib.md5(db.read_bytes()).hexdigest() if db.is_file() else None
    proc = subprocess.Popen(
        [sys.executable, "-m", "remote_leader.cli", "serve", "--listen", "127.0.0.1:0", "--state-dir", str(state_dir),
         "--metrics-port", "0", "--log-level", "warning"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        _, stderr = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("serve did not exit after failing to open state.db")
    assert proc.returncode not in (0, None), stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("remote-leader serve: --state-dir: ") and str(db) in lines[0], stderr
    assert ("not a readable SQLite database" if kind != "directory" else "is not a file") in lines[0]
    if before is not None:
        assert hashlib.md5(db.read_bytes()).hexdigest() == before
        assert sorted(p.name for p in state_dir.iterdir() if p.name.startswith("state.db")) == ["state.db"]


def _client(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "remote_leader.cli", *argv], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(("argv", "named"), [
    pytest.param(["describe", "g", "--server", ""], "--server", id="describe-server-empty"),
    pytest.param(["describe", "g", "--server", ","], "--server", id="describe-server-comma"),
    pytest.param(["groups", "--server", ""], "--server", id="groups-server-empty"),
    pytest.param(["describe", "g", "--server", "127.0.0.1:99999"], "--server", id="server-port-beyond-16-bits"),
    # a new user's find: without a port grpc dialled 443 (the sidecar refused the same text)
    pytest.param(["groups", "--server", "127.0.0.1"], "--server", id="groups-server-without-port"),
    pytest.param(["describe", "g", "--server", "127.0.0.1:50051,leader-1"], "--server", id="describe-replica-without-port"),
])
def test_client_commands_refuse_a_bad_server_in_one_line(argv, named):
    proc = _client(*argv)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], proc.stderr


@pytest.mark.parametrize(("content", "problem"), [
    pytest.param(b"", "is empty", id="empty"),
    pytest.param(b"\x00\xff\xfe binary \x80", "printable ASCII", id="binary"),
    pytest.param(b"first\nsecond\n", "printable ASCII", id="two-lines"),
])
@pytest.mark.parametrize("command", [["groups"], ["describe", "g"]])
def test_client_commands_refuse_a_bad_token_file_in_one_line(tmp_path, command, content, problem):
    token = tmp_path / "token"
    token.write_bytes(content)
    proc = _client(*command, "--server", "127.0.0.1:1", "--token-file", str(token))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--token-file" in lines[0] and problem in lines[0], proc.stderr


@pytest.mark.parametrize(("flags", "message"), [
    pytest.param({"metrics_port": 70000}, "^--metrics-port: expected a port from 0 to 65535", id="metrics-port"),
    pytest.param({"listen": "127.0.0.1:70000"}, "^--listen: expected a port from 0 to 65535", id="listen-port"),
])
def test_ports_beyond_16_bits_are_refused_not_wrapped(flags, message):
    with pytest.raises(cli.SettingsError, match=message):
        cli.settings_from(_args(**flags), {})


def test_a_single_dead_server_is_one_line_not_a_skip_and_then_the_error():
    """A new user's find: one address that does not answer printed "UNAVAILABLE: skipped" and
    then the failure itself; "skipped" is for a replica among several (test_service.py)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{closed.getsockname()[1]}"
    proc = _client("groups", "--server", dead)
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"remote-leader: {dead}: UNAVAILABLE: "), proc.stderr
