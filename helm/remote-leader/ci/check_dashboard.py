"""Check the Grafana dashboard the chart ships (dashboards/remote-leader.json) in a rendered chart.

With ``grafanaDashboard.enabled`` the chart must render exactly one ConfigMap carrying the
sidecar's label whose data is a valid dashboard: a uid and title, unique panel ids, panels
inside Grafana's 24-column grid without overlapping, every query on the ``${datasource}``
variable, and every metric a query names exported by this server (the names are read from the
server's own Prometheus registry, so a renamed metric fails here, not on an operator's screen).
With ``--expect-none`` (the default values) it must render no such ConfigMap.

    helm template ... | python check_dashboard.py [--expect-none]

Exits 1 and names every broken rule. Run by scripts/checks/40-deploy.sh.
"""

from __future__ import annotations

import json
import re
import sys

import yaml

SIDECAR_LABEL = "grafana_dashboard"
_PROMQL_WORDS = {
    "sum", "by", "rate", "increase", "count", "histogram_quantile", "le", "max", "min", "avg", "without",
    "group", "trigger", "reason", "method", "code", "label_values", "instance",
}


def exported_metric_names() -> set[str]:
    """Every sample name the server's registry can expose (counters as _total, histograms as
    _bucket/_sum/_count), whether or not a sample exists yet."""
    from server.observability import Metrics

    names: set[str] = set()
    for family in Metrics().registry.collect():
        if family.type == "counter":
            names |= {f"{family.name}_total", f"{family.name}_created"}
        elif family.type == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count", f"{family.name}_created"}
        else:
            names.add(family.name)
    return names


def metric_names_in(expr: str) -> set[str]:
    expr = re.sub(r'"[^"]*"', '""', expr)  # label values
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    return {word for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr) if word.startswith("remote_leader_")}


def check_dashboard(dashboard: dict, exported: set[str]) -> list[str]:
    problems = []
    for key in ("uid", "title", "panels", "schemaVersion"):
        if not dashboard.get(key):
            problems.append(f"dashboard: no {key}")
    variables = {v.get("name") for v in dashboard.get("templating", {}).get("list", [])}
    if "datasource" not in variables:
        problems.append("dashboard: no 'datasource' variable (the dashboard must not name one Prometheus)")
    queries = [str(v.get("definition", "")) for v in dashboard.get("templating", {}).get("list", [])]
    ids, cells = set(), set()
    for panel in dashboard.get("panels", []):
        where = f"panel {panel.get('id')} {panel.get('title')!r}"
        if panel.get("id") in ids:
            problems.append(f"{where}: duplicate id")
        ids.add(panel.get("id"))
        grid = panel.get("gridPos", {})
        x, y, w, h = (grid.get(k) for k in ("x", "y", "w", "h"))
        if None in (x, y, w, h) or x < 0 or w < 1 or x + w > 24 or h < 1:
            problems.append(f"{where}: gridPos {grid} outside Grafana's 24 columns")
            continue
        for cell in {(cx, cy) for cx in range(x, x + w) for cy in range(y, y + h)}:
            if cell in cells:
                problems.append(f"{where}: overlaps another panel at {cell}")
                break
            cells.add(cell)
        targets = panel.get("targets") or []
        if not targets:
            problems.append(f"{where}: no queries")
        for target in targets:
            if target.get("datasource", {}).get("uid") != "${datasource}":
                problems.append(f"{where}: query {target.get('refId')} does not use ${{datasource}}")
            queries.append(str(target.get("expr", "")))
    for expr in queries:
        for name in sorted(metric_names_in(expr) - exported):
            problems.append(f"query {expr!r}: the server exports no metric {name}")
    return problems


def main(argv: list[str]) -> int:
    expect_none = "--expect-none" in argv
    documents = [d for d in yaml.safe_load_all(sys.stdin) if isinstance(d, dict)]
    maps = [d for d in documents if d.get("kind") == "ConfigMap"
            and SIDECAR_LABEL in ((d.get("metadata") or {}).get("labels") or {})]
    if expect_none:
        if maps:
            print("check_dashboard: the default values render a dashboard ConfigMap (it must be off by default)", file=sys.stderr)
            return 1
        print("check_dashboard: no dashboard by default")
        return 0
    if len(maps) != 1:
        print(f"check_dashboard: expected one ConfigMap labelled {SIDECAR_LABEL}, found {len(maps)}", file=sys.stderr)
        return 1
    data = maps[0].get("data") or {}
    if list(data) != ["remote-leader.json"]:
        print(f"check_dashboard: expected data key remote-leader.json, found {list(data)}", file=sys.stderr)
        return 1
    try:
        dashboard = json.loads(data["remote-leader.json"])
    except json.JSONDecodeError as error:
        print(f"check_dashboard: remote-leader.json is not JSON: {error}", file=sys.stderr)
        return 1
    problems = check_dashboard(dashboard, exported_metric_names())
    for problem in problems:
        print(f"check_dashboard: {problem}", file=sys.stderr)
    if not problems:
        print(f"check_dashboard: {len(dashboard['panels'])} panels, every query on metrics the server exports")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
