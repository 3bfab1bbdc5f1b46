"""`remote-leader serve`'s event-loop setting: chosen by flag or environment, a bad value named,
and a real server process under uvloop that answers and drains on SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
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
