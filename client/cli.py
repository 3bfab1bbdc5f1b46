"""``remote-leader demo`` and ``remote-leader sidecar``: the worker side's commands.

Registered by the composition root (``remote_leader.cli``); each parser sets ``func(args) -> int``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

import structlog

from assignor.lag import MAX_LONG
from assignor.model import MAX_INT, InvalidInput
from remote_leader.net import check_address
from remote_leader.options import check_log_level


def configure_logging(level: str = "warning", log_format: str = "console") -> None:
    """Logs on stderr (stdout is kept for the sidecar's ready line and the demo's tables), as
    JSON lines or for a console."""
    renderer = structlog.processors.JSONRenderer() if log_format == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.WARNING)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"), renderer],
    )


def _tag(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _check_range(flag: str, value: int, minimum: int, maximum: int) -> None:
    if not minimum <= value <= maximum:
        raise ValueError(f"{flag}: expected an integer from {minimum} to {maximum}, got {value}")


def register(subparsers) -> None:
    _register_sidecar(subparsers)
    _register_demo(subparsers)


def _register_sidecar(subparsers) -> None:
    p = subparsers.add_parser("sidecar", help="run a group member beside a worker, with a local gRPC API",
                              description="Run the group member as its own process next to a worker in any "
                                          "language; the worker uses the local API (docs/sidecar.md).")
    p.add_argument("--group", required=True, help="group id")
    p.add_argument("--server", required=True, help="remote leader address, host:port, or several replicas host:port,host:port,... (any will do)")
    p.add_argument("--topology", required=True, help="topology file, YAML or JSON (docs/sidecar.md)")
    p.add_argument("--listen", default="127.0.0.1:0", help="local API address (default 127.0.0.1:0, printed on stdout)")
    p.add_argument("--process-id", default=None, help="worker process UUID (default: a new one)")
    p.add_argument("--instance-id", default=None, help="group_instance_id for static membership (KIP-345)")
    p.add_argument("--will-come-back", action="store_true",
                   help="static member: on stop, keep the place for the session timeout instead of leaving")
    p.add_argument("--endpoint", default=None, help="the worker's interactive-query endpoint host:port (KIP-535)")
    p.add_argument("--threads", type=int, default=1, help="the worker's stream threads: its capacity (default 1)")
    p.add_argument("--rack", default=None, help="the worker's rack, for KIP-925 rack-aware placement (default none)")
    p.add_argument("--tag", type=_tag, action="append", default=[], help="client tag KEY=VALUE (repeatable)")
    p.add_argument("--session-timeout-ms", type=int, default=10_000,
                   help="the leader drops the member after this long without a heartbeat; must lie within the "
                        "server's --min/--max-session-timeout-ms (default 10000)")
    p.add_argument("--heartbeat-interval-ms", type=int, default=3_000,
                   help="how often the member heartbeats (with fresh lags); below the session timeout (default 3000)")
    p.add_argument("--apply-timeout-ms", type=int, default=30_000,
                   help="how long an acknowledging watcher may take to apply an assignment (default 30000)")
    p.add_argument("--rebalance-timeout-ms", type=int, default=None,
                   help="how long the leader waits for the member to rejoin a rebalance, which it does once the "
                        "assignment in hand is applied (default: the larger of --session-timeout-ms and "
                        "--apply-timeout-ms)")
    p.add_argument("--state-dir", default=None, help="run the state cleaner on this state directory")
    p.add_argument("--state-cleanup-delay-ms", type=int, default=600_000,
                   help="with --state-dir: delete state of tasks unassigned for this long (default 600000)")
    p.add_argument("--log-level", default=os.environ.get("REMOTE_LEADER_LOG_LEVEL", "info"),
                   help="default $REMOTE_LEADER_LOG_LEVEL or info")
    p.add_argument("--log-format", choices=("json", "console"), default=os.environ.get("REMOTE_LEADER_LOG_FORMAT", "console"),
                   help="default $REMOTE_LEADER_LOG_FORMAT or console")
    from remote_leader.tls import add_client_arguments

    add_client_arguments(p, what="the remote leader")
    p.add_argument("--local-tls-cert", default=None, help="serve the local API over TLS with this PEM certificate")
    p.add_argument("--local-tls-key", default=None, help="PEM key of --local-tls-cert")
    p.add_argument("--local-tls-client-ca", default=None,
                   help="require local API clients to present a certificate signed by this PEM CA (mTLS)")
    p.set_defaults(func=run_sidecar)


def _local_tls(args: argparse.Namespace):
    from client.sidecar import LocalTls

    if not (args.local_tls_cert or args.local_tls_key or args.local_tls_client_ca):
        return None
    if not (args.local_tls_cert and args.local_tls_key):
        raise ValueError("--local-tls-cert/--local-tls-key: set both (and --local-tls-client-ca for mTLS)")
    for flag, value in (("--local-tls-cert", args.local_tls_cert), ("--local-tls-key", args.local_tls_key),
                        ("--local-tls-client-ca", args.local_tls_client_ca)):
        if value and not Path(value).is_file():
            raise ValueError(f"{flag}: no such file {value!r}")
    return LocalTls(Path(args.local_tls_cert), Path(args.local_tls_key),
                    Path(args.local_tls_client_ca) if args.local_tls_client_ca else None)


def run_sidecar(args: argparse.Namespace) -> int:
    from assignor.model import HostInfo
    from client.member import MemberConfig
    from client.sidecar import SidecarOptions, check_group, load_member_file, ready_line, serve_sidecar
    from remote_leader.tls import client_tls_from

    if args.log_format not in ("json", "console"):
        print(f"remote-leader sidecar: --log-format: expected json or console, got {args.log_format!r}", file=sys.stderr)
        return 2
    try:
        check_log_level(args.log_level)
    except ValueError as error:
        print(f"remote-leader sidecar: {error}", file=sys.stderr)
        return 2
    configure_logging(args.log_level, args.log_format)
    try:
        # The wire's int32 fields (JoinGroupRequest.num_threads, session_timeout_ms) and the
        # local limits: refused here, by flag, rather than by protobuf once the member runs.
        _check_range("--threads", args.threads, 1, MAX_INT)
        _check_range("--session-timeout-ms", args.session_timeout_ms, 1, MAX_INT)
        _check_range("--heartbeat-interval-ms", args.heartbeat_interval_ms, 1, MAX_INT)
        _check_range("--apply-timeout-ms", args.apply_timeout_ms, 0, MAX_INT)
        if args.rebalance_timeout_ms is None:
            # A rebalance that starts while the worker applies is joined once it is applied: with
            # the session's 10 s, a worker taking the apply timeout's 30 s was dropped from it.
            args.rebalance_timeout_ms = max(args.session_timeout_ms, args.apply_timeout_ms)
        _check_range("--rebalance-timeout-ms", args.rebalance_timeout_ms, 1, MAX_INT)
        if args.heartbeat_interval_ms >= args.session_timeout_ms:  # by flag, before MemberConfig says it by field
            raise ValueError(f"--heartbeat-interval-ms: {args.heartbeat_interval_ms} must be below "
                             f"--session-timeout-ms ({args.session_timeout_ms}; Kafka: about a third)")
        _check_range("--state-cleanup-delay-ms", args.state_cleanup_delay_ms, 0, MAX_LONG)
        check_address("--server", args.server, several=True)
        check_address("--listen", args.listen, port_zero=True)
        topology, config = load_member_file(args.topology)
        check_group(topology, args.group)
        extra = {"process_id": args.process_id} if args.process_id else {}
        member = MemberConfig(
            group_id=args.group, topology=topology, group_instance_id=args.instance_id,
            endpoint=HostInfo.parse(args.endpoint, "--endpoint") if args.endpoint else None,
            rack=args.rack, client_tags=dict(args.tag), num_threads=args.threads, assignment_config=config,
            session_timeout_ms=args.session_timeout_ms, heartbeat_interval_ms=args.heartbeat_interval_ms,
            rebalance_timeout_ms=args.rebalance_timeout_ms, **extra)
        options = SidecarOptions(server=args.server, member=member, listen=args.listen,
                                 apply_timeout_s=args.apply_timeout_ms / 1000, state_dir=args.state_dir,
                                 state_cleanup_delay_ms=args.state_cleanup_delay_ms,
                                 will_come_back=args.will_come_back, upstream_tls=client_tls_from(args),
                                 local_tls=_local_tls(args))
    except (InvalidInput, ValueError) as error:
        print(f"remote-leader sidecar: {error}", file=sys.stderr)
        return 2

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        return await serve_sidecar(options, stop, ready=lambda address: print(ready_line(address, member), flush=True))

    try:
        return asyncio.run(main())
    except InvalidInput as error:
        print(f"remote-leader sidecar: {error}", file=sys.stderr)
        return 2


def _register_demo(subparsers) -> None:
    p = subparsers.add_parser("demo", help="a live KIP-441 scaling demo on loopback (exits by itself)",
                              description="Start a server and simulated workers on loopback and play KIP-441's "
                                          "Scaling Out and Scaling In (standbys lagging) scenarios.")
    p.add_argument("--server", default=None,
                   help="use this running server HOST:PORT instead of starting one; it needs short timings: "
                        "serve --initial-rebalance-delay-ms 300 --min-session-timeout-ms 500 --min-probe-interval-ms 1000")
    p.add_argument("--restore-rate", type=int, default=10_000,
                   help="simulated restoration speed, offsets per second (default 10000)")
    p.add_argument("--changelog-offsets", type=int, default=60_000,
                   help="simulated changelog length per task (default 60000)")
    p.add_argument("--acceptable-recovery-lag", type=int, default=2_000,
                   help="KIP-441 acceptable_recovery_lag: a replica this close is caught up, offsets (default 2000)")
    p.add_argument("--timeout-s", type=float, default=55.0, help="give up after this long (exit 1)")
    p.add_argument("--tls", action="store_true",
                   help="make a CA of its own and run server and workers over mTLS with ACLs (docs/security.md)")
    p.add_argument("--log-level", default="error", help="debug, info, warning, error or critical (default error)")
    p.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from client.demo import DemoOptions, run

    try:
        check_log_level(args.log_level)
    except ValueError as error:
        print(f"remote-leader demo: {error}", file=sys.stderr)
        return 2
    configure_logging(args.log_level)
    try:
        options = DemoOptions(server=args.server, restore_rate=args.restore_rate,
                              changelog_offsets=args.changelog_offsets,
                              acceptable_recovery_lag=args.acceptable_recovery_lag, timeout_s=args.timeout_s,
                              tls=args.tls)
    except InvalidInput as error:
        print(f"remote-leader demo: {error}", file=sys.stderr)
        return 2
    return asyncio.run(run(options))
