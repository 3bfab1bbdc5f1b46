"""Check the chart's ServiceMonitor, which kubernetes-validate cannot: it bundles no CRD schemas.

Reads a rendered chart (multi-document YAML) on standard input, validates every ServiceMonitor
against servicemonitor.schema.json (a hand transcription of the CRD fields the chart uses, strict
about unknown fields) and then checks what the operator would only find out at run time: its
selector picks the chart's Service and each endpoint's port is a named port of that Service.
Exits 1 with the reason when any check fails, or when the input holds no ServiceMonitor.
Run by scripts/checks/40-deploy.sh.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import yaml

SCHEMA = json.loads((Path(__file__).with_name("servicemonitor.schema.json")).read_text())


def problems(documents: list[dict]) -> list[str]:
    monitors = [d for d in documents if d.get("kind") == "ServiceMonitor"]
    services = [d for d in documents if d.get("kind") == "Service" and d.get("apiVersion") == "v1"]
    if not monitors:
        return ["no ServiceMonitor in the rendered chart (is serviceMonitor.enabled set?)"]
    found: list[str] = []
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for monitor in monitors:
        name = monitor.get("metadata", {}).get("name", "?")
        for error in sorted(validator.iter_errors(monitor), key=lambda e: list(e.path)):
            location = "/".join(str(p) for p in error.path) or "(root)"
            found.append(f"ServiceMonitor {name}: {location}: {error.message}")
        if found:
            continue
        wanted = monitor["spec"]["selector"].get("matchLabels", {})
        selected = [
            s
            for s in services
            if wanted
            and all(s["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
            and s["spec"].get("clusterIP") != "None"
        ]
        if not selected:
            found.append(
                f"ServiceMonitor {name}: selector {wanted} matches no ClusterIP Service of the chart"
            )
        for service in selected:
            ports = {p.get("name") for p in service["spec"].get("ports", [])}
            for endpoint in monitor["spec"]["endpoints"]:
                if endpoint.get("port") not in ports:
                    found.append(
                        f"ServiceMonitor {name}: endpoint port {endpoint.get('port')!r} is not a port of "
                        f"Service {service['metadata']['name']} ({sorted(ports)})"
                    )
    return found


def main() -> int:
    documents = [d for d in yaml.safe_load_all(sys.stdin) if isinstance(d, dict)]
    found = problems(documents)
    for line in found:
        print(f"servicemonitor: {line}", file=sys.stderr)
    if not found:
        print("servicemonitor: schema subset, selector and port checks passed")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
