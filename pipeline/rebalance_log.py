"""Reading the service's rebalance log (docs/interfaces.md, "Rebalance log"): plain Python.

One JSON line per completed rebalance, ``{"schema": 1, "group_id", "generation", "time_ms",
"compute_ms", "trigger", "input", "output"}`` with ``input`` a scenario document and ``output``
its result document. The analytics job (``pipeline.analytics``) runs ``record_metrics`` in the
executors, one line at a time; the grid (``pipeline.grid``) takes a real group's latest record
as a simulation start. Unknown fields are ignored, as the contract asks; a line that breaks the
contract becomes an error row naming the field, never an exception.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from assignor import UNKNOWN, InvalidInput
from assignor.balance import imbalance, is_balanced
from assignor.lag import MAX_LONG
from assignor.probing import Trigger
from assignor.scenario import parse_problem, parse_result

SCHEMA = 1
MEMBERSHIP_TRIGGERS = frozenset(trigger.value for trigger in Trigger if trigger.membership)
LOG_FILE = "rebalances.jsonl"
# Lag histogram buckets: 0, then decades 1-9, 10-99, ..., >= 1e9 (12 buckets).
LAG_BUCKETS = ("0", "1+", "10+", "100+", "1k+", "10k+", "100k+", "1M+", "10M+", "100M+", "1G+")
# time_ms is epoch milliseconds: 1970 up to the end of the year 9999.
MAX_TIME_MS = 253_402_300_799_999


class InvalidLog(ValueError):
    """A rebalance-log path that cannot be read, or logs holding no valid record."""


#: A cluster URL (``hdfs://``, ``s3a://``...): read by Spark where it is.
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path: str) -> bool:
    return bool(_URL.match(path)) and not path.startswith("file:")


def expand_paths(paths: Iterable[str]) -> list[str]:
    """Log files from arguments: files as given; a directory (a state dir, its ``rebalance-log/``
    or any folder) contributes ``rebalances.jsonl`` and its rotated ``.1``, ``.2``, ...; a cluster
    URL (``hdfs://``, ``s3a://``) names one file, read by Spark where it is. Every name is
    literal: nothing is a glob (``pipeline.analytics.stage_files``)."""
    files: list[str] = []
    for raw in paths:
        if is_url(raw):
            files.append(raw)
            continue
        path = Path(raw)
        if path.is_dir():
            folder = path / "rebalance-log" if (path / "rebalance-log").is_dir() else path
            found = sorted(p for p in folder.glob(f"{LOG_FILE}*") if p.is_file())
            if not found:
                raise InvalidLog(f"LOGS: no {LOG_FILE}* files in {raw}")
            files.extend(str(p.resolve()) for p in found)
        elif path.is_file():
            files.append(str(path.resolve()))
        else:
            raise InvalidLog(f"LOGS: no such file or directory: {raw}")
    return sorted(dict.fromkeys(files))


def parse_line(line: str) -> tuple[dict[str, Any] | None, str | None]:
    """A record, or why the line is not one (``"field: problem"``)."""
    text = line.strip()
    if not text:
        return None, None
    try:
        record = json.loads(text, parse_constant=_not_a_number, parse_float=_finite_float)
    except json.JSONDecodeError as error:
        return None, f"(line): not valid JSON: {error.msg}"
    except ValueError as error:  # NaN/Infinity, 1e999, or an integer of more than 4300 digits
        return None, f"(line): not valid JSON: {error}"
    except RecursionError:
        return None, "(line): not valid JSON: nested too deeply"
    if not isinstance(record, Mapping):
        return None, "(line): expected a JSON object"
    if record.get("schema") != SCHEMA:
        return None, f"schema: unsupported schema {record.get('schema')!r}; expected {SCHEMA}"
    for name, kind in (("group_id", str), ("generation", int), ("time_ms", int | float), ("trigger", str)):
        value = record.get(name)
        if isinstance(value, bool) or not isinstance(value, kind):
            return None, f"{name}: missing or of the wrong type ({_short(value)})"
    for name, maximum in (("generation", MAX_LONG), ("time_ms", MAX_TIME_MS)):
        if not 0 <= record[name] <= maximum:
            return None, f"{name}: out of range [0, {maximum}] ({_short(record[name])})"
    for name in ("input", "output"):
        if not isinstance(record.get(name), Mapping):
            return None, f"{name}: expected a scenario/result document"
    return dict(record), None


def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _out_of_range(metrics: Mapping[str, Any]) -> str | None:
    """The first metric Spark cannot store (a long beyond int64, a non-finite double), if any."""
    for name, value in metrics.items():
        values = value if isinstance(value, list) else [value]
        for item in values:
            if isinstance(item, bool):
                continue
            if isinstance(item, int) and not -MAX_LONG - 1 <= item <= MAX_LONG:
                return f"{name}: out of range ({_short(item)})"
            if isinstance(item, float) and not math.isfinite(item):
                return f"{name}: not a finite number ({item!r})"
    return None


def _lag_bucket(lag: int) -> int:
    return 0 if lag <= 0 else min(len(LAG_BUCKETS) - 1, 1 + int(math.log10(lag)))


def record_metrics(record: Mapping[str, Any]) -> dict[str, Any]:
    """What one rebalance did, measured against its own input (what the members reported).

    An active no member reported running (``unreported_actives``) is judged against the group's
    previous record (``pipeline.analytics.with_moves``): its owner there may have left. Raises
    ``InvalidInput`` (with the field) when the input or output breaks the format.
    """
    problem = parse_problem(record["input"])
    specs = {spec.id: spec for spec in problem.tasks}
    output = record["output"]
    result = parse_result(output, "output")
    members = {c.id: c for c in problem.clients}
    prev_owner = {t: c.id for c in problem.clients for t in c.prev_active}
    prev_holders = {(c.id, t) for c in problem.clients for t in c.prev_active | c.prev_standby}
    moved = new_replicas = warmups = restoring = cross_rack = 0
    unreported: list[str] = []
    owners: dict[str, str] = {}
    counts = dict.fromkeys(members, 0)
    for client_id, got in sorted(result.clients.items()):
        if client_id not in members:
            raise InvalidInput(f"output.clients.{client_id}", "client not in the input")
        rack = members[client_id].rack
        lags = members[client_id].lags
        for task in got.active:
            counts[client_id] += 1
            owners[str(task)] = client_id
            owner = prev_owner.get(task)
            if owner is None:
                unreported.append(str(task))
            elif owner != client_id:
                moved += 1
            spec = specs.get(task)
            lag = lags.get(task)
            if spec is not None and spec.stateful and (lag is None or lag.known_offsets != 0):
                restoring += 1
            if spec is not None:
                cross_rack += spec.cross_rack_partitions(rack)
        for task in got.standby + got.warmup:
            if (client_id, task) not in prev_holders:
                new_replicas += 1
        warmups += len(got.warmup)

    numeric: list[int] = []
    latest = unknown = 0
    for client in problem.clients:
        for lag in client.lags.values():
            if lag.running:
                latest += 1
            elif lag == UNKNOWN:
                unknown += 1
            else:
                numeric.append(lag.offsets)
    numeric.sort()
    histogram = [0] * len(LAG_BUCKETS)
    for lag in numeric:
        histogram[_lag_bucket(lag)] += 1
    threads = {c.id: c.threads for c in problem.clients}
    reported = result.rack_awareness.cross_rack_after if output.get("rack_awareness") else None
    trigger = record["trigger"]
    return {
        "group_id": record["group_id"],
        "generation": int(record["generation"]),
        "time_ms": int(record["time_ms"]),
        "compute_ms": _compute_ms(record),
        "trigger": trigger,
        "membership_trigger": trigger in MEMBERSHIP_TRIGGERS,
        "members": len(members),
        "member_set": hashlib.sha256("\n".join(sorted(members)).encode()).hexdigest()[:16],
        "threads": sum(threads.values()),
        "tasks": len(specs),
        "stateful_tasks": sum(1 for s in specs.values() if s.stateful),
        "actives_moved": moved,
        "unreported_actives": sorted(unreported),
        "active_owners": owners,
        "replicas_added": new_replicas,
        "warmups": warmups,
        "actives_restoring": restoring,
        "probing": result.probing_rebalance_needed,
        "cross_rack_partitions": cross_rack,
        "cross_rack_reported": reported,
        "imbalance": imbalance(counts, threads),
        "balanced": is_balanced(counts, threads, problem.config.balance_factor),
        "lag_reports": len(numeric) + latest + unknown,
        "lag_latest": latest,
        "lag_unknown": unknown,
        "lag_p50": _quantile(numeric, 0.5),
        "lag_p95": _quantile(numeric, 0.95),
        "lag_max": numeric[-1] if numeric else None,
        "lag_hist": histogram,
    }


def _compute_ms(record: Mapping[str, Any]) -> float | None:
    """The assignor's time, or None when the record has none (left out of means, not a 0)."""
    value = record.get("compute_ms")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput("compute_ms", f"expected milliseconds, got {_short(value)}")
    if value < 0:
        raise InvalidInput("compute_ms", f"negative ({_short(value)})")
    return float(value)


def _quantile(ordered: list[int], q: float) -> float | None:
    """Nearest-rank quantile of a sorted list."""
    if not ordered:
        return None
    return float(ordered[max(0, math.ceil(q * len(ordered)) - 1)])


def line_metrics(line: str, source: str = "") -> dict[str, Any] | None:
    """One log line to a metrics row, or an error row (``error`` set); None for a blank line."""
    record, error = parse_line(line)
    if error is None and record is None:
        return None
    if error is None:
        try:
            metrics = record_metrics(record)
            error = _out_of_range(metrics)
            if error is None:
                return {**metrics, "source": source, "error": None}
        except InvalidInput as problem:
            error = str(problem)
        except (TypeError, ValueError, AttributeError, ArithmeticError, RecursionError) as problem:
            error = f"(record): {problem}"
    return {"source": source, "error": error}


def latest_per_group(paths: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each group's latest record (by time, then generation): a real group to simulate from."""
    latest: dict[str, dict[str, Any]] = {}
    for path in expand_paths(paths):
        if is_url(path):
            raise InvalidLog(f"LOGS: {path}: a simulation starts from local log files only")
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                record, _ = parse_line(line)
                if record is None:
                    continue
                key = (record["time_ms"], record["generation"])
                held = latest.get(record["group_id"])
                if held is None or key > (held["time_ms"], held["generation"]):
                    latest[record["group_id"]] = record
    return {group: {"input": r["input"], "output": r["output"]} for group, r in latest.items()}
