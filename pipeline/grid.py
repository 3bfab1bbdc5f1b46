"""The scenario grid: a small YAML file expanded into one ``RunSpec`` per run.

The driver of the sweep (``pipeline.sweep``) expands the grid (a list of small specs, never
data) and hands the runs to the executors. Every list under ``group`` and ``configs`` is an
axis; the runs are the cross product of the group axes, the events, the config axes and the
repetitions. A run's seed comes from its group point, event and repetition only, so that every
config is compared on exactly the same groups (common random numbers), in any grid.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from pipeline.rebalance_log import InvalidLog, latest_per_group
from pipeline.simulation import (
    MAX_CLIENTS,
    GroupShape,
    InvalidSpec,
    Rates,
    RunSpec,
    ScalingEvent,
    SimConfig,
    Timing,
    run_seed,
)

TOP_LEVEL = ("name", "repetitions", "timing", "group", "events", "configs", "from_log")
# The grid's own bounds (docs/pipeline.md, "Bounds"); each value is bounded in pipeline.simulation.
MAX_REPETITIONS = 10_000
MAX_RUNS = 100_000  # starting groups x events x configs x repetitions
MAX_SIMULATED_REBALANCES = 10_000_000  # runs x timing.max_rebalances: the sweep's worst case
_GROUP_DEFAULTS = {f.name: f.default for f in fields(GroupShape)}
_LOGGED_START_AXES = ("restore_rate", "append_rate", "changelog_offsets")


@dataclass(frozen=True, slots=True)
class Plan:
    """The expanded grid: the runs, and the combinations left out with the reason why."""

    name: str
    runs: tuple[RunSpec, ...]
    skipped: tuple[str, ...]
    axes: tuple[str, ...]  # the run-table columns that vary across the grid
    unrunnable: tuple[str, ...] = ()  # why combinations were skipped: each reason once, in grid order

    def nothing_runnable(self) -> str:
        """Why a plan has no run (every combination was skipped), for the refusal's message: the
        first few reasons, and how many more."""
        shown = "; ".join(self.unrunnable[:3]) or "no combination"
        more = len(self.unrunnable) - 3
        return f"{shown}; and {more} more" if more > 0 else shown


def load_grid(path: str | Path) -> Plan:
    """Read and expand a grid file; every problem is an ``InvalidSpec`` naming the field."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise InvalidSpec("--grid", f"cannot read {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise InvalidSpec("--grid", f"{path} is not a UTF-8 text (YAML) file") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise InvalidSpec("--grid", f"{path} is not valid YAML: {error}") from None
    return expand_grid(document, base=Path(path).parent)


def expand_grid(document: Any, base: Path = Path(".")) -> Plan:
    if not isinstance(document, Mapping):
        raise InvalidSpec("(grid)", "expected a mapping with group, events and configs")
    unknown = sorted(set(document) - set(TOP_LEVEL), key=str)  # YAML keys may be numbers too
    if unknown:
        raise InvalidSpec(str(unknown[0]), f"unknown grid key; expected one of {', '.join(TOP_LEVEL)}")
    name = str(document.get("name", "grid"))
    repetitions = document.get("repetitions", 1)
    if isinstance(repetitions, bool) or not isinstance(repetitions, int) or repetitions < 1:
        raise InvalidSpec("repetitions", f"expected an integer >= 1, got {repetitions!r}")
    if repetitions > MAX_REPETITIONS:
        raise InvalidSpec("repetitions", f"expected an integer <= {MAX_REPETITIONS}, got {repetitions!r}")
    timing = _build("timing", Timing, _section(document, "timing", "a mapping such as {max_rebalances: 100}"))
    group_axes = _axes("group", _section(document, "group", "a mapping of axis name to a value or a list"),
                       GroupShape)
    config_axes = _axes("configs", _section(document, "configs", "a mapping of axis name to a value or a list"),
                        SimConfig)
    events_raw = document.get("events")
    if not isinstance(events_raw, list) or not events_raw:
        raise InvalidSpec("events", "expected a non-empty list such as [scale_out:2, lose_rack]")
    if len(events_raw) > MAX_RUNS:
        raise InvalidSpec("events", f"expected at most {MAX_RUNS} events, got {len(events_raw)}")
    events = [ScalingEvent.parse(e) for e in events_raw]
    _refuse_repeats("events", [e.label() for e in events])
    per_start = (len(events), _size(config_axes), repetitions)
    _check_size(_size(group_axes), per_start, timing)
    configs = [_build("configs", SimConfig, point) for point in _product(config_axes)]

    starts: list[tuple[str, dict[str, Any], Any]] = []
    for point in _product(group_axes):
        shape = _build("group", GroupShape, point)
        grown = max((e.count for e in events if e.kind == "scale_out"), default=0)
        if shape.clients + grown > MAX_CLIENTS:
            raise InvalidSpec("events", f"group.clients {shape.clients} + scale_out:{grown} exceeds "
                                        f"{MAX_CLIENTS} clients")
        starts.append(("generated", point, shape))
    from_log = document.get("from_log") or []
    if not isinstance(from_log, list) or not all(isinstance(p, str) for p in from_log):
        raise InvalidSpec("from_log", "expected a list of rebalance-log files or directories")
    if from_log:
        # A logged start takes the rates, and the changelog size of tasks its record gives none,
        # from the group axes (pipeline.simulation.Rates).
        rate_points = {tuple(p.get(name, _GROUP_DEFAULTS[name]) for name in _LOGGED_START_AXES)
                       for p in _product(group_axes)}
        paths = [str((base / p) if not Path(p).is_absolute() else p) for p in from_log]
        try:
            logged = latest_per_group(paths)
        except InvalidLog as error:
            raise InvalidSpec("from_log", str(error).removeprefix("LOGS: ")) from None
        except OSError as error:
            raise InvalidSpec("from_log", f"cannot read {error.filename}: {error.strerror}") from None
        if not logged:
            raise InvalidSpec("from_log", f"no valid rebalance-log record in {', '.join(from_log)}")
        _check_size(len(starts) + len(logged) * len(rate_points), per_start, timing)
        for group_id, record in sorted(logged.items()):
            for values in sorted(rate_points, key=repr):
                point = dict(zip(_LOGGED_START_AXES, values, strict=True))
                starts.append((f"log:{group_id}", point, (record, _build("group", Rates, point))))

    runs, skipped, unrunnable = [], [], {}
    for (start, point, shape), event in itertools.product(starts, events):
        problem = _unrunnable(shape, event)
        if problem:
            skipped.append(" ".join(filter(None, (start, _describe(point), event.label()))) + f": {problem}")
            unrunnable.setdefault(problem)
            continue
        for rep, config in itertools.product(range(repetitions), configs):
            seed = run_seed(start, sorted(point.items()), event.label(), rep)
            run_id = f"{run_seed(seed, sorted(_config_items(config))):016x}"
            if isinstance(shape, GroupShape):
                runs.append(RunSpec(run_id, seed, event, config, timing, shape=shape,
                                    point={"start": start, "rep": rep}))
            else:
                record, rates = shape
                runs.append(RunSpec(run_id, seed, event, config, timing, start=record, rates=rates,
                                    point={"start": start, "rep": rep}))
    varying = [f"g_{k}" for k, v in group_axes.items() if len(v) > 1]
    varying += [f"c_{k}" for k, v in config_axes.items() if len(v) > 1]
    if len(events) > 1:
        varying.append("event")
    if from_log:
        varying.append("start")
    return Plan(name, tuple(runs), tuple(skipped), tuple(varying), tuple(unrunnable))


def _section(document: Mapping[str, Any], name: str, expected: str) -> Mapping[str, Any]:
    """A section of the grid, absent or empty meaning defaults; anything but a mapping is refused
    here, before its characters or items could be read as keys (``timing: abc``)."""
    value = document.get(name)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidSpec(name, f"expected {expected}, got {value!r}")
    return value


def _size(axes: Mapping[str, Sequence[Any]]) -> int:
    return math.prod(len(values) for values in axes.values())


def _check_size(starts: int, per_start: tuple[int, int, int], timing: Timing) -> None:
    """Refuse a grid whose sweep would be unbounded, before any run is built."""
    events, configs, repetitions = per_start
    runs = starts * events * configs * repetitions
    if runs > MAX_RUNS:
        raise InvalidSpec("(grid)", f"{starts} starting groups x {events} events x {configs} configs x "
                                    f"{repetitions} repetitions = {runs} runs; at most {MAX_RUNS}")
    if runs * timing.max_rebalances > MAX_SIMULATED_REBALANCES:
        raise InvalidSpec("timing.max_rebalances", f"{runs} runs x {timing.max_rebalances} rebalances may simulate "
                                                   f"more than {MAX_SIMULATED_REBALANCES} rebalances")


def _axes(section: str, raw: Any, cls: type) -> dict[str, list[Any]]:
    if not isinstance(raw, Mapping):
        raise InvalidSpec(section, "expected a mapping of axis name to a value or a list of values")
    known = {f.name for f in fields(cls)}
    axes = {}
    for key, value in raw.items():
        if key not in known:
            raise InvalidSpec(f"{section}.{key}", f"unknown axis; expected one of {', '.join(sorted(known))}")
        values = value if isinstance(value, list) else [value]
        if not values:
            raise InvalidSpec(f"{section}.{key}", "an axis needs at least one value")
        _refuse_repeats(f"{section}.{key}", values)
        axes[key] = values
    return axes


def _refuse_repeats(name: str, values: Sequence[Any]) -> None:
    """A value given twice on one axis (``clients: [6, 6]``, ``scale_out:1`` twice) would be the
    same runs twice, with the same seeds and ``run_id``s: joins on ``run_id`` would multiply rows
    and the config aggregates count them twice. Refused, naming the axis and the value (equal
    numbers are one value: 6 and 6.0 run alike)."""
    seen = set()
    for value in values:
        key = (type(value) is bool, value if isinstance(value, int | float | str) else repr(value))
        if key in seen:
            raise InvalidSpec(name, f"{value!r} is given twice; each value of an axis is one set of runs")
        seen.add(key)


def _product(axes: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    keys = sorted(axes)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(axes[k] for k in keys))]


def _build(section: str, cls: type, values: Mapping[str, Any]) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known, key=str)  # YAML keys may be numbers too
    if unknown:
        raise InvalidSpec(f"{section}.{unknown[0]}", f"unknown key; expected one of {', '.join(sorted(known))}")
    try:
        return cls(**values)
    except InvalidSpec as error:
        raise InvalidSpec(error.field if "." in error.field else f"{section}.{error.field}",
                          str(error).split(": ", 1)[1]) from None
    except TypeError as error:
        raise InvalidSpec(section, str(error)) from None


def _unrunnable(shape: Any, event: ScalingEvent) -> str:
    if not isinstance(shape, GroupShape):
        return ""
    if event.kind == "lose_rack" and shape.racks < 2:
        return f"lose_rack needs group.racks >= 2, got {shape.racks}"
    if event.kind == "scale_in" and event.count >= shape.clients:
        return f"scale_in:{event.count} would remove every client of group.clients {shape.clients}"
    return ""


def _describe(point: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(point.items()))


def _config_items(config: SimConfig) -> list[tuple[str, Any]]:
    return [(f.name, getattr(config, f.name)) for f in fields(config)]
