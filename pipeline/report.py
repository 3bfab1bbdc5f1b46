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
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.8rem 0; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.5rem; text-align: right; }
th { background: #f4f4f4; } td.l, th.l { text-align: left; }
img { max-width: 100%; } .note { color: #666; font-size: 0.9rem; }
"""
MAX_LINES = 8  # curves per plot: the best-ranked configs, so the plot stays readable


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
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


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]], limit: int = 50) -> str:
    if not rows:
        return '<p class="note">none</p>'
    head = "".join(f'<th class="{"l" if i == 0 else ""}">{html.escape(title)}</th>' for i, (_, title) in enumerate(columns))
    body = []
    for row in rows[:limit]:
        cells = "".join(f'<td class="{"l" if i == 0 else ""}">{html.escape(_fmt(row.get(key)))}</td>'
                        for i, (key, _) in enumerate(columns))
        body.append(f"<tr>{cells}</tr>")
    more = f'<p class="note">{len(rows) - limit} more rows in the Parquet table</p>' if len(rows) > limit else ""
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
        sections.append((f"Heatmap: {heat['y']} × {heat['x']}", _heatmaps(heat, events)))
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
        skipped = "".join(f"<li>{html.escape(s)}</li>" for s in data["skipped"][:50])
        sections.append(("Skipped and failed runs", f"<ul>{skipped}</ul>" + table(
            data["errors"], [("error", "error"), ("count", "runs")])))
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


def _event_lines(rows: Sequence[Mapping[str, Any]], events: Sequence[str], ranked: Mapping, x: str, y: str,
                 *, xlabel: str, ylabel: str, settled_share: bool) -> str:
    """One panel per event, one line per config (the best-ranked ones): x against y."""
    if not rows:
        return '<p class="note">no data</p>'
    series: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        series[(row["event"], row["config"])].append((row[x], row[y]))
    fig, axes = _grid_of_axes(len(events))
    for ax, event in zip(axes, events, strict=False):
        configs = [c for e, c in series if e == event]
        for config in _top_configs(event, configs, ranked):
            points = sorted(series[(event, config)])
            if settled_share:  # a CDF over log time
                ax.step([max(t, 1) for t, _ in points], [v for _, v in points], where="post", label=config)
            else:
                ax.plot([t / 60 for t, _ in points], [v for _, v in points], marker=".", label=config)
        if settled_share:
            ax.set_xscale("log")
            ax.set_ylim(-0.02, 1.02)
        ax.set_title(event)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=5, loc="lower right" if settled_share else "upper right")
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
    fig, axes = _grid_of_axes(len(events), height=max(2.5, 0.35 * len({c["config"] for c in configs}) + 1))
    for ax, event in zip(axes, events, strict=False):
        rows = sorted((r for r in configs if r["event"] == event), key=lambda r: r["rank"])[::-1]
        labels = [r["config"] for r in rows]
        means = [r["downtime_mean_task_s"] or 0.0 for r in rows]
        p95 = [r["downtime_p95_task_s"] or 0.0 for r in rows]
        ax.barh(range(len(rows)), means, color="#4c72b0", label="mean")
        ax.plot(p95, range(len(rows)), "k|", markersize=12, label="p95")
        ax.set_yticks(range(len(rows)), labels, fontsize=6)
        ax.set_title(event)
        ax.set_xlabel("task downtime, task·seconds")
        ax.legend(fontsize=7)
    return _png(fig)


def _heatmaps(heat: Mapping[str, Any], events: Sequence[str]) -> str:
    x, y = heat["x"], heat["y"]
    xs = sorted({c[x] for c in heat["cells"]}, key=_sort_key)
    ys = sorted({c[y] for c in heat["cells"]}, key=_sort_key)
    fig, axes = _grid_of_axes(len(events) * 2, width=5.0, height=3.4)
    index = 0
    for event in events:
        cells = {(c[x], c[y]): c for c in heat["cells"] if c["event"] == event}
        for metric, title in (("downtime", "mean downtime task·s"), ("settle", "mean settle s")):
            ax = axes[index]
            index += 1
            grid = [[_nan(cells.get((xv, yv), {}).get(metric)) for xv in xs] for yv in ys]
            image = ax.imshow(grid, aspect="auto", cmap="viridis", origin="lower")
            ax.set_xticks(range(len(xs)), [str(v) for v in xs], fontsize=7)
            ax.set_yticks(range(len(ys)), [str(v) for v in ys], fontsize=7)
            ax.set_xlabel(x)
            ax.set_ylabel(y)
            ax.set_title(f"{event}: {title}", fontsize=8)
            for row_index, row in enumerate(grid):
                for col_index, value in enumerate(row):
                    if not math.isnan(value):
                        ax.text(col_index, row_index, _fmt(value), ha="center", va="center", color="w", fontsize=6)
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
    sections.append(("Rebalances over time", _timeline(data["timeline"], "rebalances", "rebalances per bucket")))
    sections.append(("Warm-ups in flight over time", _timeline(data["timeline"], "warmups_max", "max warm-ups")))
    sections.append(("Imbalance over time", _timeline(data["timeline"], "imbalance_mean", "mean imbalance (tasks/thread)")))
    sections.append(("Tasks moved per rebalance", _histogram(data["moved_hist"])))
    sections.append(("Lag distribution (reported lags)", _lag_bars(data["lag_hist"], data["lag_buckets"])))
    sections.append(("From a membership change to settled", _episodes(data["episodes"]) + table(data["episodes"], [
        ("group_id", "group"), ("start_generation", "from gen"), ("end_generation", "to gen"),
        ("start_trigger", "trigger"), ("rebalances", "rebalances"), ("settle_s", "to settled s"),
        ("settled", "settled")])))
    if data["bad"]:
        sections.append(("Lines that could not be read", table(data["bad"], [("error", "problem"), ("count", "lines")])))
    return page("remote-leader rebalance analytics", sections)


def _timeline(rows: Sequence[Mapping[str, Any]], metric: str, label: str) -> str:
    if not rows:
        return '<p class="note">no records</p>'
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        series[row["group_id"]].append((row["bucket_ms"] / 1000.0, row[metric] or 0.0))
    fig, ax = plt.subplots(figsize=(9, 3.6), layout="constrained")
    groups = sorted(series, key=lambda g: (-len(series[g]), g))[:MAX_LINES]
    start = min(t for g in groups for t, _ in series[g])
    for group in sorted(groups):
        points = sorted(series[group])
        ax.step([(t - start) / 60 for t, _ in points], [v for _, v in points], where="post", marker=".", label=group)
    ax.set_xlabel("minutes since the first record")
    ax.set_ylabel(label)
    ax.legend(fontsize=7)
    return _png(fig)


def _histogram(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return '<p class="note">no records</p>'
    fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
    ax.bar([r["tasks_moved"] for r in rows], [r["count"] for r in rows], color="#4c72b0")
    ax.set_xlabel("active tasks moved in the rebalance")
    ax.set_ylabel("rebalances")
    return _png(fig)


def _lag_bars(rows: Sequence[Mapping[str, Any]], buckets: Sequence[str]) -> str:
    if not rows:
        return '<p class="note">no lags reported</p>'
    fig, ax = plt.subplots(figsize=(9, 3.4), layout="constrained")
    groups = sorted(rows, key=lambda r: r["group_id"])[:MAX_LINES]
    width = 0.8 / max(1, len(groups))
    for index, row in enumerate(groups):
        ax.bar([i + index * width for i in range(len(buckets))], row["hist"], width=width, label=row["group_id"])
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(buckets))], buckets)
    ax.set_xlabel("reported lag (offsets); 'latest' and 'unknown' not counted")
    ax.set_ylabel("replica reports")
    ax.legend(fontsize=7)
    return _png(fig)


def _episodes(rows: Sequence[Mapping[str, Any]]) -> str:
    done = [r for r in rows if r.get("settled")]
    if not done:
        return '<p class="note">no completed membership changes</p>'
    by_group: dict[str, list[float]] = defaultdict(list)
    for row in done:
        by_group[row["group_id"]].append(row["settle_s"])
    groups = sorted(by_group)[:MAX_LINES * 2]
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(groups) + 1.5), layout="constrained")
    ax.boxplot([by_group[g] for g in groups], orientation="horizontal", tick_labels=groups)
    ax.set_xlabel("seconds from the membership change to the first rebalance needing no probe")
    return _png(fig)
