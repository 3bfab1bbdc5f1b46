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

from remote_leader.net import check_address
from remote_leader.options import LOG_LEVELS

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
    ("--tls-client-ca", "tls_client_ca", "REMOTE_LEADER_TLS_CLIENT_CA", Path),
    ("--auth-token-file", "auth_token_file", "REMOTE_LEADER_AUTH_TOKEN_FILE", Path),
    ("--auth-jwt-key", "auth_jwt_key", "REMOTE_LEADER_AUTH_JWT_KEY", Path),
    ("--auth-jwt-algorithms", "auth_jwt_algorithms", "REMOTE_LEADER_AUTH_JWT_ALGORITHMS", str),
    ("--auth-jwt-audience", "auth_jwt_audience", "REMOTE_LEADER_AUTH_JWT_AUDIENCE", str),
    ("--auth-jwt-issuer", "auth_jwt_issuer", "REMOTE_LEADER_AUTH_JWT_ISSUER", str),
    ("--acl-file", "acl_file", "REMOTE_LEADER_ACL_FILE", Path),
    ("--metrics-host", "metrics_host", "REMOTE_LEADER_METRICS_HOST", str),
    ("--metrics-tls", "metrics_tls", "REMOTE_LEADER_METRICS_TLS", lambda text: _boolean(text)),
    ("--empty-group-retention-ms", "empty_group_retention_ms", "REMOTE_LEADER_EMPTY_GROUP_RETENTION_MS", int),
    ("--log-level", "log_level", "REMOTE_LEADER_LOG_LEVEL", str),
    ("--log-format", "log_format", "REMOTE_LEADER_LOG_FORMAT", str),
    ("--event-loop", "event_loop", "REMOTE_LEADER_EVENT_LOOP", str),
    ("--assignor-processes", "assignor_processes", "REMOTE_LEADER_ASSIGNOR_PROCESSES", int),
    ("--assignor-process-min-tasks", "assignor_process_min_tasks", "REMOTE_LEADER_ASSIGNOR_PROCESS_MIN_TASKS", int),
    *(
        (f"--{name.replace('_', '-')}", name, f"REMOTE_LEADER_{name.upper()}", int)
        for name in (
            "max_message_bytes", "max_partitions_per_topic", "max_partitions_per_group", "max_subtopologies",
            "max_tasks_per_group", "max_store_partitions_per_group", "max_host_map_bytes", "max_members_per_group", "max_groups",
            "max_groups_per_principal",
            "max_tasks_per_assign", "max_clients_per_assign", "max_replicas_per_group", "max_replicas_per_assign",
            "max_concurrent_assigns", "max_rebalance_timeout_ms", "max_client_tags",
        )
    ),
    ("--store", "store", "REMOTE_LEADER_STORE", str),
    ("--replica-id", "replica_id", "REMOTE_LEADER_REPLICA_ID", str),
    ("--advertise-address", "advertise_address", "REMOTE_LEADER_ADVERTISE_ADDRESS", str),
    ("--lease-ms", "lease_ms", "REMOTE_LEADER_LEASE_MS", int),
    ("--live-page", "live_page", "REMOTE_LEADER_LIVE_PAGE", str),
]
_EVENT_LOOPS = ("auto", "uvloop", "asyncio")
_LIVE_PAGE = ("loopback", "on", "off")

#: What each flag means (docs/interfaces.md, "Server settings"); ``serve --help`` adds the
#: environment variable and the default.
_HELP: dict[str, str] = {
    "--listen": "gRPC address HOST:PORT (0.0.0.0:PORT in containers; port 0 picks a free one)",
    "--state-dir": "directory of the SQLite group state (state.db) and the rebalance log (rebalance-log/)",
    "--metrics-port": "HTTP port of Prometheus /metrics and the live page, on the --listen host; 0 disables",
    "--min-session-timeout-ms": "smallest session timeout a member may ask for, ms",
    "--max-session-timeout-ms": "largest session timeout a member may ask for, ms",
    "--initial-rebalance-delay-ms": "when a group is first formed, wait this long for more members, ms",
    "--min-probe-interval-ms": "an early probe (every warm-up caught up) comes no sooner than this after the last rebalance, ms",
    "--drain-timeout-s": "graceful shutdown: how long in-flight calls may finish, seconds",
    "--max-pending-requests": "grpc max_pending_requests (and its hard limit): parked JoinGroup calls of all groups",
    "--rebalance-log-max-bytes": "rotate the rebalance log at this size, bytes",
    "--rebalance-log-backups": "rotated rebalance-log files kept",
    "--tls-cert": "PEM certificate file; with --tls-key, serve gRPC over TLS",
    "--tls-key": "PEM private key file; with --tls-cert, serve gRPC over TLS",
    "--log-level": f"log level: {', '.join(LOG_LEVELS)}",
    "--log-format": "log lines as json (one object per line) or console (for people)",
    "--event-loop": "auto (uvloop when installed), uvloop or asyncio",
    "--assignor-processes": "worker processes for large assignments, so that they never stall other groups; 0 runs them in a thread",
    "--assignor-process-min-tasks": "problems with at least this many tasks go to a worker process; smaller ones run in a thread",
    "--store": "group state store: sqlite (one server) or a postgresql:// DSN (several replicas)",
    "--replica-id": "with PostgreSQL: this replica's id (default: host name and a random suffix)",
    "--advertise-address": "with PostgreSQL: HOST:PORT clients reach this replica at (default: from --listen)",
    "--lease-ms": "with PostgreSQL: how long a replica's lease on a group lasts, ms",
    "--tls-client-ca": "PEM CA: require client certificates it signed (mTLS; docs/security.md)",
    "--auth-token-file": "YAML tokens: {TOKEN: PRINCIPAL} for bearer tokens, re-read on change",
    "--auth-jwt-key": "key file that verifies bearer JWTs (principal = sub)",
    "--auth-jwt-algorithms": "JWT algorithms accepted, comma-separated",
    "--auth-jwt-audience": "required JWT aud",
    "--auth-jwt-issuer": "required JWT iss",
    "--acl-file": "YAML grants per principal and group pattern; deny by default once authentication is on",
    "--metrics-host": "bind address of the HTTP port (/metrics); default: the host of --listen",
    "--metrics-tls": "serve the HTTP port over HTTPS with --tls-cert/--tls-key: true or false",
    "--live-page": "the live operator's page on the metrics port: loopback (only local clients), on (anyone who "
                   "reaches the port; with authentication and ACLs when configured) or off",
    "--max-message-bytes": "largest request grpc accepts, bytes (RESOURCE_EXHAUSTED beyond)",
    "--max-partitions-per-topic": "largest partition_count of a source topic",
    "--max-partitions-per-group": "partitions of all of a topology's source topics, each subtopology's listing counted",
    "--max-subtopologies": "subtopologies in a topology",
    "--max-tasks-per-group": "tasks a topology forms (and entries of a lag report)",
    "--max-store-partitions-per-group": "store partitions a topology forms: each subtopology's state stores "
                                        "times its tasks (SyncGroup's host maps list every one)",
    "--max-host-map-bytes": "bytes of the names a topology makes SyncGroup answers list: each task's topic and "
                            "store names times its active, standbys and warm-ups, and the partitions' racks; "
                            "of each join's topology and of the group's merged one",
    "--max-members-per-group": "members of one group; a newcomer beyond it gets RESOURCE_EXHAUSTED",
    "--max-groups": "groups on this server; a new group beyond it gets RESOURCE_EXHAUSTED",
    "--max-groups-per-principal": "groups one principal created on this server (authentication on), members or not, "
                                  "until they expire; a new group beyond it gets RESOURCE_EXHAUSTED",
    "--max-tasks-per-assign": "tasks of one Assign problem (and of each client's lags and previous tasks)",
    "--max-clients-per-assign": "clients of one Assign problem",
    "--max-replicas-per-group": "replicas a group's config asks for: every task's active and each stateful task's "
                                "num_standby_replicas standbys",
    "--max-replicas-per-assign": "replicas of one Assign problem: every task's active and each stateful task's "
                                 "standbys (at most one per other client)",
    "--max-concurrent-assigns": "Assign calls computed at once (in their own worker process, apart from the groups' "
                                "rebalances); one more is refused with RESOURCE_EXHAUSTED, a cancelled one counts "
                                "until its work ends",
    "--max-rebalance-timeout-ms": "largest rebalance_timeout_ms a member may ask for, ms",
    "--max-client-tags": "client tags of one member or Assign client, and keys of a config's "
                         "rack_aware_assignment_tags (KIP-708; Kafka Streams allows 5)",
    "--empty-group-retention-ms": "remove a group that has had no members this long, ms; 0 keeps them",
}
_METAVARS = {"--log-level": "{" + ",".join(LOG_LEVELS) + "}", "--log-format": "{json,console}",
             "--event-loop": "{" + ",".join(_EVENT_LOOPS) + "}", "--live-page": "{" + ",".join(_LIVE_PAGE) + "}"}


class SettingsError(ValueError):
    pass


def _boolean(text: str) -> bool:
    value = str(text).strip().lower()
    if value not in _BOOL_TRUE | _BOOL_FALSE:
        raise ValueError(value)
    return value in _BOOL_TRUE


def settings_from(args: argparse.Namespace, environ: dict[str, str]):
    """Flag, else environment, else the default; every bad value names its flag."""
    from server.app import Settings

    values: dict[str, Any] = {}
    from_environment: dict[str, str] = {}  # flag -> the variable its value came from
    for flag, name, env, kind in _SETTINGS:
        raw = getattr(args, name, None)
        source = flag
        if raw is None and environ.get(env, "") != "":
            raw, source = environ[env], env
            from_environment[flag] = env
        if raw is None:
            continue
        try:
            values[name] = kind(raw)
        except (TypeError, ValueError):
            expected = "true or false" if name == "metrics_tls" else kind.__name__
            raise SettingsError(f"{source}: expected {expected}, got {raw!r}") from None
    early = args.early_probe
    if early is None and environ.get("REMOTE_LEADER_EARLY_PROBE", "") != "":
        text = environ["REMOTE_LEADER_EARLY_PROBE"].strip().lower()
        if text not in _BOOL_TRUE | _BOOL_FALSE:
            raise SettingsError(f"REMOTE_LEADER_EARLY_PROBE: expected true or false, got {text!r}")
        early = text in _BOOL_TRUE
    if early is not None:
        values["early_probe"] = early
    settings = Settings(**values)
    try:
        _check(settings)
    except SettingsError as error:  # named as the operator set it: REMOTE_LEADER_LIVE_PAGE, not --live-page
        flag, _, rest = str(error).partition(":")
        if flag in from_environment:
            raise SettingsError(f"{from_environment[flag]}:{rest}") from None
        raise
    return settings


def _check(s) -> None:
    for name in ("metrics_port", "min_session_timeout_ms", "max_session_timeout_ms", "initial_rebalance_delay_ms",
                 "min_probe_interval_ms", "max_pending_requests", "empty_group_retention_ms", "rebalance_log_max_bytes", "rebalance_log_backups",
                 "assignor_processes", "assignor_process_min_tasks"):
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
    if s.tls_client_ca and not s.tls_cert:
        raise SettingsError("--tls-client-ca: needs --tls-cert and --tls-key (mTLS is TLS with client certificates)")
    if s.metrics_tls and not s.tls_cert:
        raise SettingsError("--metrics-tls: needs --tls-cert and --tls-key")
    if s.acl_file and not (s.tls_client_ca or s.auth_token_file or s.auth_jwt_key):
        raise SettingsError("--acl-file: needs a way to authenticate (--tls-client-ca, --auth-token-file or --auth-jwt-key)")
    for name in ("tls_cert", "tls_key", "tls_client_ca", "auth_token_file", "auth_jwt_key", "acl_file"):
        path = getattr(s, name)
        if path is not None and not Path(path).is_file():
            raise SettingsError(f"--{name.replace('_', '-')}: no such file {str(path)!r}")
    if s.log_format not in ("json", "console"):
        raise SettingsError(f"--log-format: expected json or console, got {s.log_format!r}")
    if s.live_page not in _LIVE_PAGE:
        raise SettingsError(f"--live-page: expected one of {', '.join(_LIVE_PAGE)}, got {s.live_page!r}")
    if s.event_loop not in _EVENT_LOOPS:
        raise SettingsError(f"--event-loop: expected one of {', '.join(_EVENT_LOOPS)}, got {s.event_loop!r}")
    if ":" not in s.listen:
        raise SettingsError(f"--listen: expected host:port, got {s.listen!r}")
    _check_port("--listen", s.listen.rpartition(":")[2], minimum=0)
    if s.metrics_port > 65535:  # grpc and aiohttp would wrap a larger port to another one
        raise SettingsError(f"--metrics-port: expected a port from 0 to 65535, got {s.metrics_port}")
    if s.store != "sqlite" and not s.replicated:
        raise SettingsError(f"--store: expected sqlite or a postgresql:// URL, got {s.store.split('@')[-1]!r}")
    if s.lease_ms < 1_000:
        raise SettingsError(f"--lease-ms: must be >= 1000, got {s.lease_ms}")
    if s.advertise_address and ":" not in s.advertise_address:
        raise SettingsError(f"--advertise-address: expected host:port, got {s.advertise_address!r}")


def _check_port(flag: str, port: str, minimum: int = 1) -> None:
    """A port that fits in 16 bits: grpc wraps a larger one (70000 becomes 4464)."""
    if not port.strip().isdigit() or not minimum <= int(port) <= 65535:
        raise SettingsError(f"{flag}: expected a port from {minimum} to 65535, got {port!r}")


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
    except (OSError, ValueError) as error:  # a port taken, an unreadable or malformed auth file; start() closed what it opened
        print(f"remote-leader serve: {error}", file=sys.stderr)
        return 1
    tune_garbage_collector()
    await stop.wait()
    await server.stop()
    return 0


#: NOT_COORDINATOR redirects a describe follows before it gives up (remote_leader.v1 errors).
_MAX_REDIRECTS = 3
_NOT_COORDINATOR = 16


async def _query(address: str, method: str, request: Any, tls: Any = None) -> Any:
    """One call; ``address`` may list several replicas (host:port,host:port): ListGroups asks
    each for every page and merges (each replica lists the groups it owns), other calls follow
    NOT_COORDINATOR to the group's owner. A replica that does not answer (down, unreachable) is
    skipped with a line on stderr: an operator looks exactly while one is down, and its groups
    have moved to the others (an audit's find: one dead address failed the whole command). The
    call fails only when no replica answers. ``tls``: a ``remote_leader.tls.ClientTls``."""
    import grpc

    from remote_leader.tls import PLAINTEXT
    from remote_leader.v1 import group_leader_pb2, group_leader_pb2_grpc

    tls = tls or PLAINTEXT
    addresses = [a.strip() for a in address.split(",") if a.strip()]
    failures: list[grpc.aio.AioRpcError] = []

    def skipped(target: str, error: grpc.aio.AioRpcError) -> None:
        if error.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            raise error
        failures.append(error)
        if len(addresses) > 1:  # one address: the command's own error line says it
            print(f"remote-leader: {target}: {error.code().name}: skipped", file=sys.stderr)

    if method == "ListGroups":
        merged = group_leader_pb2.ListGroupsResponse()
        for target in addresses:
            token, pages = "", []
            try:
                async with tls.aio_channel(target) as channel:
                    stub = group_leader_pb2_grpc.GroupLeaderStub(channel)
                    while True:
                        page = await stub.ListGroups(group_leader_pb2.ListGroupsRequest(page_token=token), timeout=10)
                        pages.append(page)
                        token = page.next_page_token
                        if not token:
                            break
            except grpc.aio.AioRpcError as error:
                skipped(target, error)
                continue
            for page in pages:
                merged.groups.extend(page.groups)
        if len(failures) == len(addresses):
            raise failures[-1]
        return merged
    for first in addresses:
        target = first
        try:
            for _hop in range(_MAX_REDIRECTS + 1):
                async with tls.aio_channel(target) as channel:
                    stub = group_leader_pb2_grpc.GroupLeaderStub(channel)
                    response = await getattr(stub, method)(request, timeout=10)
                moved = getattr(response, "error_code", 0) == _NOT_COORDINATOR and response.HasField("coordinator")
                if not moved or not response.coordinator.address or response.coordinator.address == target:
                    return response
                target = response.coordinator.address
            return response
        except grpc.aio.AioRpcError as error:
            skipped(target, error)
    raise failures[-1]


def _print_message(message: Any) -> None:
    from google.protobuf import json_format

    # every field, zeros too: task 0_0, a lag of 0 and an Empty group's 0 members are facts to read
    print(json.dumps(json_format.MessageToDict(message, preserving_proto_field_name=True,
                                               always_print_fields_with_no_presence=True), indent=2, sort_keys=True))


def _client_call(method: str, build, empty: tuple[Callable[[Any], bool], str] | None = None) -> Any:
    """``empty``: when its test holds for the answer, a line for people on standard error
    beside the JSON (``groups`` on a new server)."""

    def run(args: argparse.Namespace) -> int:
        import grpc

        from remote_leader.tls import client_tls_from

        try:
            check_address("--server", args.server, several=True)  # the sidecar's rule: a port, always
            tls = client_tls_from(args)
        except ValueError as error:
            print(f"remote-leader: {error}", file=sys.stderr)
            return 2
        try:
            response = asyncio.run(_query(args.server, method, build(args), tls))
        except grpc.aio.AioRpcError as error:
            hint = tls.tls_hint(error)
            print(f"remote-leader: {args.server}: {error.code().name}: {error.details()}"
                  + (f" ({hint})" if hint else ""), file=sys.stderr)
            return 1
        try:
            _print_message(response)  # JSON on standard output always: scripts read it (`| jq`)
            if empty is not None and empty[0](response):
                print(empty[1].format(server=args.server), file=sys.stderr)
            if getattr(response, "error_code", 0):  # the JSON says it for scripts; a line for people
                from remote_leader.v1 import errors_pb2

                print(f"remote-leader: {args.server}: {errors_pb2.ErrorCode.Name(response.error_code)}: "
                      f"{response.error_message}", file=sys.stderr)
            sys.stdout.flush()
        except BrokenPipeError:  # `describe G | head`: the reader has all it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1 if getattr(response, "error_code", 0) else 0

    return run


def _describe_request(args: argparse.Namespace) -> Any:
    from remote_leader.v1 import group_leader_pb2

    return group_leader_pb2.DescribeGroupRequest(group_id=args.group)


def _groups_request(args: argparse.Namespace) -> Any:
    from remote_leader.v1 import group_leader_pb2

    return group_leader_pb2.ListGroupsRequest()


def register(subparsers: Any) -> None:
    from remote_leader.tls import add_client_arguments
    from server.app import Settings

    defaults = {f.name: f.default for f in fields(Settings)}
    serve = subparsers.add_parser("serve", help="run the remote group leader (gRPC)",
                                  description="Run the remote group leader. Every flag falls back to the "
                                              "environment variable named beside it (docs/interfaces.md).")
    for flag, name, env, _kind in _SETTINGS:
        default = defaults[name] if defaults[name] not in (None, "") else "unset"
        serve.add_argument(flag, dest=name, default=None, metavar=_METAVARS.get(flag),
                           help=f"{_HELP.get(flag, '')} (env {env}; default {default})".strip())
    serve.add_argument("--early-probe", dest="early_probe", action="store_true", default=None,
                       help="probe as soon as every warm-up is caught up (env REMOTE_LEADER_EARLY_PROBE; default true)")
    serve.add_argument("--no-early-probe", dest="early_probe", action="store_false",
                       help="probe only at the probing rebalance interval")
    serve.set_defaults(func=_serve)

    describe = subparsers.add_parser("describe", help="describe one group of a running server (JSON)")
    describe.add_argument("group", help="group id")
    describe.add_argument("--server", default="127.0.0.1:50051",
                          help="server address HOST:PORT, or several replicas a:p,b:p (default 127.0.0.1:50051)")
    add_client_arguments(describe)
    describe.set_defaults(func=_client_call("DescribeGroup", _describe_request))

    groups = subparsers.add_parser("groups", help="list the groups of a running server (JSON)")
    groups.add_argument("--server", default="127.0.0.1:50051",
                        help="server address HOST:PORT, or several replicas a:p,b:p (default 127.0.0.1:50051)")
    add_client_arguments(groups)
    groups.set_defaults(func=_client_call("ListGroups", _groups_request,
                                          empty=(lambda r: not r.groups, "no groups on {server}")))
