"""The project's own tools over mTLS (docs/security.md): the worker library, the sidecar (upstream
and its local API), ``groups``/``describe`` and the health probe, each against a real server that
requires client certificates and ACLs."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import structlog
from structlog.testing import capture_logs

from assignor.model import TaskId
from client.lags import StaticLagSource
from client.member import GroupMember
from remote_leader import healthcheck
from remote_leader.pki import DevCa
from remote_leader.sidecar.v1 import sidecar_pb2 as spb
from remote_leader.sidecar.v1 import sidecar_pb2_grpc as spb_grpc
from remote_leader.tls import ClientTls
from tests.client.conftest import member_config, start_leader
from tests.client.test_sidecar_e2e import start_sidecar

ROOT = Path(__file__).resolve().parents[2]
ACL = """
acls:
  - principal: worker.corp
    operations: [member, describe]
    group: g
  - principal: operator
    operations: [describe]
    group: "*"
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    ca = DevCa(directory)
    return {"ca": ca, "server": ca.server(), "worker": ca.issue("worker", dns=("worker.corp",)),
            "operator": ca.issue("operator", cn="operator"), "sidecar-local": ca.server("sidecar-local")}


@pytest.fixture
async def secure_leader(tmp_path, pki):
    acl = tmp_path / "acl.yaml"
    acl.write_text(ACL)
    server = await start_leader(tmp_path / "leader", tls_cert=pki["server"].cert, tls_key=pki["server"].key,
                                tls_client_ca=pki["ca"].cert, acl_file=acl)
    try:
        yield server, f"127.0.0.1:{server.port}"
    finally:
        await server.stop(grace_s=0.5)


def _tls(pki, who: str) -> ClientTls:
    return ClientTls(ca=pki["ca"].cert, cert=pki[who].cert, key=pki[who].key, server_name="localhost")


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "remote_leader.cli", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})


async def test_worker_library_and_cli_over_mtls(secure_leader, pki):
    server, address = secure_leader
    member = GroupMember(address, member_config("g", 0, partitions=4), StaticLagSource({}), tls=_tls(pki, "worker"))
    await member.start()
    try:
        assignment = await asyncio.wait_for(member.wait_for_assignment(lambda a: bool(a.active)), 20)
        assert set(assignment.active) == {TaskId(0, p) for p in range(4)}
        ca, op = pki["ca"], pki["operator"]
        tls_flags = ["--tls-ca", str(ca.cert), "--tls-cert", str(op.cert), "--tls-key", str(op.key), "--tls-server-name", "localhost"]
        groups = await asyncio.to_thread(_cli, "groups", "--server", address, *tls_flags)
        assert groups.returncode == 0, groups.stderr
        assert [g["group_id"] for g in json.loads(groups.stdout)["groups"]] == ["g"]
        described = await asyncio.to_thread(_cli, "describe", "g", "--server", address, *tls_flags)
        assert described.returncode == 0, described.stderr
        assert len(json.loads(described.stdout)["group"]["members"]) == 1
        plaintext = await asyncio.to_thread(_cli, "groups", "--server", address)
        assert plaintext.returncode == 1 and "UNAVAILABLE" in plaintext.stderr
        assert "if it requires TLS, pass --tls-ca" in plaintext.stderr  # the operator is told why
    finally:
        await member.close()


async def test_health_probe_presents_a_client_certificate(secure_leader, pki):
    _server, address = secure_leader
    srv = pki["server"]
    code, message = await asyncio.to_thread(healthcheck.check, address, "", 5.0,
                                            ClientTls(ca=pki["ca"].cert, cert=srv.cert, key=srv.key, server_name="localhost"))
    assert code == healthcheck.EXIT_SERVING, message
    code, message = await asyncio.to_thread(healthcheck.check, address, "", 5.0,
                                            ClientTls(ca=pki["ca"].cert, server_name="localhost"))
    assert code == healthcheck.EXIT_UNREACHABLE, message


async def test_sidecar_upstream_and_local_api_over_mtls(secure_leader, pki, tmp_path):
    _server, address = secure_leader
    worker, local, ca = pki["worker"], pki["sidecar-local"], pki["ca"]
    process, local_address = await start_sidecar(
        tmp_path, address, "--tls-ca", str(ca.cert), "--tls-cert", str(worker.cert), "--tls-key", str(worker.key),
        "--tls-server-name", "localhost", "--local-tls-cert", str(local.cert), "--local-tls-key", str(local.key),
        "--local-tls-client-ca", str(ca.cert))
    try:
        async with _tls(pki, "operator").aio_channel(local_address) as channel:
            sidecar = spb_grpc.SidecarServiceStub(channel)
            for _ in range(200):
                got = await sidecar.GetAssignment(spb.GetAssignmentRequest(), timeout=5)
                if got.has_assignment:
                    break
                await asyncio.sleep(0.05)
            assert {TaskId(t.subtopology, t.partition) for t in got.assignment.active} == {TaskId(0, p) for p in range(4)}
        async with ClientTls(ca=ca.cert, server_name="localhost").aio_channel(local_address) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:  # no client certificate: refused
                await spb_grpc.SidecarServiceStub(channel).GetAssignment(spb.GetAssignmentRequest(), timeout=5)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 20)


async def _join_retries(logs: list[dict], count: int, timeout_s: float = 20.0) -> list[dict]:
    for _ in range(int(timeout_s / 0.05)):
        retries = [entry for entry in logs if entry["event"] == "member.join.retry"]
        if len(retries) >= count:
            return retries
        await asyncio.sleep(0.05)
    raise AssertionError(f"fewer than {count} member.join.retry: {logs}")


async def test_a_plaintext_member_at_a_tls_server_is_told_to_pass_the_ca(tmp_path, pki):
    server = await start_leader(tmp_path / "leader", tls_cert=pki["server"].cert, tls_key=pki["server"].key)
    with capture_logs() as logs:
        member = GroupMember(f"127.0.0.1:{server.port}", member_config("g", 0), StaticLagSource({}))
        await member.start()
        try:
            retries = await _join_retries(logs, 2)
        finally:
            await member.close()
            await server.stop(grace_s=0.5)
    for retry in retries:  # grpc says only UNAVAILABLE ... "Socket closed": the hint says why
        assert retry["log_level"] == "warning" and "Socket closed" in retry["message"], retry
        assert "if it requires TLS, pass --tls-ca" in retry["hint"], retry


async def test_no_tls_hint_when_the_server_is_simply_down(tmp_path):
    with socket.socket() as probe:  # a port nobody listens on: the connection is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    with capture_logs() as logs:
        member = GroupMember(f"127.0.0.1:{port}", member_config("g", 0), StaticLagSource({}))
        await member.start()
        try:
            retries = await _join_retries(logs, 2)
        finally:
            await member.close()
    for retry in retries:
        assert retry["log_level"] == "info" and "hint" not in retry, retry
        assert retry["code"] == "UNAVAILABLE" and "Connection refused" in retry["message"], retry


async def test_a_plaintext_sidecar_at_a_tls_server_logs_the_tls_flag(secure_leader, tmp_path):
    _server, address = secure_leader
    process, _local = await start_sidecar(tmp_path, address)  # no --tls-* flags; --log-level warning
    seen: list[bytes] = []
    try:
        while not any(b"member.join.retry" in line for line in seen):
            seen.append(await asyncio.wait_for(process.stderr.readline(), 20))
            assert seen[-1], seen  # the sidecar exited
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 20)
    assert b"if it requires TLS, pass --tls-ca" in seen[-1], seen
