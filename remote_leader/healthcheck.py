"""A gRPC health probe for the container image: ``python -m remote_leader.healthcheck``.

The Dockerfile's HEALTHCHECK and the Helm chart's exec probes (used when TLS is on, because the
kubelet's native ``grpc:`` probe cannot verify a certificate) run this module inside the
server's own image, so no ``grpc_health_probe`` binary has to be downloaded. It speaks the
standard ``grpc.health.v1.Health/Check`` protocol that ``remote-leader serve`` answers
(docs/interfaces.md): SERVING for ``""`` and for ``remote_leader.v1.GroupLeader`` once the state
is loaded, NOT_SERVING while draining.

It sits beside the CLI in the composition-root package and imports only grpc and grpc_health,
so a probe stays cheap and never loads the server, the assignor or Spark.

Exit status: 0 SERVING; 1 answered but not SERVING (NOT_SERVING, SERVICE_UNKNOWN, UNKNOWN);
2 no answer (connection refused, deadline exceeded, TLS failure); 3 bad arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from remote_leader.tls import ClientTls

EXIT_SERVING = 0
EXIT_NOT_SERVING = 1
EXIT_UNREACHABLE = 2
EXIT_USAGE = 3

DEFAULT_LISTEN = "127.0.0.1:50051"  # docs/interfaces.md, --listen default
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "[::]": "[::1]", "::": "[::1]"}


def probe_address(listen: str) -> str:
    """Where to dial for a server that listens on ``listen``.

    A container binds the wildcard (``0.0.0.0:50051``); a probe inside the same network namespace
    reaches it on loopback, so the wildcard host is replaced and the port kept.
    """
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--address: expected HOST:PORT, got {listen!r}")
    return f"{_WILDCARDS.get(host, host)}:{port}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m remote_leader.healthcheck",
        description="Exit 0 when the remote-leader server reports SERVING over the gRPC health protocol.",
    )
    parser.add_argument(
        "--address",
        default=None,
        help="HOST:PORT to dial (default: REMOTE_LEADER_LISTEN with a wildcard host replaced by loopback)",
    )
    parser.add_argument(
        "--service",
        default="",
        help='health service name: "" (the process) or remote_leader.v1.GroupLeader (state loaded)',
    )
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds for the whole check (default 3)")
    parser.add_argument(
        "--tls-ca",
        default=None,
        help="PEM roots to verify the server; enables TLS. Default when REMOTE_LEADER_TLS_CERT is set: "
        "that certificate (right for a self-signed one)",
    )
    parser.add_argument(
        "--tls-cert",
        default=None,
        help="PEM client certificate for a server that requires one (mTLS). Default when "
        "REMOTE_LEADER_TLS_CLIENT_CA is set: the server's own REMOTE_LEADER_TLS_CERT (it must be signed by "
        "that CA and allow client authentication)",
    )
    parser.add_argument("--tls-key", default=None, help="PEM key of --tls-cert (default: REMOTE_LEADER_TLS_KEY, as above)")
    parser.add_argument(
        "--tls-server-name",
        default=os.environ.get("REMOTE_LEADER_HEALTHCHECK_TLS_SERVER_NAME") or None,
        help="name the certificate must carry when dialling loopback "
        "(default: REMOTE_LEADER_HEALTHCHECK_TLS_SERVER_NAME, else the dialled host)",
    )
    return parser


def check(address: str, service: str = "", timeout: float = 3.0, tls: ClientTls | None = None) -> tuple[int, str]:
    """One Health/Check call (over ``tls`` when given): the exit status and a line saying why."""
    channel = tls.channel(address) if tls is not None else grpc.insecure_channel(address)
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = stub.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout, wait_for_ready=False
            )
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                # the health servicer's answer for a service name it does not know
                return EXIT_NOT_SERVING, f"{address} service {service!r}: SERVICE_UNKNOWN"
            return EXIT_UNREACHABLE, f"{address}: {error.code().name}: {error.details()}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    code = EXIT_SERVING if response.status == health_pb2.HealthCheckResponse.SERVING else EXIT_NOT_SERVING
    return code, f"{address} service {service!r}: {status}"


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return EXIT_SERVING if exit_.code == 0 else EXIT_USAGE
    listen = args.address or os.environ.get("REMOTE_LEADER_LISTEN") or DEFAULT_LISTEN
    tls_ca = args.tls_ca or os.environ.get("REMOTE_LEADER_TLS_CERT") or None
    client = None
    if args.tls_cert or args.tls_key:
        client = (args.tls_cert, args.tls_key)
    elif os.environ.get("REMOTE_LEADER_TLS_CLIENT_CA") and os.environ.get("REMOTE_LEADER_TLS_CERT"):
        client = (os.environ["REMOTE_LEADER_TLS_CERT"], os.environ.get("REMOTE_LEADER_TLS_KEY", ""))
    if args.timeout <= 0:
        print("healthcheck: --timeout: must be positive", file=sys.stderr)
        return EXIT_USAGE
    try:
        address = probe_address(listen)
        if client is not None and tls_ca is None:
            raise ValueError("--tls-cert/--tls-key: need --tls-ca (or REMOTE_LEADER_TLS_CERT) to dial over TLS")
        cert, key = client or (None, None)
        # ClientTls checks the files (names the flag) once, here, before any dialling
        tls = None if tls_ca is None else ClientTls(ca=Path(tls_ca), cert=Path(cert) if cert else None,
                                                     key=Path(key) if key else None, server_name=args.tls_server_name)
    except ValueError as error:
        print(f"healthcheck: {error}", file=sys.stderr)
        return EXIT_USAGE
    code, message = check(address, args.service, args.timeout, tls)
    print(f"healthcheck: {message}", file=sys.stdout if code == EXIT_SERVING else sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
