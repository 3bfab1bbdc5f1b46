"""Check that the example manifests start the sidecar the way the real CLI accepts.

kubernetes-validate proves a manifest is valid Kubernetes; this proves the sidecar inside it
would start: every container whose args begin with ``sidecar`` has its arguments parsed by
``remote-leader``'s own parser (client/cli.py), with ``$(VAR)`` references expanded from the
container's env the way the kubelet does (downward-API values get a sample pod name), its
``--endpoint`` parsed as the client parses it, and its ``--topology`` file, read from the
ConfigMap mounted at that path in the same manifest, loaded by the sidecar's own loader.

    python examples/k8s/check_sidecar_example.py examples/k8s/*.yaml

Exits 1 and names the container and the reason when a check fails, or when no manifest runs
a sidecar. Run by scripts/checks/40-deploy.sh.
"""

from __future__ import annotations

import re
import sys
from pathlib import PurePosixPath

import yaml

SAMPLE_POD_NAME = "orders-app-0"


def _expand(arg: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)


def _env(container: dict) -> dict[str, str]:
    values = {}
    for item in container.get("env", []):
        if "value" in item:
            values[item["name"]] = str(item["value"])
        elif item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            values[item["name"]] = SAMPLE_POD_NAME
    return values


def _topology_text(path: str, container: dict, pod: dict, config_maps: dict[str, dict]) -> str:
    wanted = PurePosixPath(path)
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        if wanted.parent != PurePosixPath(mount["mountPath"]):
            continue
        source = volumes.get(mount["name"], {}).get("configMap")
        if source is None:
            raise ValueError(f"--topology {path}: volume {mount['name']} is not a ConfigMap")
        data = config_maps.get(source["name"], {}).get("data", {})
        if wanted.name not in data:
            raise ValueError(f"--topology {path}: ConfigMap {source['name']} has no key {wanted.name}")
        return data[wanted.name]
    raise ValueError(f"--topology {path}: no volume is mounted at {wanted.parent}")


def check_container(container: dict, pod: dict, config_maps: dict[str, dict]) -> None:
    from assignor.model import HostInfo
    from client.sidecar import check_group, parse_member_document
    from remote_leader.cli import build_parser

    env = _env(container)
    argv = [_expand(a, env) for a in container["args"]]
    if unexpanded := [a for a in argv if "$(" in a]:
        raise ValueError(f"unexpanded variable in {unexpanded}")
    parser = build_parser("sidecar")
    parser.exit_on_error = False
    args = parser.parse_args(argv)
    if args.endpoint:
        HostInfo.parse(args.endpoint, "--endpoint")
    topology, _config = parse_member_document(
        yaml.safe_load(_topology_text(args.topology, container, pod, config_maps))
    )
    check_group(topology, args.group)


def main(paths: list[str]) -> int:
    checked, failed = 0, 0
    for path in paths:
        with open(path) as handle:
            documents = [d for d in yaml.safe_load_all(handle) if isinstance(d, dict)]
        config_maps = {d["metadata"]["name"]: d for d in documents if d.get("kind") == "ConfigMap"}
        for document in documents:
            pod = document.get("spec", {}).get("template", {}).get("spec") or (
                document.get("spec") if document.get("kind") == "Pod" else None
            )
            if not pod:
                continue
            for container in pod.get("initContainers", []) + pod.get("containers", []):
                if (container.get("args") or [None])[0] != "sidecar":
                    continue
                checked += 1
                where = f"{path}: {document['kind']} {document['metadata']['name']}, container {container['name']}"
                try:
                    check_container(container, pod, config_maps)
                except SystemExit as error:  # argparse already printed the reason
                    print(
                        f"sidecar example: {where}: arguments rejected (exit {error.code})", file=sys.stderr
                    )
                    failed += 1
                except Exception as error:  # noqa: BLE001 - report any rejection with its container
                    print(f"sidecar example: {where}: {type(error).__name__}: {error}", file=sys.stderr)
                    failed += 1
    if checked == 0:
        print("sidecar example: no container runs `remote-leader sidecar`", file=sys.stderr)
        return 1
    if not failed:
        print(
            f"sidecar example: {checked} sidecar container(s) accepted by the remote-leader CLI and topology loader"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
