"""The server's HTTP port: Prometheus ``/metrics`` and the live operator's page.

One aiohttp application on the server's own event loop: it reads the coordinator's group
views directly, between two handlers, so what it shows is what ``describe`` would answer at
that moment (a group's page is then rendered from that view in a thread, ``RENDERS`` at once). The page is read-only: it has no form and no
POST route.

- ``/`` lists the groups: state, generation, members, warm-ups in flight, next probe.
- ``/groups/{group_id}`` (the id percent-encoded as one segment: ``group_path``) shows one
  group: members (endpoint, rack, threads, last report), the assignment as a tasks × members
  picture (active, standby, warm-up, with lags), warm-up lags over time against
  ``acceptable_recovery_lag``, the next probing rebalance and why, and the recent rebalances.
  Both pages reload themselves every ``REFRESH_S`` seconds.
- ``/static/plotly.min.js`` is plotly's own bundle, served from the installed package: nothing
  is fetched from the internet.

Who may look (docs/operations.md): ``--live-page loopback`` (the default) answers only clients
on loopback (``kubectl port-forward`` arrives there); ``on`` answers anyone who reaches the
port; ``off`` serves ``/metrics`` alone. When authentication is on (server/auth.py), the page
asks the same questions as ``DescribeGroup``: a bearer token (``Authorization: Bearer``) or a
client certificate names the principal, and a group is shown only to a principal the ACLs let
describe it. ``/metrics`` stays open to the scraper, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import ipaddress
import json
import ssl
import time
import urllib.parse
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from assignor.lag import Lag, LagKind
from assignor.model import TaskId
from server.auth import ANONYMOUS, AuthError, Gate, Operation, Principal, Unauthenticated, bearer_token
from server.group import GroupState
from server.web.history import PageHistory, RebalanceSummary

log = structlog.get_logger(__name__)

REFRESH_S = 2
SAMPLE_S = 1.0
# The tasks x members picture up to this many cells: its HTML grows with them (a group of
# 20,000 tasks and 4 members was a 4.3 MB page and 1 s of rendering; 1,000 members would make
# it 20 million cells). Larger groups get their members' counts and a table of the warm-ups.
PICTURE_CELLS = 10_000
# Group pages rendered at once, each in a thread of its own so that the event loop goes on
# answering heartbeats meanwhile; more requests wait their turn.
RENDERS = 2
PAGE_MODES = ("loopback", "on", "off")

_templates = jinja2.Environment(
    loader=jinja2.PackageLoader("server.web", "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
    undefined=jinja2.StrictUndefined,
)


def group_path(group_id: str) -> str:
    """The path of a group's page, its id percent-encoded as one segment: jinja's urlencode
    keeps '/', so group ``a/b`` linked to ``/groups/a/b`` (no such page) and ``../metrics`` to
    ``/metrics``. The route decodes the segment back (aiohttp matches on the path with ``%2F``
    still encoded)."""
    return "/groups/" + urllib.parse.quote(group_id, safe="")


_templates.filters["group_path"] = group_path


def _plotly_js() -> bytes:
    """The plotly.js bundle inside the plotly package (its ``package_data``)."""
    return (resources.files("plotly") / "package_data" / "plotly.min.js").read_bytes()


def lag_text(lag: Any) -> str:
    """A ``Lag`` (assignor/lag.py) for people: offsets with separators, else its kind."""
    if isinstance(lag, Lag):
        return f"{lag.offsets:,}" if lag.kind is LagKind.OFFSETS else ("running" if lag.kind is LagKind.RUNNING else lag.kind.value)
    return str(lag)


def lag_value(lag: Any) -> int:
    """Offsets behind, or -1 for a lag that is not a number of offsets (never plotted)."""
    return lag.offsets if isinstance(lag, Lag) and lag.kind is LagKind.OFFSETS else -1


def _ago(now_ms: int, then_ms: int) -> str:
    if not then_ms:
        return "never"
    seconds = max(0, (now_ms - then_ms) / 1000)
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def _until(now_ms: int, at_ms: int | None) -> str:
    if not at_ms:
        return "none scheduled"
    seconds = (at_ms - now_ms) / 1000
    return "due now" if seconds <= 0 else (f"in {seconds:.0f} s" if seconds < 120 else f"in {seconds / 60:.1f} min")


_REBALANCING = frozenset({GroupState.PREPARING_REBALANCE.value, GroupState.COMPLETING_REBALANCE.value})


def _probe_reason(state: str, reason: str) -> str:
    """Why the next probing rebalance is due, or why none is: one wording for both pages. While
    a rebalance runs, the next probe is only decided once its assignment is out."""
    if reason:
        return reason
    if state in _REBALANCING:
        return "rebalancing now: decided once the new assignment is out"
    return "no probing rebalance is needed"


def _clock(ms: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ms / 1000)) + " UTC" if ms else "–"


class LivePage:
    """The HTTP application and its sampler; ``start()`` binds, ``stop()`` closes."""

    def __init__(self, *, registry: CollectorRegistry, coordinator: Callable[[], Any], clock: Any, gate: Gate | None,
                 mode: str = "loopback", ssl_context: ssl.SSLContext | None = None) -> None:
        if mode not in PAGE_MODES:
            raise ValueError(f"--live-page: expected one of {', '.join(PAGE_MODES)}, got {mode!r}")
        self.registry = registry
        self.coordinator = coordinator
        self.clock = clock
        self.gate = gate or Gate()
        self.mode = mode
        self.ssl_context = ssl_context
        self.history = PageHistory()
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._sampler: asyncio.Task | None = None
        self._plotly: bytes | None = None
        self._renders = asyncio.Semaphore(RENDERS)

    # ---- lifecycle ------------------------------------------------------------------------

    def application(self) -> web.Application:
        app = web.Application(middlewares=[self._security_headers])
        app.router.add_get("/metrics", self.metrics)
        if self.mode != "off":
            app.router.add_get("/", self.groups_page)
            app.router.add_get("/groups/{group_id}", self.group_page)
            app.router.add_get("/static/plotly.min.js", self.plotly)
        return app

    async def start(self, host: str, port: int, rebalance_log: Path | None = None) -> None:
        """Bind, and read the recent rebalances back from the rebalance log's tail (so that a
        restarted server's page shows the rebalances before the restart)."""
        if rebalance_log is not None and self.mode != "off":
            try:
                for record in await asyncio.to_thread(read_log_tail, rebalance_log):
                    self.history.record_rebalance(record)
            except OSError as error:
                log.warning("live_page.rebalance_log.unreadable", path=str(rebalance_log), error=repr(error))
        self._runner = web.AppRunner(self.application(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=self.ssl_context, reuse_address=True)
        await site.start()
        sockets = site._server.sockets if site._server is not None else ()  # noqa: SLF001 - the bound port (0 picks one)
        self.port = sockets[0].getsockname()[1] if sockets else port
        if self.mode != "off":
            self._sampler = asyncio.get_running_loop().create_task(self._sample_forever(), name="live-page-sampler")

    async def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
            self._sampler = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _sample_forever(self) -> None:
        while True:
            try:
                self.sample()
            except Exception as error:  # the page must never take the server down
                log.error("live_page.sample.failed", error=repr(error))
            await asyncio.sleep(SAMPLE_S)

    def sample(self) -> None:
        coordinator = self.coordinator()
        if coordinator is None:
            return
        now = self.clock.now_ms()
        for overview in coordinator.list_groups():
            view = coordinator.describe(overview.group_id)
            if view is None:
                continue
            warmups = [(str(task), _member_name(m), lag_value(m.lags.get(task)))
                       for m in view.members for task in m.warmup]
            self.history.sample(view.group_id, now, warmups)
        self.history.forget(o.group_id for o in coordinator.list_groups())

    # ---- who may look -----------------------------------------------------------------------

    def refusals(self) -> Iterator[tuple[str, str, str]]:
        """What ``_principal`` counts, for ``Metrics.expect_refused``: the page's authentication
        failures."""
        if self.mode == "off" or not self.gate.enabled:
            return
        for reason in Unauthenticated:
            yield "LivePage", reason.code.name, str(reason)

    @web.middleware
    async def _security_headers(self, request: web.Request, handler: Any) -> web.StreamResponse:
        response = await handler(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault("X-Frame-Options", "DENY")
        return response

    def _principal(self, request: web.Request) -> Principal:
        """Raise 403 off loopback (mode ``loopback``), 401 without credentials when auth is on."""
        if self.mode == "loopback" and not _is_loopback(request.remote):
            raise web.HTTPForbidden(text="the live page answers only on loopback (--live-page on opens it)\n")
        if not self.gate.enabled:
            return ANONYMOUS
        pem = None
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        if ssl_object is not None:
            der = ssl_object.getpeercert(binary_form=True)
            if der:
                pem = ssl.DER_cert_to_PEM_cert(der).encode()
        try:
            bearer = bearer_token(request.headers.getall("Authorization", []), "the Authorization header",
                                  "Authorization header")
            return self.gate.authenticator.principal_for(bearer=bearer, certificate_pem=pem)
        except AuthError as error:
            self.gate.refuse("LivePage", None, error)
            raise web.HTTPUnauthorized(text=f"{error}\n", headers={"WWW-Authenticate": "Bearer"}) from None

    # ---- routes -----------------------------------------------------------------------------

    async def metrics(self, request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(self.registry), headers={"Content-Type": content_type})

    async def plotly(self, request: web.Request) -> web.Response:
        self._principal(request)
        if self._plotly is None:
            self._plotly = await asyncio.to_thread(_plotly_js)
        return web.Response(body=self._plotly, content_type="application/javascript",
                            headers={"Cache-Control": "public, max-age=86400"})

    async def groups_page(self, request: web.Request) -> web.Response:
        principal = self._principal(request)
        coordinator = self.coordinator()
        now = self.clock.now_ms()
        rows = []
        for overview in coordinator.list_groups() if coordinator is not None else ():
            if not self.gate.authorize(principal, Operation.DESCRIBE, overview.group_id):
                continue
            view = coordinator.describe(overview.group_id)
            if view is None:
                continue
            rows.append({
                "group_id": view.group_id, "state": view.state, "generation": view.generation,
                "members": len(view.members), "warmups": sum(len(m.warmup) for m in view.members),
                "next_probe": _until(now, view.next_probe_ms),
                "next_probe_reason": _probe_reason(view.state, view.next_probe_reason),
            })
        return _html("groups.html", refresh_s=REFRESH_S, title="remote-leader: groups", groups=rows, now=_clock(now))

    async def group_page(self, request: web.Request) -> web.Response:
        principal = self._principal(request)
        group_id = request.match_info["group_id"]
        coordinator = self.coordinator()
        allowed = self.gate.authorize(principal, Operation.DESCRIBE, group_id)
        view = coordinator.describe(group_id) if coordinator is not None and allowed else None
        now = self.clock.now_ms()
        if view is None:  # unknown and forbidden look the same: the page does not confirm a name
            response = _html("missing.html", refresh_s=REFRESH_S, title=f"remote-leader: {group_id}", group_id=group_id,
                             now=_clock(now))
            response.set_status(404)
            return response
        # the history read here, on the loop that updates it; the rest in a thread
        lines, rebalances = self.history.warmup_lines(view.group_id), self.history.rebalances(view.group_id)

        def page() -> web.Response:
            return _html("group.html", **group_context(view, lines, rebalances, now), refresh_s=REFRESH_S,
                         title=f"remote-leader: {view.group_id}", now=_clock(now))

        async with self._renders:
            return await asyncio.to_thread(page)


#: How much of the rebalance log's end the page reads at start: records carry the whole
#: scenario, so a large group's record is large; the page needs only the last few per group.
LOG_TAIL_BYTES = 8 * 1024 * 1024


def read_log_tail(path: Path, max_bytes: int = LOG_TAIL_BYTES) -> list[dict[str, Any]]:
    """The complete JSON lines within the last ``max_bytes`` of the log, oldest first; lines
    that are not JSON objects are skipped (the analytics report counts them)."""
    if not path.exists():
        return []
    with path.open("rb") as handle:
        size = handle.seek(0, 2)
        handle.seek(max(0, size - max_bytes))
        chunk = handle.read()
    lines = chunk.split(b"\n")
    if size > max_bytes:
        lines = lines[1:]  # the first line was cut
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _html(template: str, **context: Any) -> web.Response:
    return web.Response(text=_templates.get_template(template).render(**context), content_type="text/html",
                        headers={"Cache-Control": "no-store"})


def _is_loopback(remote: str | None) -> bool:
    try:
        address = ipaddress.ip_address(remote or "")
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _member_name(member: Any) -> str:
    return member.group_instance_id or member.process_id[:8]


def group_context(view: Any, warmup_lines: dict[str, list[tuple[int, int]]], rebalances: list[RebalanceSummary],
                  now_ms: int) -> dict[str, Any]:
    """Everything group.html shows, as plain values (tested without a browser), from the
    group's view and its page history (``PageHistory.warmup_lines``, ``rebalances``)."""
    members = sorted(view.members, key=lambda m: (_member_name(m), m.member_id))
    acceptable = view.config.acceptable_recovery_lag if view.config is not None else None
    tasks = sorted({t for m in members for t in (*m.active, *m.standby, *m.warmup)} | set(_topology_tasks(view)))

    def cell(m: Any, role: str, task: TaskId) -> dict[str, str]:
        lag = m.lags.get(task)
        caught_up = role != "warmup" or (acceptable is not None and 0 <= lag_value(lag) <= acceptable)
        return {"role": role, "label": {"active": "A", "standby": "S", "warmup": "W"}[role],
                "lag": lag_text(lag) if lag is not None else "", "state": "caught-up" if caught_up else "restoring"}

    picture_cells = len(tasks) * len(members)
    drawn = picture_cells <= PICTURE_CELLS
    cells: dict[tuple[str, str], dict[str, str]] = {}
    if drawn:
        for m in members:
            for role, held in (("active", m.active), ("standby", m.standby), ("warmup", m.warmup)):
                for task in held:
                    cells[(str(task), m.member_id)] = cell(m, role, task)
    warmups = [{"task": str(task), "member": _member_name(m), **cell(m, "warmup", task)}
               for m in members for task in sorted(m.warmup)]
    figure = _warmup_figure(warmup_lines, acceptable, now_ms)
    return {
        "group": {
            "group_id": view.group_id, "state": view.state, "generation": view.generation,
            "last_rebalance": _ago(now_ms, view.last_rebalance_ms), "last_trigger": view.last_rebalance_trigger or "–",
            "next_probe": _until(now_ms, view.next_probe_ms), "next_probe_at": _clock(view.next_probe_ms or 0),
            "next_probe_reason": _probe_reason(view.state, view.next_probe_reason),
            "acceptable_recovery_lag": f"{acceptable:,}" if acceptable is not None else "–",
            "warmups": sum(len(m.warmup) for m in members),
            "error": view.assignment_error.name if view.assignment_error else "",
        },
        "members": [{
            "member_id": m.member_id, "name": _member_name(m), "process_id": m.process_id,
            "endpoint": f"{m.endpoint.host}:{m.endpoint.port}" if m.endpoint else "–", "rack": m.rack or "–",
            "threads": m.num_threads, "last_report": _ago(now_ms, m.lags_updated_ms),
            "active": len(m.active), "standby": len(m.standby), "warmup": len(m.warmup),
        } for m in members],
        "tasks": [str(t) for t in tasks] if drawn else [],
        "cells": {f"{task}|{member}": shown for (task, member), shown in cells.items()},
        "picture": {"tasks": len(tasks), "members": len(members), "cells": picture_cells, "limit": PICTURE_CELLS},
        "warmup_rows": warmups,
        "rebalances": [{
            "generation": r.generation, "when": _clock(r.time_ms), "ago": _ago(now_ms, r.time_ms),
            "trigger": r.trigger, "compute_ms": f"{r.compute_ms:,.1f}", "members": r.members,
            "duration": f"{r.rebalance_ms / 1000:,.2f} s" if r.rebalance_ms else "–",
            "moved": r.actives_moved, "placed": r.actives_placed, "warmups": r.warmups,
            "probing": "yes" if r.probing else "no",
        } for r in rebalances],
        "warmup_figure": json.dumps(figure).replace("</", "<\\/") if figure else "",
    }


def _topology_tasks(view: Any) -> tuple[TaskId, ...]:
    """Every task of the group's topology, so that unassigned ones show as empty rows."""
    return view.topology.task_ids() if view.topology is not None else ()


_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
_MARKERS = ("circle", "square", "diamond", "triangle-up", "x", "cross", "star", "triangle-down")


def _warmup_figure(lines: dict[str, list[tuple[int, int]]], acceptable: int | None, now_ms: int) -> dict[str, Any] | None:
    """A plotly figure (plain JSON): each warm-up's lag over the last minutes, and the line it
    must reach to count as caught up (KIP-441 acceptable_recovery_lag)."""
    if not lines:
        return None
    data: list[dict[str, Any]] = [{
        "type": "scatter", "mode": "lines+markers", "name": html.escape(replica),
        "x": [round((t - now_ms) / 1000, 1) for t, _ in points], "y": [lag for _, lag in points],
        # replicas restoring at the same rate draw the same line: dashes and markers tell them apart
        "line": {"dash": _DASHES[i % len(_DASHES)], "width": 2},
        "marker": {"symbol": _MARKERS[i % len(_MARKERS)], "size": 7},
        "hovertemplate": "%{y:,} offsets behind, %{x:.0f} s<extra>" + html.escape(replica) + "</extra>",
    } for i, (replica, points) in enumerate(lines.items())]
    shapes = []
    if acceptable is not None:
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": acceptable, "y1": acceptable,
                       "line": {"dash": "dash", "color": "#2a9d8f", "width": 2}})
    return {
        "data": data,
        "layout": {
            "height": 320, "margin": {"l": 70, "r": 20, "t": 30, "b": 50},
            "xaxis": {"title": {"text": "seconds before now"}, "zeroline": False},
            "yaxis": {"title": {"text": "lag, offsets"}, "rangemode": "tozero", "tickformat": ","},
            "legend": {"font": {"size": 13}, "orientation": "h", "y": -0.25},
            "shapes": shapes,
            "annotations": [{"xref": "paper", "x": 1, "y": acceptable, "xanchor": "right", "yanchor": "bottom",
                             "text": f"acceptable_recovery_lag {acceptable:,}", "showarrow": False,
                             "font": {"color": "#2a9d8f", "size": 12}}] if acceptable is not None else [],
        },
    }


def ssl_context_for(cert: Path, key: Path, client_ca: Path | None) -> ssl.SSLContext:
    """HTTPS on the page's port (--metrics-tls); with --tls-client-ca a browser's certificate
    names the principal, as on the gRPC port (optional here: /metrics has no certificate)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert), str(key))
    if client_ca is not None:
        context.load_verify_locations(str(client_ca))
        context.verify_mode = ssl.CERT_OPTIONAL
    return context
