"""The image's health probe against a real grpc.aio health servicer on 127.0.0.1, port 0.

The servicer is grpc's own (grpc_health), set the way docs/interfaces.md says the server sets
it, so the probe is checked against the protocol, not against itself.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from remote_leader.healthcheck import check, main, probe_address
from remote_leader.net import free_port
from remote_leader.tls import ClientTls

GROUP_LEADER = "remote_leader.v1.GroupLeader"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def _start(statuses: dict[str, int], credentials: grpc.ServerCredentials | None = None):
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    for service, status in statuses.items():
        await servicer.set(service, status)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    if credentials is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    return server, servicer, port


@pytest.mark.parametrize(
    ("statuses", "service", "expected"),
    [
        pytest.param({"": SERVING, GROUP_LEADER: SERVING}, "", 0, id="process-serving"),
        pytest.param({"": SERVING, GROUP_LEADER: SERVING}, GROUP_LEADER, 0, id="state-loaded-serving"),
        pytest.param({"": SERVING, GROUP_LEADER: NOT_SERVING}, GROUP_LEADER, 1, id="state-not-loaded"),
        pytest.param({"": NOT_SERVING, GROUP_LEADER: NOT_SERVING}, "", 1, id="draining"),
        pytest.param({"": SERVING}, "no.such.Service", 1, id="service-unknown"),
    ],
)
async def test_exit_status_follows_serving_status(statuses, service, expected):
    server, _, port = await _start(statuses)
    try:
        code, message = await asyncio.to_thread(check, f"127.0.0.1:{port}", service, 3.0)
    finally:
        await server.stop(None)
    assert code == expected, message


async def test_graceful_shutdown_turns_serving_into_not_serving():
    server, servicer, port = await _start({"": SERVING, GROUP_LEADER: SERVING})
    try:
        before, _ = await asyncio.to_thread(check, f"127.0.0.1:{port}", GROUP_LEADER)
        await servicer.enter_graceful_shutdown()
        after, message = await asyncio.to_thread(check, f"127.0.0.1:{port}", GROUP_LEADER)
    finally:
        await server.stop(None)
    assert (before, after) == (0, 1), message



def test_nobody_listening_is_unreachable():
    code, message = check(f"127.0.0.1:{free_port()}", "", 2.0)
    assert code == 2
    assert "UNAVAILABLE" in message or "DEADLINE_EXCEEDED" in message


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for DNS:remote-leader.test, as a Kubernetes TLS secret holds it."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=remote-leader.test",
            "-addext",
            "subjectAltName=DNS:remote-leader.test",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.mark.parametrize(
    ("use_ca", "server_name", "expected"),
    [
        pytest.param(True, "remote-leader.test", 0, id="tls-verified-by-name"),
        pytest.param(True, None, 2, id="tls-name-mismatch-on-loopback"),
        pytest.param(False, None, 2, id="plaintext-to-tls-server"),
    ],
)
async def test_tls(self_signed, use_ca, server_name, expected):
    cert, key = self_signed
    credentials = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
    server, _, port = await _start({"": SERVING}, credentials)
    try:
        tls = ClientTls(ca=cert, server_name=server_name) if use_ca else None
        code, message = await asyncio.to_thread(check, f"127.0.0.1:{port}", "", 3.0, tls)
    finally:
        await server.stop(None)
    assert code == expected, message


@pytest.mark.parametrize(
    ("listen", "dialled"),
    [
        pytest.param("0.0.0.0:50051", "127.0.0.1:50051", id="ipv4-wildcard"),
        pytest.param("[::]:50051", "[::1]:50051", id="ipv6-wildcard"),
        pytest.param(":7000", "127.0.0.1:7000", id="empty-host"),
        pytest.param("leader.svc:443", "leader.svc:443", id="named-host-kept"),
    ],
)
def test_probe_address(listen, dialled):
    assert probe_address(listen) == dialled


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        pytest.param(["--address", "no-port"], "--address", id="address-without-port"),
        pytest.param(["--address", "h:http"], "--address", id="address-port-not-a-number"),
        pytest.param(
            ["--address", "127.0.0.1:1", "--tls-ca", "/nonexistent/ca.crt"], "--tls-ca", id="missing-ca"
        ),
        pytest.param(["--address", "127.0.0.1:1", "--timeout", "0"], "--timeout", id="zero-timeout"),
        pytest.param(["--address", "127.0.0.1:1", "--tls-ca", "CA", "--tls-cert", "CERT"], "--tls-cert/--tls-key",
                     id="certificate-without-key"),
        pytest.param(["--address", "127.0.0.1:1", "--tls-cert", "CERT", "--tls-key", "KEY"], "--tls-ca",
                     id="client-certificate-without-ca"),
    ],
)
def test_bad_arguments_name_the_field(argv, field, capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("REMOTE_LEADER_TLS_CERT", raising=False)
    monkeypatch.chdir(tmp_path)
    for name in ("CA", "CERT", "KEY"):  # files that exist: the error is the missing pairing
        (tmp_path / name).write_text("pem")
    assert main(argv) == 3
    assert field in capsys.readouterr().err


async def test_module_reads_the_servers_listen_setting():
    """The Dockerfile's HEALTHCHECK: no flags, REMOTE_LEADER_LISTEN=0.0.0.0:PORT in the environment."""
    server, _, port = await _start({"": SERVING, GROUP_LEADER: SERVING})
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMOTE_LEADER_")}
    env["REMOTE_LEADER_LISTEN"] = f"0.0.0.0:{port}"
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "remote_leader.healthcheck",
            "--service",
            GROUP_LEADER,
            env=env,
            cwd=Path(__file__).resolve().parents[2],
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    finally:
        await server.stop(None)
    assert process.returncode == 0, stderr.decode()
    assert b"SERVING" in stdout
