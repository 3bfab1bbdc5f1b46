"""``remote-leader serve | describe GROUP | groups``: registered into ``remote_leader.cli``.

``serve`` reads every setting from its flag or, when the flag is absent, from the environment
variable beside it (docs/interfaces.md, "Server settings"). ``describe`` and ``groups`` are
small gRPC clients of a running server that print JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from dataclasses import fields
from pathlib import Path
from typing import Any

_BOOL_TRUE = {"1", "true", "yes", "on"}
_BOOL_FALSE = {"0", "false", "no", "off"}

# flag -> (settings field, environment variable, type)
_SETTINGS: list[tuple[str, str, str, type]] = [
    ("--listen", "listen", "REMOTE_LEADER_LISTEN", str),
    ("--state-dir", "state_dir", "REMOTE_LEADER_STATE_DIR", Path),
    ("--metrics-port", "metrics_port", "REMOTE_LEADER_METRICS_PORT", int),
    ("--min-session-timeout-ms", "min_session_timeout_ms", "REMOTE_LEADER_MIN_SESSION_TIMEOUT_MS", int),
    ("--max-session-timeout-ms", "max_session_timeout_ms", "REMOTE_LEADER_MAX_SESSION_TIMEOUT_MS", int),
    ("--initial-rebalance-delay-ms", "initial_rebalance_delay_ms", "REMOTE_LEADER_INITIAL_REBALANCE_DELAY_MS", int),
    ("--min-probe-interval-ms", "min_probe_interval_ms", "REMOTE_LEADER_MIN_PROBE_INTERVAL_MS", int),
    ("--drain-timeout-s", "drain_timeout_s", "REMOTE_LEADER_DRAIN_TIMEOUT_S", float),
    ("--max-pending-requests", "max_pending_requests", "REMOTE_LEADER_MAX_PENDING_REQUESTS", int),
    ("--rebalance-log-max-bytes", "rebalance_log_max_bytes", "REMOTE_LEADER_REBALANCE_LOG_MAX_BYTES", int),
    ("--rebalance-log-backups", "rebalance_log_backups", "REMOTE_LEADER_REBALANCE_LOG_BACKUPS", int),
    ("--tls-cert", "tls_cert", "REMOTE_LEADER_TLS_CERT", Path),
    ("--tls-key", "tls_key", "REMOTE_LEADER_TLS_KEY", Path),
    ("--log-level", "log_level", "REMOTE_LEADER_LOG_LEVEL", str),
    ("--log-format", "log_format", "REMOTE_LEADER_LOG_FORMAT", str),
    ("--event-loop", "event_loop", "REMOTE_LEADER_EVENT_LOOP", str),
    *(
        (f"--{name.replace('_', '-')}", name, f"REMOTE_LEADER_{name.upper()}", int)
        for name in (
            "max_message_bytes", "max_partitions_per_topic", "max_partitions_per_group", "max_subtopologies",
            "max_tasks_per_group", "max_members_per_group", "max_groups", "max_tasks_per_assign",
            "max_clients_per_assign", "max_rebalance_timeout_ms",
        )
    ),
    ("--store", "store", "REMOTE_LEADER_STORE", str),
    ("--replica-id", "replica_id", "REMOTE_LEADER_REPLICA_ID", str),
    ("--advertise-address", "advertise_address", "REMOTE_LEADER_ADVERTISE_ADDRESS", str),
    ("--lease-ms", "lease_ms", "REMOTE_LEADER_LEASE_MS", int),
]
_EVENT_LOOPS = ("auto", "uvloop", "asyncio")


class SettingsError(ValueError):
    pass


def settings_from(args: argparse.Namespace, environ: dict[str, str]):
    """Flag, else environment, else the default; every bad value names its flag."""
    from server.app import Settings

    values: dict[str, Any] = {}
    for flag, name, env, kind in _SETTINGS:
        raw = getattr(args, name, None)
        source = flag
        if raw is None and environ.get(env, "") != "":
            raw, source = environ[env], env
        if raw is None:
            continue
        try:
            values[name] = kind(raw)
        except (TypeError, ValueError):
            raise SettingsError(f"{source}: expected {kind.__name__}, got {raw!r}") from None
    early = args.early_probe
    if early is None and environ.get("REMOTE_LEADER_EARLY_PROBE", "") != "":
        text = environ["REMOTE_LEADER_EARLY_PROBE"].strip().lower()
        if text not in _BOOL_TRUE | _BOOL_FALSE:
            raise SettingsError(f"REMOTE_LEADER_EARLY_PROBE: expected true or false, got {text!r}")
        early = text in _BOOL_TRUE
    if early is not None:
        values["early_probe"] = early
    settings = Settings(**values)
    _check(settings)
    return settings


def _check(s) -> None:
    for name in ("metrics_port", "min_session_timeout_ms", "max_session_timeout_ms", "initial_rebalance_delay_ms",
                 "min_probe_interval_ms", "max_pending_requests", "rebalance_log_max_bytes", "rebalance_log_backups"):
        if getattr(s, name) < 0:
            raise SettingsError(f"--{name.replace('_', '-')}: must be >= 0, got {getattr(s, name)}")
    if s.min_session_timeout_ms > s.max_session_timeout_ms:
        raise SettingsError("--min-session-timeout-ms: must not exceed --max-session-timeout-ms")
    try:
        s.limits().validate()
    except ValueError as error:
        raise SettingsError(str(error)) from None
    if s.drain_timeout_s < 0:
        raise SettingsError(f"--drain-timeout-s: must be >= 0, got {s.drain_timeout_s}")
    if bool(s.tls_cert) != bool(s.tls_key):
        raise SettingsError("--tls-cert/--tls-key: set both or neither")
    if s.log_format not in ("json", "console"):
        raise SettingsError(f"--log-format: expected json or console, got {s.log_format!r}")
    if s.event_loop not in _EVENT_LOOPS:
        raise SettingsError(f"--event-loop: expected one of {', '.join(_EVENT_LOOPS)}, got {s.event_loop!r}")
    if ":" not in s.listen:
        raise SettingsError(f"--listen: expected host:port, got {s.listen!r}")
    if s.store != "sqlite" and not s.replicated:
        raise SettingsError(f"--store: expected sqlite or a postgresql:// URL, got {s.store.split('@')[-1]!r}")
    if s.lease_ms < 1_000:
        raise SettingsError(f"--lease-ms: must be >= 1000, got {s.lease_ms}")
    if s.advertise_address and ":" not in s.advertise_address:
        raise SettingsError(f"--advertise-address: expected host:port, got {s.advertise_address!r}")


def _event_loop_runner(choice: str) -> Callable[[Coroutine[Any, Any, int]], int]:
    """``asyncio.run`` or ``uvloop.run``. uvloop (when installed; ``auto``) cuts the server's
    CPU per call by about 15% under grpc.aio (bench/bench_server.py, docs/benchmarks.md):
    every RPC is several event-loop callbacks, and uvloop runs them in C."""
    if choice == "asyncio":
        return asyncio.run
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise SettingsError("--event-loop: uvloop is not installed") from None
        return asyncio.run
    return uvloop.run


def _serve(args: argparse.Namespace) -> int:
    try:
        settings = settings_from(args, dict(os.environ))
        from server.observability import configure_logging

        configure_logging(settings.log_level, settings.log_format)
        run = _event_loop_runner(settings.event_loop)
    except (SettingsError, ValueError) as error:
        print(f"remote-leader serve: {error}", file=sys.stderr)
        return 2
    return run(_run_server(settings))


async def _run_server(settings) -> int:
    from server.app import LeaderServer, tune_garbage_collector

    server = LeaderServer(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
    except OSError as error:
        print(f"remote-leader serve: {error}", file=sys.stderr)
        await server.stop(0)
        return 1
    tune_garbage_collector()
    await stop.wait()
    await server.stop()
    return 0


async def _query(address: str, method: str, request: Any) -> Any:
    import grpc

    from remote_leader.v1 import group_leader_pb2_grpc

    async with grpc.aio.insecure_channel(address) as channel:
        stub = group_leader_pb2_grpc.GroupLeaderStub(channel)
        return await getattr(stub, method)(request, timeout=10)


def _print_message(message: Any) -> None:
    from google.protobuf import json_format

    print(json.dumps(json_format.MessageToDict(message, preserving_proto_field_name=True), indent=2, sort_keys=True))


def _client_call(method: str, build) -> Any:
    def run(args: argparse.Namespace) -> int:
        import grpc

        try:
            response = asyncio.run(_query(args.server, method, build(args)))
        except grpc.aio.AioRpcError as error:
            print(f"remote-leader: {args.server}: {error.code().name}: {error.details()}", file=sys.stderr)
            return 1
        _print_message(response)
        return 1 if getattr(response, "error_code", 0) else 0

    return run


def _describe_request(args: argparse.Namespace) -> Any:
    from remote_leader.v1 import group_leader_pb2

    return group_leader_pb2.DescribeGroupRequest(group_id=args.group)


def _groups_request(args: argparse.Namespace) -> Any:
    from remote_leader.v1 import group_leader_pb2

    return group_leader_pb2.ListGroupsRequest()


def register(subparsers: Any) -> None:
    from server.app import Settings

    defaults = {f.name: f.default for f in fields(Settings)}
    serve = subparsers.add_parser("serve", help="run the remote group leader (gRPC)")
    for flag, name, env, _kind in _SETTINGS:
        serve.add_argument(flag, dest=name, default=None, help=f"env {env}; default {defaults[name]}")
    serve.add_argument("--early-probe", dest="early_probe", action="store_true", default=None,
                       help="env REMOTE_LEADER_EARLY_PROBE; default true")
    serve.add_argument("--no-early-probe", dest="early_probe", action="store_false")
    serve.set_defaults(func=_serve)

    describe = subparsers.add_parser("describe", help="describe one group of a running server (JSON)")
    describe.add_argument("group")
    describe.add_argument("--server", default="127.0.0.1:50051", help="server address (default 127.0.0.1:50051)")
    describe.set_defaults(func=_client_call("DescribeGroup", _describe_request))

    groups = subparsers.add_parser("groups", help="list the groups of a running server (JSON)")
    groups.add_argument("--server", default="127.0.0.1:50051", help="server address (default 127.0.0.1:50051)")
    groups.set_defaults(func=_client_call("ListGroups", _groups_request))
