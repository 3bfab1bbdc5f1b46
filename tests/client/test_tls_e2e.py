"""The project's own tools over mTLS (docs/security.md): the worker library, the sidecar (upstream
and its local API), ``groups``/``describe`` and the health probe, each against a real server that
requires client certificates and ACLs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

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
