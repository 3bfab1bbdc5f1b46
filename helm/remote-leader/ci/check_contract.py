"""Check a rendered chart against docs/interfaces.md and the issue's deployment rules.

kubernetes-validate proves the manifests are well-formed Kubernetes; this proves they configure
*this* server: the server container sets exactly the REMOTE_LEADER_* variables of the settings
table in docs/interfaces.md (the TLS pair only when TLS is on), the ports and the state mount
agree with those settings, the readiness probe asks for remote_leader.v1.GroupLeader, the
grace period outlasts the drain, and the pod runs non-root on a read-only root filesystem.

    helm template ... | python check_contract.py docs/interfaces.md

Exits 1 and names every broken rule. Run by scripts/checks/40-deploy.sh.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

READINESS_SERVICE = "remote_leader.v1.GroupLeader"
TLS_VARIABLES = {"REMOTE_LEADER_TLS_CERT", "REMOTE_LEADER_TLS_KEY"}
#: Set only when the feature is on (docs/security.md); their absence is the documented default.
OPTIONAL_VARIABLES = {
    "REMOTE_LEADER_TLS_CLIENT_CA", "REMOTE_LEADER_AUTH_TOKEN_FILE", "REMOTE_LEADER_AUTH_JWT_KEY",
    "REMOTE_LEADER_AUTH_JWT_ALGORITHMS", "REMOTE_LEADER_AUTH_JWT_AUDIENCE", "REMOTE_LEADER_AUTH_JWT_ISSUER",
    "REMOTE_LEADER_ACL_FILE", "REMOTE_LEADER_METRICS_HOST", "REMOTE_LEADER_METRICS_TLS",
}


def documented_variables(interfaces: str) -> set[str]:
    """The environment column of the "Server settings" table."""
    section = interfaces.split("## Server settings", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`(REMOTE_LEADER_[A-Z_]+)`", section))


def _probe_service(probe: dict) -> str | None:
    if "grpc" in probe:
        return probe["grpc"].get("service", "")
    command = probe.get("exec", {}).get("command", [])
    return command[command.index("--service") + 1] if "--service" in command else None


def problems(documents: list[dict], documented: set[str]) -> list[str]:
    found: list[str] = []
    statefulsets = [d for d in documents if d.get("kind") == "StatefulSet"]
    services = [d for d in documents if d.get("kind") == "Service" and d["spec"].get("clusterIP") != "None"]
    if len(statefulsets) != 1 or len(services) != 1:
        return [
            f"expected one StatefulSet and one ClusterIP Service, got {len(statefulsets)} and {len(services)}"
        ]
    pod = statefulsets[0]["spec"]["template"]["spec"]
    server = next((c for c in pod["containers"] if c["name"] == "server"), None)
    if server is None:
        return ["no container named server"]
    env = {e["name"]: e.get("value") for e in server.get("env", []) if e["name"].startswith("REMOTE_LEADER_")}
    tls_on = bool(env.keys() & TLS_VARIABLES)  # one of the pair alone must show up as missing the other
    expected = (documented if tls_on else documented - TLS_VARIABLES) - OPTIONAL_VARIABLES
    if missing := sorted(expected - env.keys()):
        found.append(f"server env lacks {missing} (docs/interfaces.md)")
    if unknown := sorted(env.keys() - documented):
        found.append(f"server env sets {unknown}, not in docs/interfaces.md")
    if found:
        return found

    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    if str(ports.get("grpc")) != env["REMOTE_LEADER_LISTEN"].rpartition(":")[2]:
        found.append(f"grpc containerPort {ports.get('grpc')} is not the port of REMOTE_LEADER_LISTEN")
    metrics = int(env["REMOTE_LEADER_METRICS_PORT"])
    if metrics and ports.get("metrics") != metrics:
        found.append(
            f"metrics containerPort {ports.get('metrics')} is not REMOTE_LEADER_METRICS_PORT {metrics}"
        )
    mounts = {m["mountPath"]: m["name"] for m in server.get("volumeMounts", [])}
    if env["REMOTE_LEADER_STATE_DIR"] not in mounts:
        found.append(f"no volume mounted at REMOTE_LEADER_STATE_DIR {env['REMOTE_LEADER_STATE_DIR']}")
    if "/tmp" not in mounts:
        found.append("no writable /tmp mount for a read-only root filesystem")

    grace = pod.get("terminationGracePeriodSeconds", 30)
    if not grace > float(env["REMOTE_LEADER_DRAIN_TIMEOUT_S"]):
        found.append(
            f"terminationGracePeriodSeconds {grace} is not longer than the drain "
            f"({env['REMOTE_LEADER_DRAIN_TIMEOUT_S']} s)"
        )
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        if kind not in server:
            found.append(f"server has no {kind}")
    if "readinessProbe" in server and _probe_service(server["readinessProbe"]) != READINESS_SERVICE:
        found.append(f"readiness probe does not ask for {READINESS_SERVICE}")

    security = server.get("securityContext", {})
    if not (security.get("runAsNonRoot") or pod.get("securityContext", {}).get("runAsNonRoot")):
        found.append("runAsNonRoot is not set")
    if security.get("readOnlyRootFilesystem") is not True:
        found.append("readOnlyRootFilesystem is not true")

    service_ports = {p["name"]: p for p in services[0]["spec"]["ports"]}
    if service_ports.get("grpc", {}).get("appProtocol") != "grpc":
        found.append("Service port grpc lacks appProtocol: grpc")
    if metrics and "metrics" not in service_ports:
        found.append("Service has no metrics port")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: helm template ... | python check_contract.py docs/interfaces.md", file=sys.stderr)
        return 2
    documented = documented_variables(Path(argv[0]).read_text())
    if not documented:
        print(f"check_contract: no REMOTE_LEADER_* settings found in {argv[0]}", file=sys.stderr)
        return 1
    documents = [d for d in yaml.safe_load_all(sys.stdin) if isinstance(d, dict)]
    found = problems(documents, documented)
    for line in found:
        print(f"contract: {line}", file=sys.stderr)
    if not found:
        print(f"contract: {len(documented)} documented settings, ports, mounts, probes, grace period: passed")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
