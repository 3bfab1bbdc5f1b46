"""One self-contained HTML report per job: matplotlib figures embedded as base64 PNG, and tables.

Input is only the small aggregates the jobs computed in Spark (``sweep.report_data``,
``analytics.report_data``): plain dicts, so the report is testable without Spark and the
driver never holds the big tables.
"""

from __future__ import annotations

import base64
import html
import io
import math
import textwrap
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.8rem 0; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.5rem; text-align: right; }
th { background: #f4f4f4; } td.l, th.l { text-align: left; }
img { max-width: 100%; } .note { color: #666; font-size: 0.9rem; }
"""
MAX_LINES = 8  # curves per plot: the best-ranked configs, so the plot stays readable
SHOWN_SKIPPED = 50  # skipped combinations listed; the rest counted


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return f'<img alt="figure" src="data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}">'


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]], limit: int = 50,
          total: int | None = None) -> str:
    """The first ``limit`` rows; ``total``: how many the table has when ``rows`` are only its first."""
    if not rows:
        return '<p class="note">none</p>'
    head = "".join(f'<th class="{"l" if i == 0 else ""}">{html.escape(title)}</th>' for i, (_, title) in enumerate(columns))
    body = []
    for row in rows[:limit]:
        cells = "".join(f'<td class="{"l" if i == 0 else ""}">{html.escape(_fmt(row.get(key)))}</td>'
                        for i, (key, _) in enumerate(columns))
        body.append(f"<tr>{cells}</tr>")
    hidden = (len(rows) if total is None else total) - min(len(rows), limit)
    more = f'<p class="note">{hidden:,} more rows in the Parquet table</p>' if hidden > 0 else ""
    return f"<table><tr>{head}</tr>{''.join(body)}</table>{more}"


def page(title: str, sections: Sequence[tuple[str, str]]) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"]
    for heading, content in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>{content}")
    parts.append("</body></html>")
    return "".join(parts)


# ---------------------------------------------------------------- simulation sweep


def sweep_report(data: Mapping[str, Any]) -> str:
    counts = data["counts"]
    events = sorted({row["event"] for row in data["configs"]})
    ranked = {(row["event"], row["config"]): row["rank"] for row in data["configs"]}
    sections = [("Summary", (
        f"<p>{counts['runs']:,} runs, {counts['unsettled'] or 0:,} not settled within the limits, "
        f"{counts['errors'] or 0:,} could not run. Configs are ranked per event by: fewest unsettled runs, "
        "least mean task downtime, shortest median time to settle, fewest rebalances.</p>"
        + table(data["overall"], [("config", "config"), ("overall_rank", "overall rank"), ("mean_rank", "mean rank"),
                                  ("runs", "runs"), ("settled_share", "settled"),
                                  ("downtime_mean_task_s", "downtime task·s"),
                                  ("settle_time_p50_s", "settle p50 s"), ("rebalances_mean", "rebalances")])))]
    sections.append(("Convergence: share of runs settled over time", _convergence(data["curves"], events, ranked)))
    sections.append(("Tasks not running after each rebalance", _down_curves(data["down_curves"], events, ranked)))
    sections.append(("Task downtime by config", _downtime_bars(data["configs"], events)))
    for heat in data["heatmaps"]:
        sections.append((f"Heatmap: {axis_label(heat['y'])} × {axis_label(heat['x'])}", _heatmaps(heat, events)))
    for event in events:
        rows = [r for r in data["configs"] if r["event"] == event]
        sections.append((f"Ranking for {event}", table(rows, [
            ("config", "config"), ("rank", "rank"), ("runs", "runs"), ("settled_share", "settled"),
            ("settle_time_p50_s", "settle p50 s"), ("settle_time_p95_s", "settle p95 s"),
            ("rebalances_mean", "rebalances"), ("downtime_mean_task_s", "downtime task·s"),
            ("downtime_p95_task_s", "downtime p95"), ("offsets_restored_mean", "offsets restored"),
            ("peak_warmups_max", "peak warm-ups"), ("tasks_moved_mean", "moved"),
            ("cross_rack_mean", "cross-rack"), ("imbalance_mean", "imbalance")])))
    if data["skipped"] or data["errors"]:
        skipped = "".join(f"<li>{html.escape(s)}</li>" for s in data["skipped"][:SHOWN_SKIPPED])
        if len(data["skipped"]) > SHOWN_SKIPPED:
            skipped += f"<li>and {len(data['skipped']) - SHOWN_SKIPPED:,} more</li>"
        sections.append(("Skipped and failed runs", f"<ul>{skipped}</ul>" + table(
            data["errors"], [("error", "error"), ("count", "runs")], total=data.get("error_kinds"))))
    return page(f"remote-leader what-if sweep: {data['name']}", sections)


def _top_configs(event: str, configs: Sequence[str], ranked: Mapping[tuple[str, str], int]) -> list[str]:
    return sorted(configs, key=lambda c: (ranked.get((event, c), 10**9), c))[:MAX_LINES]


def _grid_of_axes(count: int, width: float = 5.2, height: float = 3.6) -> tuple[Any, list[Any]]:
    cols = min(2, max(1, count))
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False, layout="constrained")
    flat = [ax for row in axes for ax in row]
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat


_STYLES = [(ls, mk) for mk in ("o", "s", "^", "D", "v", "P", "X", "*") for ls in ("-", "--", ":", "-.")]
_STYLES = [_STYLES[i * 5 % len(_STYLES)] for i in range(len(_STYLES))]  # neighbours differ in both


#: Characters per legend line: wider legends than a panel made the layout shrink the plots
#: themselves to a sixth of the figure and cut the legends off at its edge (a new user's find).
LEGEND_WIDTH = 60


def _legend(ax: Any, count: int) -> None:
    """Readable legends: 9 pt, below the plot (long config names would squeeze it from the side),
    wrapped to the panel's width."""
    for line in ax.get_lines():
        line.set_label(textwrap.fill(str(line.get_label()), LEGEND_WIDTH))
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(0.0, -0.2), borderaxespad=0.0, frameon=False, ncol=1)


def _same_curves(series: Mapping[str, list[tuple[float, float]]], order: Sequence[str]) -> list[tuple[str, list]]:
    """Configs whose curves are identical draw one line labelled with all their names (a line
    drawn over another would hide it)."""
    merged: dict[tuple, list[str]] = {}
    for config in order:
        merged.setdefault(tuple(sorted(series[config])), []).append(config)
    return [(" = ".join(names), list(points)) for points, names in merged.items()]


def _event_lines(rows: Sequence[Mapping[str, Any]], events: Sequence[str], ranked: Mapping, x: str, y: str,
                 *, xlabel: str, ylabel: str, settled_share: bool) -> str:
    """One panel per event, one line per config (the best-ranked ones): x against y."""
    series: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        if row[x] is not None and row[y] is not None:
            series[(row["event"], row["config"])].append((row[x], row[y]))
    if len({t for points in series.values() for t, _ in points}) < 2:
        return ('<p class="note">no data to draw over time: every point falls at the same moment '
                "(the tables below have the numbers)</p>")
    if not settled_share and not any(v for points in series.values() for _, v in points):
        return f'<p class="note">nothing to draw: {ylabel} was 0 after every rebalance of every run</p>'
    lines = max(len({c for e, c in series if e == event}) for event in events)
    fig, axes = _grid_of_axes(len(events), width=10.0 if len(events) == 1 else 6.4,
                              height=3.6 + 0.3 * min(lines, MAX_LINES))
    for ax, event in zip(axes, events, strict=False):
        configs = _top_configs(event, [c for e, c in series if e == event], ranked)
        curves = _same_curves({c: series[(event, c)] for c in configs}, configs)
        for index, (label, points) in enumerate(curves):
            style, marker = _STYLES[index % len(_STYLES)]
            if settled_share:  # a CDF over log time
                ax.step([max(t, 1) for t, _ in points], [v for _, v in points], where="post", label=label,
                        linestyle=style, marker=marker, markersize=4, linewidth=1.6)
            else:
                ax.plot([t / 60 for t, _ in points], [v for _, v in points], label=label, linestyle=style,
                        marker=marker, markersize=4, linewidth=1.6)
        if settled_share:
            ax.set_xscale("log")
            ax.set_ylim(-0.02, 1.02)
            ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
        else:
            ax.set_ylim(bottom=0)
        ax.set_title(event, fontsize=11)
        ax.set_xlabel(xlabel, fontsize=10)
        ax.set_ylabel(ylabel, fontsize=10)
        ax.grid(alpha=0.3)
        _legend(ax, len(curves))
    return _png(fig)


def _convergence(curves: Sequence[Mapping[str, Any]], events: Sequence[str], ranked: Mapping) -> str:
    return _event_lines(curves, events, ranked, "t", "share", xlabel="seconds after the event",
                        ylabel="runs settled", settled_share=True)


def _down_curves(rows: Sequence[Mapping[str, Any]], events: Sequence[str], ranked: Mapping) -> str:
    return _event_lines(rows, events, ranked, "bucket", "tasks_down", xlabel="minutes after the event (1-minute buckets)",
                        ylabel="mean tasks restoring or unowned", settled_share=False)


def _downtime_bars(configs: Sequence[Mapping[str, Any]], events: Sequence[str]) -> str:
    if not configs:
        return '<p class="note">no runs</p>'
    if not any((c["downtime_mean_task_s"] or 0) or (c["downtime_p95_task_s"] or 0) for c in configs):
        return '<p class="note">nothing to draw: no task was down in any run of any config (0 task·s)</p>'
    count = len({c["config"] for c in configs})
    fig, axes = _grid_of_axes(len(events), width=10.0 if len(events) == 1 else 6.4, height=max(2.8, 0.42 * count + 1.4))
    for ax, event in zip(axes, events, strict=False):
        rows = sorted((r for r in configs if r["event"] == event), key=lambda r: r["rank"])[::-1]
        labels = [textwrap.fill(str(r["config"]), 34) for r in rows]
        means = [r["downtime_mean_task_s"] or 0.0 for r in rows]
        p95 = [r["downtime_p95_task_s"] or 0.0 for r in rows]
        ax.barh(range(len(rows)), means, color="#4c72b0", height=0.7, label="mean")
        ax.plot(p95, range(len(rows)), "k|", markersize=14, markeredgewidth=2, label="p95")
        ax.set_yticks(range(len(rows)), labels, fontsize=8)
        ax.set_xlim(left=0)
        ax.set_title(event, fontsize=11)
        ax.set_xlabel("task downtime (task·seconds)", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=9, frameon=False, loc="upper left", bbox_to_anchor=(0.0, -0.22), ncol=2)
    return _png(fig)


#: Grid axes in people's words (the grid's keys, with or without the group/config prefix).
AXIS_LABELS = {
    "clients": "members", "threads": "threads per member", "racks": "racks", "subtopologies": "subtopologies",
    "partitions": "partitions", "stateful_share": "stateful share", "standbys": "standby replicas",
    "changelog_offsets": "changelog size (offsets)", "lag": "standby lag at the start",
    "restore_rate": "restore rate (offsets/s)", "append_rate": "append rate (offsets/s)", "assignor": "assignor",
    "acceptable_recovery_lag": "acceptable recovery lag (offsets)", "max_warmup_replicas": "max warm-up replicas",
    "probing_interval_s": "probing interval (s)", "early_probe": "early probe",
    "min_probe_interval_s": "min probe interval (s)", "rack_strategy": "rack strategy",
}


def axis_label(name: str) -> str:
    bare = name[2:] if name[:2] in ("g_", "c_") else name
    return AXIS_LABELS.get(bare, bare.replace("_", " "))


def _heatmaps(heat: Mapping[str, Any], events: Sequence[str]) -> str:
    """Colour from zero (the reader's origin, not the smallest cell: a few percent must not look
    like a lot), numbers in each cell in a colour that stays readable on it."""
    x, y = heat["x"], heat["y"]
    xs = sorted({c[x] for c in heat["cells"]}, key=_sort_key)
    ys = sorted({c[y] for c in heat["cells"]}, key=_sort_key)
    if len(xs) * len(ys) < 2:
        return '<p class="note">no data: a single cell, nothing to compare</p>'
    fig, axes = _grid_of_axes(len(events) * 2, width=5.6, height=3.8)
    cmap = matplotlib.colormaps["viridis"]
    index = 0
    for event in events:
        cells = {(c[x], c[y]): c for c in heat["cells"] if c["event"] == event}
        for metric, title in (("downtime", "mean task downtime (task·s)"), ("settle", "mean time to settle (s)")):
            ax = axes[index]
            index += 1
            grid = [[_nan(cells.get((xv, yv), {}).get(metric)) for xv in xs] for yv in ys]
            finite = [v for row in grid for v in row if not math.isnan(v)]
            top = max(finite, default=0.0) or 1.0
            image = ax.imshow(grid, aspect="auto", cmap=cmap, origin="lower", vmin=0.0, vmax=top)
            ax.set_xticks(range(len(xs)), [_fmt(v) for v in xs], fontsize=9)
            ax.set_yticks(range(len(ys)), [_fmt(v) for v in ys], fontsize=9)
            ax.set_xlabel(axis_label(x), fontsize=10)
            ax.set_ylabel(axis_label(y), fontsize=10)
            ax.set_title(f"{event}: {title}", fontsize=10)
            for row_index, row in enumerate(grid):
                for col_index, value in enumerate(row):
                    if not math.isnan(value):
                        r, g, b, _ = cmap(value / top)
                        ink = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
                        ax.text(col_index, row_index, _fmt(value), ha="center", va="center", color=ink, fontsize=9)
            fig.colorbar(image, ax=ax)
    return _png(fig)


def _nan(value: Any) -> float:
    return float("nan") if value is None else float(value)


def _sort_key(value: Any) -> tuple:
    return (0, value, "") if isinstance(value, int | float) and not isinstance(value, bool) else (1, 0, str(value))


# ---------------------------------------------------------------- rebalance-log analytics


def analytics_report(data: Mapping[str, Any]) -> str:
    counts = data["counts"]
    sections = [("Summary", (
        f"<p>{counts['records']:,} rebalances of {counts['groups']:,} groups from {counts['files']:,} files; "
        f"{counts['bad_lines']:,} lines could not be read, {counts['duplicates']:,} duplicate records dropped.</p>"
        + table(data["groups"], [
            ("group_id", "group"), ("rebalances", "rebalances"), ("per_hour", "per hour"),
            ("mean_interval_s", "mean interval s"), ("tasks_moved_mean", "moved / rebalance"),
            ("tasks_moved_max", "moved max"), ("warmups_max", "warm-ups max"), ("episodes", "changes"),
            ("settle_p50_s", "to settled p50 s"), ("settle_max_s", "to settled max s"),
            ("cross_rack_last", "cross-rack (last)"), ("imbalance_last", "imbalance (last)"),
            ("lag_p95_max", "lag p95 (max)")])))]
    bucket = _duration(data.get("bucket_s", 3600))
    shown = _timeline_note(data)
    sections.append((f"Rebalances over time ({bucket} buckets)",
                     _timeline(data["timeline"], "rebalances", f"rebalances per {bucket}",
                               zero_every_s=data.get("bucket_s", 3600)) + shown))
    sections.append((f"Warm-ups in flight over time ({bucket} buckets)",
                     _timeline(data["timeline"], "warmups_max", "most warm-ups in flight") + shown))
    sections.append((f"Imbalance over time ({bucket} buckets)",
                     _timeline(data["timeline"], "imbalance_mean", "mean imbalance (tasks per thread)") + shown))
    sections.append(("Tasks moved per rebalance", _histogram(data["moved_hist"]) + (
        '<p class="note">moved: an active on another member than its previous owner (the member that reported '
        "running it, or the one the group's previous record placed it on); an active with no previous owner "
        "(the group's first assignment, a new task) is placed, not moved</p>")))
    sections.append(("Lag distribution (reported lags)", _lag_bars(data["lag_hist"], data["lag_buckets"])))
    sections.append(("From a membership change to settled",
                     _episodes(data["episode_boxes"], data["episode_groups"]) + table(data["episodes"], [
                         ("group_id", "group"), ("start_generation", "from gen"), ("end_generation", "to gen"),
                         ("start_trigger", "trigger"), ("rebalances", "rebalances"), ("settle_s", "to settled s"),
                         ("settled", "settled")], total=data["episodes_total"])))
    if data["bad"]:
        sections.append(("Lines that could not be read", table(data["bad"], [("error", "problem"), ("count", "lines")])))
    return page("remote-leader rebalance analytics", sections)


def _duration(seconds: int) -> str:
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def with_empty_buckets(points: Sequence[tuple[float, float]], bucket_s: float) -> list[tuple[float, float]]:
    """A count per bucket drawn as steps: a bucket with no record is a 0, not the previous bucket's
    count carried across the gap (only the first empty bucket of a gap is needed for the step)."""
    ordered = sorted(points)
    filled = []
    for (t, value), following in zip(ordered, [*ordered[1:], None], strict=True):
        filled.append((t, value))
        if following is not None and following[0] > t + bucket_s:
            filled.append((t + bucket_s, 0.0))
    return filled


def _timeline_note(data: Mapping[str, Any]) -> str:
    """Which groups the timelines draw, when not all of them."""
    drawn = len({row["group_id"] for row in data["timeline"]})
    total, too_long = data["timeline_groups"], data["timeline_too_long"]
    if drawn == total:
        return ""
    note = f"{drawn:,} of {total:,} groups drawn, those with the most buckets, each whole"
    if too_long:
        note += (f"; {too_long:,} with more than {data['timeline_points']:,} buckets left out (a larger "
                 "--bucket-s draws them)")
    return f'<p class="note">{note}; the timeline table has every group</p>'


def _timeline(rows: Sequence[Mapping[str, Any]], metric: str, label: str, zero_every_s: float | None = None) -> str:
    """A metric per group over time. A count per bucket (``zero_every_s``: the bucket) is 0 in an
    empty bucket; a state such as imbalance holds from one rebalance to the next, so it carries."""
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        series[row["group_id"]].append((row["bucket_ms"] / 1000.0, row[metric] or 0.0))
    if zero_every_s:
        series = defaultdict(list, {g: with_empty_buckets(p, zero_every_s) for g, p in series.items()})
    if len({t for points in series.values() for t, _ in points}) < 2:
        return '<p class="note">no data to draw over time: all records fall in one bucket (the tables have the numbers)</p>'
    fig, ax = plt.subplots(figsize=(10, 3.8), layout="constrained")
    groups = sorted(series, key=lambda g: (-len(series[g]), g))[:MAX_LINES]
    start = min(t for g in groups for t, _ in series[g])
    end = max(t for g in groups for t, _ in series[g])
    scale, unit = (60.0, "minutes") if end - start >= 600 else (1.0, "seconds")
    if end - start >= 2 * 86400:
        scale, unit = 3600.0, "hours"
    for index, group in enumerate(sorted(groups)):
        points = sorted(series[group])
        style, marker = _STYLES[index % len(_STYLES)]
        ax.step([(t - start) / scale for t, _ in points], [v for _, v in points], where="post", marker=marker,
                linestyle=style, markersize=4, label=group)
    ax.set_xlabel(f"{unit} since the first record", fontsize=10)
    ax.set_ylabel(label, fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    _legend(ax, len(groups))
    return _png(fig)


def _histogram(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return '<p class="note">no records</p>'
    fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
    ax.bar([r["tasks_moved"] for r in rows], [r["count"] for r in rows], color="#4c72b0")
    ax.set_xlabel("tasks moved in the rebalance", fontsize=10)
    ax.set_ylabel("rebalances", fontsize=10)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    return _png(fig)


def _lag_bars(rows: Sequence[Mapping[str, Any]], buckets: Sequence[str]) -> str:
    if not rows:
        return '<p class="note">no lags reported</p>'
    fig, ax = plt.subplots(figsize=(9, 3.4), layout="constrained")
    groups = sorted(rows, key=lambda r: r["group_id"])[:MAX_LINES]
    width = 0.8 / max(1, len(groups))
    shown = (f'<p class="note">the first {len(groups)} of {len(rows):,} groups by name; the lags table has '
             "every group</p>") if len(rows) > len(groups) else ""
    for index, row in enumerate(groups):
        ax.bar([i + index * width for i in range(len(buckets))], row["hist"], width=width, label=row["group_id"])
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(buckets))], buckets)
    ax.set_xlabel("reported lag (offsets); 'latest' and 'unknown' not counted", fontsize=10)
    ax.set_ylabel("replica reports", fontsize=10)
    ax.tick_params(axis="x", labelsize=8, labelrotation=30)
    _legend(ax, len(groups))
    return _png(fig) + shown


def _episodes(boxes: Sequence[Mapping[str, Any]], groups: int) -> str:
    """One box per group from all its settled episodes (quartiles computed in Spark), whiskers
    at the fastest and the slowest."""
    if not boxes:
        return '<p class="note">no completed membership changes</p>'
    stats = [{"label": f"{b['group_id']} ({b['episodes']:,})", "whislo": b["min"], "q1": b["quartiles"][0],
              "med": b["quartiles"][1], "q3": b["quartiles"][2], "whishi": b["max"], "fliers": []}
             for b in sorted(boxes, key=lambda b: b["group_id"], reverse=True)]  # drawn bottom up
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(stats) + 1.5), layout="constrained")
    ax.bxp(stats, orientation="horizontal")
    ax.set_xlabel("seconds from the membership change to the first rebalance needing no probe")
    shown = "every group" if len(boxes) == groups else (
        f"{len(boxes)} of {groups:,} groups, those with the most settled changes")
    return _png(fig) + (f'<p class="note">{shown}, each from all its settled changes (their count in brackets); '
                        "box: quartiles, whiskers: fastest and slowest</p>")
