"""Standbys across racks and client tags (KIP-925 C, KIP-708), by swaps and balanced moves.

``assignor.rack_aware`` calls this on the balanced standby target. A swap trades two standbys
between two clients, so each keeps its standby count; a *move* takes one standby to another
client, only where both stay within their windows of stateful replicas (the standby target's
own, ``windows``), so the result is as balanced as the target. A change is
taken only if every task keeps distinct clients, none lands on its own active's client, and it
strictly improves, in this order (KIP-925 C's list), after the target's ties are spread
(``_spread_plain_standbys``: standbys the target could have dealt to any of their clients
trade them first):

1. *spread* (KIP-925 C items 2-3, KIP-708): per location key (each configured tag, or the
   rack), a standby sharing the active's value costs ``replicas`` points and each further
   repeated value one point. A key with fewer values than replicas can never reach 0: it is
   relaxed by this very measure, not an error. Swaps lowering the two tasks' sum are taken,
   else a move lowering the task's own (a free client of another location: counts alone would
   keep the standby beside its active, KIP-708's first rule).
2. *traffic* (KIP-925 C.I, "Balance reliability over cost"): swaps that lower traffic +
   non-overlap cost and leave neither task's spread worse: between two racks, and wherever a
   standby goes back to one of its anchors (``_AnchorReturns``).

With the high-availability assignor a change may also never raise the number of the tasks'
standbys that sit on clients not caught up on them: rack awareness reshapes the target, but
never makes more of it wait for restoration than the lag-aware flow chose (the monotone
quantity behind convergence, docs/assignor.md). Both passes repeat until nothing changes, so
feeding the output back changes nothing. The
partner search is greedy, as the KIP proposes: not a global optimum. Clear bounds on partner
checks (``SEARCH_BUDGET``) and on the work of spread searches (``SPREAD_BUDGET``, per
standby) keep adversarial groups fast: past them, the standbys stay as the last change left them.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import operator
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping

import numpy as np

from assignor.model import TaskId
from assignor.rack_flow import index_of
from assignor.ranking import Ranking
from assignor.target import Group

SEARCH_BUDGET = 2_000_000  # partner checks per call, over all passes
# Partner checks one pairing of two zones costs beyond its slots (a numpy call is some tens of
# them) in the traffic pass's budget
PAIRING_COST = 32
# Locations weighed and clients looked at by spread searches, per standby of the group
# (``_Standbys.spread_budget``): where most standbys cannot spread further (client tags of
# many keys, each location a handful of clients), every pass tried every location for every
# such standby again, unbounded (1,000 clients x 20,000 tasks, 1 standby, tag keys of 3 values
# each: 4 keys 15 s, 5 keys 49 s, 20 keys 426 s; within this budget 5, 3.4 and 2.7 s). The
# bench's round-robin rack rows spend up to 20 per standby, two tag keys of 3 values 200. The
# spread tables of new combinations of locations (locations x keys each) and the losses partner
# searches work out (``_Losses``) count too: with random tag values every client is a location
# of its own, and those were uncounted (fresh 1,000 x 20,000, 3 values per key: 5 keys 31 s,
# 20 keys and 2 standbys 375 s; counted, 9.6 and 8.8 s).
SPREAD_BUDGET = 500
PARTNER_BATCH = 1 << 18  # candidate pairs built at once by ``_AnchorReturns._partners`` (memory)
LOOKAHEAD = 64  # traffic pass: partners tried per standby before giving up on it
MAX_ROUNDS = 50
LOSS_INDEX_AFTER = 10_000  # partner checks after which the spread search builds its loss index
REMEMBER_FAILED = True  # skip a search that found nothing, while nothing it reads has changed
RECHECK_LIMIT = 64  # relocations since a failed search beyond which it is run again in full
CHECK_LIMIT = 256  # partner checks of a zone pair's recheck beyond which it is run again in full
_NONE: frozenset[int] = frozenset()


def _spread(weight: int, active: tuple[int, ...], standbys: list[tuple[int, ...]]) -> int:
    """The spread of a task (KIP-925 C items 2-3, KIP-708): per location key, ``weight`` per
    standby sharing the active's value and one per value that a further standby repeats."""
    score = 0
    for key, value in enumerate(active):
        seen = [loc[key] for loc in standbys]
        score += weight * seen.count(value) + len(seen) + 1 - len(set(seen) | {value})
    return score


def _spread_changes(weight: int, active: np.ndarray, kept: np.ndarray, staying: np.ndarray, left: np.ndarray,
                    arriving: np.ndarray) -> np.ndarray:
    """``_spread`` after - before, per task (rows), of one standby moving from location ``left``
    to ``arriving`` while the others (``kept``, where ``staying``) stay: per key only the moved
    standby's value changes, gaining ``weight`` where it meets the active's value and one where
    it repeats a value still there. Rows of ``kept``/``staying`` broadcast as numpy does."""
    def new(value: np.ndarray) -> np.ndarray:  # neither the active's nor a staying standby's
        return (value != active) & ~((kept == value[:, None, :]) & staying[:, :, None]).any(axis=1)

    return (weight * ((arriving == active).astype(np.int64) - (left == active))
            + new(left).astype(np.int64) - new(arriving)).sum(axis=1)


def _single_spread(weight: int, active: tuple[int, ...], standby: tuple[int, ...]) -> int:
    """``_spread`` of a task with one standby (most tasks), the hot case: ``weight`` + 1 per
    location key where the standby shares the active's value."""
    return (weight + 1) * sum(map(operator.eq, active, standby))


def _single_spreads(weight: int, active: np.ndarray, standby: np.ndarray) -> np.ndarray:
    """``_single_spread`` of many tasks at once (rows of locations; one ``standby`` row broadcasts)."""
    return (weight + 1) * (active == standby).sum(axis=1)


class _Standbys:
    """The private, mutable builder: standby holders by task and tasks by client, as indices."""

    def __init__(self, group: Group, actives: Mapping[TaskId, str], standbys: Mapping[TaskId, tuple[str, ...]],
                 location: Mapping[str, tuple[str, ...]], ranking: Ranking | None = None,
                 windows: Mapping[str, tuple[int, int]] | None = None) -> None:
        self.clients = group.clients
        client_index = index_of(self.clients)
        self.tasks = tuple(filter(standbys.get, group.stateful))
        index = client_index.__getitem__
        self.active = list(map(index, map(actives.__getitem__, self.tasks)))
        self.holders = [sorted(map(index, standbys[t])) for t in self.tasks]
        self.on_client: list[set[int]] = [set() for _ in self.clients]
        on_client = self.on_client
        for task, holders in enumerate(self.holders):
            for client in holders:
                on_client[client].add(task)
        values = [index_of(sorted({location[c][k] for c in self.clients})) for k in range(len(location[self.clients[0]]))]
        self.loc = [tuple(values[k][location[c][k]] for k in range(len(values))) for c in self.clients]
        self.classes = sorted(set(self.loc))
        self.members = {cls: [c for c, here in enumerate(self.loc) if here == cls] for cls in self.classes}
        self.cursor = dict.fromkeys(self.classes, 0)
        self.weight = max((len(h) for h in self.holders), default=0) + 1
        self.spread_memo: dict[tuple, int] = {}
        self.moves_memo: dict[tuple, dict[tuple[int, tuple[int, ...]], int]] = {}
        self.moves_of: list[dict[tuple[int, tuple[int, ...]], int] | None] = [None] * len(self.tasks)
        self.better_memo: dict[tuple, list[tuple[int, tuple[int, ...]]]] = {}  # ``_better_locations``
        self.class_values = np.array(self.classes, dtype=np.int64).reshape(len(self.classes), -1)  # for ``moves``
        self.budget = SEARCH_BUDGET
        self.spread_budget = SPREAD_BUDGET * sum(map(len, self.holders))
        self.swapped: set[int] = set()
        self.log: list[int] = []  # every relocation's task, in order
        self.moves_at = dict.fromkeys(self.classes, 0)  # moves to or from a location: only these change room
        # For whole zones at once (``_ZoneDeltas``): each task's active location, and whether it
        # has one standby (swaps keep every task's count, so this never changes).
        locations = np.array(self.loc, dtype=np.int64).reshape(len(self.clients), len(values))
        self.active_loc = locations[np.array(self.active, dtype=np.int64)]
        self.single = np.array([len(h) == 1 for h in self.holders], dtype=bool)
        # ``spread`` of every task: those with one standby (most) at once, as it scores them
        singles = np.flatnonzero(self.single)
        scores = np.zeros(len(self.tasks), dtype=np.int64)
        scores[singles] = _single_spreads(self.weight, self.active_loc[singles],
                                         locations[[self.holders[task][0] for task in singles.tolist()]])
        self.scores = scores.tolist()
        for task in np.flatnonzero(~self.single).tolist():
            self.scores[task] = self.spread(task, [self.loc[c] for c in self.holders[task]])
        # Readiness (``Ranking.caught_up``, with the high-availability assignor only): per task,
        # the clients caught up on it; for a task whose whole changelog is within the acceptable
        # lag every client reporting nothing is caught up too, so ``everywhere_but`` holds the
        # few that are not (reported lags beyond it) instead.
        self.ready: list[frozenset[int]] | None = None
        self.everywhere_but: dict[int, frozenset[int]] = {}
        # A fresh group (no task reported, none whole within the lag) is told at once.
        if ranking is not None and (any(map(ranking.holders.get, self.tasks))
                                    or not all(map(ranking.absent.__getitem__, self.tasks))):
            self.ready = []
            add_ready, reported, absent = self.ready.append, ranking.holders.get, ranking.absent
            for task, task_id in enumerate(self.tasks):
                ranks = reported(task_id, {})
                if absent[task_id] == 0:
                    self.everywhere_but[task] = frozenset([client_index[c] for c, rank in ranks.items() if rank])
                    add_ready(frozenset())
                else:
                    add_ready(frozenset([client_index[c] for c, rank in ranks.items() if rank == 0]))
            if not self.everywhere_but and not any(self.ready):
                self.ready = None  # nobody caught up on anything (a fresh group): every swap restores as much
        # Per client, the standbys on it that still restore there, and the tasks caught up on
        # it (only with ``ready``): what ``_partner_candidates`` narrows the search to.
        self.restoring: list[set[int]] = [set() for _ in self.clients]
        self.ready_on: list[set[int]] = [set() for _ in self.clients]
        self.restoring_at: dict[tuple[int, ...], set[int]] = {cls: set() for cls in self.classes}
        if self.ready is not None:
            ready_on, restoring, ready_for = self.ready_on, self.restoring, self.ready_for
            for task, (holders, ready) in enumerate(zip(self.holders, self.ready, strict=True)):
                for client in ready:
                    ready_on[client].add(task)
                for client in holders:
                    if not ready_for(task, client):
                        restoring[client].add(task)
                        self.restoring_at[self.loc[client]].add(client)
        # Per client c and holder h, the tasks caught up on c with a standby on h, and those of
        # them restoring on h (explicit readiness only): built when a search first reads them.
        self.held_ready: list[dict[int, set[int]]] | None = None
        self.held_restoring: list[dict[int, set[int]]] | None = None
        self.position_in_class = {c: index for members in self.members.values() for index, c in enumerate(members)}
        # Standby windows (floor, ceiling) per client, for moves; without them, none: each
        # client's window is the count it holds. ``room_at``: per location, the clients below
        # their ceiling, where a move may land.
        held = [len(tasks) for tasks in self.on_client]
        self.floor = held if windows is None else [windows[c][0] for c in self.clients]
        self.ceiling = held if windows is None else [windows[c][1] for c in self.clients]
        self.room_at: dict[tuple[int, ...], set[int]] = {cls: set() for cls in self.classes}
        for client in range(len(self.clients)):
            self._file_room(client)
        self.losses: _Losses | None = None  # built once partner searches have cost LOSS_INDEX_AFTER checks
        # Searches that found nothing, and when: the length of their location's log (every task
        # relocated while holding, or to, a standby there) and the task's version; a search for
        # room, the moves at both locations. Only what changed since can change their outcome.
        self.task_version = [0] * len(self.tasks)
        self.failed: dict[tuple, tuple[int, int]] = {}
        self.location_logs: dict[tuple[int, ...], list[int]] = {cls: [] for cls in self.classes}
        self.location_log = [self.location_logs[cls] for cls in self.loc]  # per client, its location's
        # Likewise for the traffic pass: each client's zone (rack, location), the zones' logs, and
        # the zone pairs whose last pairing swapped nothing, with what it read.
        self.zone_of: list[tuple] | None = None
        self.zone_logs: dict[tuple, list[int]] = {}
        self.zone_log: list[list[int]] | None = None
        self.quiet: dict[tuple, _QuietPair] = {}

    def held_index(self) -> tuple[list[dict[int, set[int]]], list[dict[int, set[int]]]]:
        """``held_ready`` and ``held_restoring``: what ``ready_on[c]`` gives, filed by holder,
        so a search reads a client's few holders instead of walking every task caught up there
        (5 clients x 20,000 tasks: thousands per search). A task is not filed under its active's
        client, caught up there as it is: its standby may never go there (``may_take``), and a
        settled group's actives whose standbys restore elsewhere were most of what searches for
        a caught-up standby read, each refused."""
        if self.held_ready is None:
            self.held_ready = [{} for _ in self.clients]
            self.held_restoring = [{} for _ in self.clients]
            file_held = self._file_held
            for task, (holders, ready) in enumerate(zip(self.holders, self.ready, strict=True)):
                if ready:
                    for holder in holders:
                        file_held(task, holder, ready, True)
        return self.held_ready, self.held_restoring

    def _file_held(self, task: int, holder: int, ready: frozenset[int], add: bool) -> None:
        indices = (self.held_ready,) if holder in ready else (self.held_ready, self.held_restoring)
        active = self.active[task]
        for client in ready:
            if client == active:
                continue
            for index in indices:
                by_holder = index[client]
                if add:
                    by_holder.setdefault(holder, set()).add(task)
                else:
                    tasks = by_holder[holder]
                    tasks.discard(task)
                    if not tasks:
                        del by_holder[holder]

    def ready_for(self, task: int, client: int) -> bool:
        """Is ``client`` caught up on ``task``? (Only with readiness: ``ready`` not None.)"""
        exceptions = self.everywhere_but.get(task)
        return client in self.ready[task] if exceptions is None else client not in exceptions

    def restores_more(self, task: int, client: int, other: int, other_client: int) -> bool:
        """Would swapping put more of the two standbys on clients that must restore them?"""
        if self.ready is None:
            return False
        ready = self.ready_for
        before = (not ready(task, client)) + (not ready(other, other_client))
        after = (not ready(task, other_client)) + (not ready(other, client))
        return after > before

    def spread(self, task: int, holder_locs: list[tuple[int, ...]]) -> int:
        active = self.loc[self.active[task]]
        if len(holder_locs) == 1:  # the common case
            return _single_spread(self.weight, active, holder_locs[0])
        # Several standbys: the score depends on the locations alone, in any order, and groups
        # have few of them, so each combination is worked out once.
        memo_key = (active, *sorted(holder_locs))
        score = self.spread_memo.get(memo_key)
        if score is None:
            score = self.spread_memo[memo_key] = _spread(self.weight, active, holder_locs)
        return score

    def spread_now(self, task: int) -> int:
        return self.scores[task]

    def spread_if(self, task: int, leaving: int, arriving_loc: tuple[int, ...]) -> int:
        holders = self.holders[task]
        if len(holders) == 1 and holders[0] == leaving:
            return _single_spread(self.weight, self.loc[self.active[task]], arriving_loc)
        return self.scores[task] + self.moves(task)[holders.index(leaving), arriving_loc]

    def moves(self, task: int) -> dict[tuple[int, tuple[int, ...]], int]:
        """(position of a standby among the task's holders, location it would move to) -> change
        of the task's spread. A function of the active's and the standbys' locations alone, so
        worked out once per combination of them (a group has few)."""
        moves = self.moves_of[task]
        if moves is not None:
            return moves
        holders = self.holders[task]
        locs = [self.loc[c] for c in holders]
        key = (self.loc[self.active[task]], *locs)
        moves = self.moves_memo.get(key)
        if moves is None:
            # every standby to every location at once, by standby then location
            kept = np.array(locs, dtype=np.int64)
            mover = np.repeat(np.arange(len(locs)), len(self.classes))
            change = _spread_changes(self.weight, np.array([key[0]], dtype=np.int64), kept[None],
                                     mover[:, None] != np.arange(len(locs)), kept[mover],
                                     np.tile(self.class_values, (len(locs), 1)))
            moves = dict(zip([(position, there) for position in range(len(locs)) for there in self.classes],
                             change.tolist(), strict=True))
            self.moves_memo[key] = moves
            # locations x keys of work each: with many tag keys every client is a location of
            # its own, and these tables (and the losses they give) were the unbounded part
            self.spread_budget -= len(moves) * len(key[0])
        self.moves_of[task] = moves
        return moves

    def may_take(self, task: int, client: int) -> bool:
        return client != self.active[task] and client not in self.holders[task]

    def may_move(self, task: int, client: int, there: int) -> bool:
        """May ``task``'s standby leave ``client`` for ``there`` on its own? Both stay within
        their windows, ``there`` may take it, and it restores there only if it did here."""
        return (len(self.on_client[client]) > self.floor[client] and there in self.room_at[self.loc[there]]
                and self.may_take(task, there)
                and (self.ready is None or not self.ready_for(task, client) or self.ready_for(task, there)))

    def _file_room(self, client: int) -> None:
        if len(self.on_client[client]) < self.ceiling[client]:
            self.room_at[self.loc[client]].add(client)
        else:
            self.room_at[self.loc[client]].discard(client)

    def swap(self, task: int, client: int, other: int, other_client: int) -> None:
        """``task`` moves from ``client`` to ``other_client``, ``other`` the opposite way."""
        self._relocate(task, client, other_client)
        self._relocate(other, other_client, client)

    def move(self, task: int, client: int, there: int) -> None:
        """``task`` moves from ``client`` to ``there`` alone (``may_move``)."""
        self.moves_at[self.loc[client]] += 1
        self.moves_at[self.loc[there]] += 1
        self._relocate(task, client, there)
        self._file_room(client)
        self._file_room(there)

    def move_refilled(self, task: int, client: int, there: int, other: int, donor: int) -> None:
        """``task`` moves from ``client`` to ``there`` and ``other`` from ``donor`` to ``client``
        (``_find_refill``): ``client`` keeps its count."""
        for location in (self.loc[client], self.loc[there], self.loc[donor]):
            self.moves_at[location] += 1
        self._relocate(task, client, there)
        self._relocate(other, donor, client)
        for moved in (client, there, donor):
            self._file_room(moved)

    def _relocate(self, who: int, leave: int, arrive: int) -> None:
        holders = self.holders[who]
        self.task_version[who] += 1
        self.moves_of[who] = None
        for holder in (*holders, arrive):
            self.location_log[holder].append(who)
            if self.zone_log is not None:
                self.zone_log[holder].append(who)
        holders[holders.index(leave)] = arrive
        holders.sort()
        if self.held_ready is not None:
            self._file_held(who, leave, self.ready[who], False)
            self._file_held(who, arrive, self.ready[who], True)
        self.on_client[leave].discard(who)
        self.on_client[arrive].add(who)
        self.restoring[leave].discard(who)
        if not self.restoring[leave]:
            self.restoring_at[self.loc[leave]].discard(leave)
        if self.ready is not None and not self.ready_for(who, arrive):
            self.restoring[arrive].add(who)
            self.restoring_at[self.loc[arrive]].add(arrive)
        self.scores[who] = self.spread(who, [self.loc[c] for c in holders])
        self.swapped.add(who)
        self.log.append(who)

    def result(self, standbys: Mapping[TaskId, tuple[str, ...]]) -> dict[TaskId, tuple[str, ...]]:
        """The input with the swapped tasks' standbys replaced (in client order)."""
        out = dict(standbys)
        for task in self.swapped:
            out[self.tasks[task]] = tuple(self.clients[c] for c in self.holders[task])
        return out


def spread_and_swap_standbys(
    group: Group,
    actives: Mapping[TaskId, str],
    standbys: Mapping[TaskId, tuple[str, ...]],
    location: Mapping[str, tuple[str, ...]],
    anchors: Mapping[TaskId, Collection[str]] | None,
    traffic: tuple[np.ndarray, list[str], tuple[int, int]] | None,
    ranking: Ranking | None = None,
    windows: Mapping[str, tuple[int, int]] | None = None,
) -> dict[TaskId, tuple[str, ...]]:
    """Spread standbys (by ``location``), then, given ``traffic``, swap them for less of it;
    given ``ranking``, never so that more of them must restore (module docstring). The
    non-overlap cost counts standbys off ``anchors`` (None: off the ``standbys`` given).
    ``windows``: per client, the (floor, ceiling) of standbys a spread move keeps it within
    (None: swaps only, every client keeps its count)."""
    state = _Standbys(group, actives, standbys, location, ranking, windows)
    if not state.tasks:
        return dict(standbys)
    _spread_plain_standbys(state, group)
    pricing = returns = None
    # Without a traffic cost there is no traffic to trade and the standbys stay as placed
    # (Kafka's shouldRemainOriginalAssignmentWithoutTrafficCostForMinCostStrategy): a swap
    # could only put a standby back on a previous holder, for stickiness alone.
    if traffic is not None and traffic[2][0] > 0:
        cross, racks, costs = traffic
        stateful_row = index_of(group.stateful)
        rows = np.array([stateful_row[t] for t in state.tasks], dtype=np.int64)
        rack_index = index_of(racks)
        client_rack = [rack_index[group.states[c].rack] for c in group.clients]
        if anchors is None:
            anchored = list(map(set, state.holders))
        else:
            client_index = index_of(group.clients)
            anchored = [{client_index[c] for c in anchors.get(t, ()) if c in client_index} for t in state.tasks]
        pricing = _Pricing(cross[rows], client_rack, costs, anchored, len(racks))
    for _ in range(MAX_ROUNDS):
        changed = _spread_pass(state)
        if pricing is not None:
            changed = _traffic_pass(state, pricing) or changed
            returns = returns or _AnchorReturns(state, pricing, settled=anchors is None)
            changed = returns.run(state, pricing) or changed
        if not changed:
            break
    return state.result(standbys)


def _spread_plain_standbys(state: _Standbys, group: Group) -> None:
    """Spread first what the standby target placed by a tie. Within one subtopology, a client
    with no state of a task, that never ran it nor held it, is *plain* for it: the target prices
    the task alike on every such client, so two tasks of the subtopology standing by on plain
    clients may trade them and keep the target's cost, its counts and what must restore. The
    target deals them in task order, blind to locations: in a 10% scale-out of 500 clients x
    20,000 tasks over 3 racks, 521 shared their active's rack, and the spread pass searched
    every standby of a location for each (6,800 searches for 1,100 swaps), most of them caught
    up where they are and so refused. Here each such standby, in task order, trades with
    the first plain one of its subtopology at its best location whose own spread worsens less
    than it gains (the spread pass's rule). The passes that follow spread whatever is left, and
    price non-overlap against the result, which is as much the target.

    Tasks with one standby only (most): with two, trading one first left the passes a worse
    spread in 36 of 96 generated groups (2 standbys over 3 or 4 racks), against 4 of 96 with one
    (and 6 better)."""
    tasks, clients, loc, scores, holders = state.tasks, state.clients, state.loc, state.scores, state.holders
    states, owners, held = group.states, group.prev_active_owner, group.prev_standby_holders
    none: frozenset[str] = frozenset()

    def plain(task: int, client: int) -> bool:
        task_id, client_id = tasks[task], clients[client]
        return (task_id not in states[client_id].lags and owners.get(task_id) != client_id
                and client_id not in held.get(task_id, none))

    by_key: dict[int, dict[tuple[int, ...], dict[tuple[int, int], None]]] = {}  # location -> slots
    for task in np.flatnonzero(state.single).tolist():
        client = holders[task][0]
        if plain(task, client):
            by_key.setdefault(tasks[task].subtopology, {}).setdefault(loc[client], {})[task, client] = None
    for key in sorted(by_key):
        at = by_key[key]
        if len(at) < 2:
            continue
        for task, client in sorted(slot for slots in at.values() for slot in slots):
            current = scores[task]
            if not current or holders[task][0] != client:  # traded as an earlier one's partner
                continue
            here = loc[client]
            for score, cls in _better_locations(state, task, client, current):
                partner = _plain_partner(state, at.get(cls, ()), task, client, current - score, plain)
                if partner is not None:
                    other, other_client = partner
                    state.swap(task, client, other, other_client)
                    del at[here][task, client], at[cls][other, other_client]
                    at[cls][task, other_client] = at[here][other, client] = None
                    break


def _plain_partner(state: _Standbys, slots: Iterable[tuple[int, int]], task: int, client: int, gain: int,
                   plain: Callable[[int, int], bool]) -> tuple[int, int] | None:
    """The first of ``slots`` (other, other_client) that may trade places with ``task`` on
    ``client``, both staying on clients plain for them, for less than ``gain`` of its spread;
    at most ``LOOKAHEAD`` looked at."""
    arriving = state.loc[client]
    for other, other_client in itertools.islice(slots, LOOKAHEAD):
        if (other != task and state.may_take(task, other_client) and state.may_take(other, client)
                and plain(task, other_client) and plain(other, client)
                and state.spread_if(other, other_client, arriving) - state.scores[other] < gain):
            return other, other_client
    return None


def _spread_pass(state: _Standbys) -> bool:
    """Repeat until stable: for each task in order, swap a standby to a better location."""
    any_change = False
    changed = True
    while changed:
        changed = False
        scores = state.scores
        for task in range(len(state.tasks)):
            while scores[task] and _improve_spread(state, task):
                changed = any_change = True
    return any_change


def _improve_spread(state: _Standbys, task: int) -> bool:
    current = state.spread_now(task)
    if current == 0 or state.spread_budget <= 0:
        return False
    for client in list(state.holders[task]):
        state.spread_budget -= len(state.classes)
        for score, cls in _better_locations(state, task, client, current):
            partner = _find_partner(state, task, client, cls, current - score)
            if partner is not None:
                state.swap(task, client, partner[1], partner[0])
                return True
            there = _find_room(state, task, client, cls)
            if there is not None:
                state.move(task, client, there)
                return True
            refill = _find_refill(state, task, client, cls)
            if refill is not None:
                there, other, donor = refill
                state.move_refilled(task, client, there, other, donor)
                return True
    return False


def _better_locations(state: _Standbys, task: int, client: int, current: int) -> list[tuple[int, tuple[int, ...]]]:
    """(spread, location) of every other location where ``task``'s standby on ``client`` would
    lower its spread, best first: ``spread_if`` of each, ranked once per table of moves (or,
    one standby, per active location) instead of at every search."""
    holders, memo = state.holders[task], state.better_memo
    if len(holders) == 1:
        active = state.loc[state.active[task]]
        ranked = memo.get((None, active))
        if ranked is None:
            ranked = memo[None, active] = sorted((state.spread_if(task, client, cls), cls) for cls in state.classes)
        here = state.loc[client]
        return [option for option in itertools.takewhile(lambda option: option[0] < current, ranked)
                if option[1] != here]
    if len(state.classes) == 1:
        return []
    moves = state.moves(task)
    position = holders.index(client)
    ranked = memo.get((id(moves), position))
    if ranked is None:  # the tables live in ``moves_memo``: their ids are not reused
        ranked = memo[id(moves), position] = sorted(
            (delta, cls) for (at, cls), delta in moves.items() if at == position and delta < 0)
    return [(current + delta, cls) for delta, cls in ranked]


def _find_refill(state: _Standbys, task: int, client: int, cls: tuple[int, ...]) -> tuple[int, int, int] | None:
    """A move of ``task``'s standby from ``client``, at its floor, to a client with room at
    ``cls``, with another standby moving onto ``client`` from a client of its own location above
    its floor (so that the other task's spread stays as it is), so that ``client`` keeps its
    count: (there, other, donor). The two together put no more standbys on clients that must
    restore them (one may restore where the other no longer has to). A helper's audit: when a
    member joined a spread group, the target gave it the standby of a task whose active shares
    its tag value, and no swap (the other standby's task is active there) nor move (the
    newcomer at its floor) could undo it; handing it the other task's standby spreads both.
    At most ``LOOKAHEAD`` standbys are looked at per search, and a search that found nothing is
    not repeated while nothing it reads has changed (as ``_find_room``'s).
    """
    on_client, floor = state.on_client, state.floor
    if len(on_client[client]) != floor[client] or state.spread_budget <= 0:
        return None
    home = state.loc[client]
    search = (task, client, cls, "refill")
    seen = (state.moves_at[cls], len(state.location_logs[home]), state.task_version[task])
    if REMEMBER_FAILED and state.failed.get(search) == seen:
        return None
    there = next((c for c in sorted(state.room_at[cls]) if c != client and state.may_take(task, c)), None)
    looked = 0
    if there is not None:
        # donors read only once a client with room is found (most searches find none)
        donors = (c for c in state.members[home] if c != client and len(on_client[c]) > floor[c])
        ready = state.ready_for if state.ready is not None else None
        owed = 0 if ready is None else (not ready(task, there)) - (not ready(task, client))
        active, holders = state.active, state.holders
        for donor in donors:
            for other in sorted(on_client[donor]):
                looked += 1
                if looked > LOOKAHEAD:
                    break
                if other == task or client == active[other] or client in holders[other]:  # ``may_take``
                    continue
                if ready is not None and owed + (not ready(other, client)) - (not ready(other, donor)) > 0:
                    continue
                state.spread_budget -= looked
                return there, other, donor
            if looked > LOOKAHEAD:
                break
    state.spread_budget -= 1 + looked
    state.failed[search] = seen
    return None


def _find_room(state: _Standbys, task: int, client: int, cls: tuple[int, ...]) -> int | None:
    """A client at ``cls`` that ``task``'s standby on ``client`` may move to (``may_move``), when
    no swap serves: caught up on the task first, then the one with most room, then client order.

    Where ``client`` is caught up on the task, only clients caught up on it qualify, so those
    alone are looked at (the few that are, unless the whole changelog is within the lag).
    """
    room = state.room_at[cls]
    if not room or len(state.on_client[client]) <= state.floor[client]:
        return None
    search = (task, client, cls, None)
    seen = (state.moves_at[cls], state.moves_at[state.loc[client]], state.task_version[task])
    if REMEMBER_FAILED and state.failed.get(search) == seen:
        return None
    candidates: Collection[int] = room
    if state.ready is not None and task not in state.everywhere_but and client in state.ready[task]:
        candidates = [c for c in state.ready[task] if c in room]
    state.spread_budget -= 1 + len(candidates)
    on_client, ceiling = state.on_client, state.ceiling
    best = min(((state.ready is None or not state.ready_for(task, c), len(on_client[c]) - ceiling[c], c)
                for c in candidates if state.may_move(task, client, c)), default=None)
    if best is None:
        state.failed[search] = seen
        return None
    return best[2]


def _find_partner(state: _Standbys, task: int, client: int, cls: tuple[int, ...], gain: int) -> tuple[int, int] | None:
    """A standby (other_client, other) at ``cls`` that may trade places with ``task`` on ``client``.

    Scans every client of the location (from a rotating start, so that successive searches
    spread their swaps), hence "none found" does not depend on where the scan began, and holds
    while the mover stays and no task relocated since offers itself (``_still_no_partner``).
    """
    members = state.members[cls]
    start = state.cursor[cls]
    arriving = state.loc[client]
    search = (task, client, cls, gain)
    failed = state.failed.get(search) if REMEMBER_FAILED else None
    if failed is not None and failed[1] == state.task_version[task] and (
            failed[0] == len(state.location_logs[cls]) or _still_no_partner(state, failed[0], task, client, cls, gain)):
        return None
    if state.losses is None and SEARCH_BUDGET - state.budget >= LOSS_INDEX_AFTER:
        state.losses = _Losses(state)
    below = None if state.losses is None else state.losses.below(cls, arriving, gain)
    scanned = _members_to_scan(state, task, client, cls, start)
    state.spread_budget -= 1 + len(scanned) + (len(state.ready_on[client]) if state.ready is not None else 0)
    for other_client in scanned:
        if not state.may_take(task, other_client):
            continue
        candidates = _partner_candidates(state, task, client, other_client)
        for other in sorted(candidates) if below is None else below(other_client, candidates):
            state.budget -= 1
            if state.budget < 0:
                return None
            if not state.may_take(other, client) or state.restores_more(task, client, other, other_client):
                continue
            loss = state.spread_if(other, other_client, arriving) - state.spread_now(other)
            if loss < gain:
                state.cursor[cls] = (state.position_in_class[other_client] + 1) % len(members)
                return other_client, other
    state.failed[search] = (len(state.location_logs[cls]), state.task_version[task])
    return None


def _still_no_partner(state: _Standbys, since: int, task: int, client: int, cls: tuple[int, ...], gain: int) -> bool:
    """Does a search that found no partner, the mover unchanged, still find none? Every
    candidate it refused is as it was unless logged at ``cls`` since, so only those are checked,
    as the search would (past RECHECK_LIMIT of them it runs again in full)."""
    log = state.location_logs[cls]
    if len(log) - since > RECHECK_LIMIT:
        return False
    arriving, loc = state.loc[client], state.loc
    for other in set(log[since:]):
        for other_client in state.holders[other]:
            if (loc[other_client] == cls and state.may_take(task, other_client)
                    and other in _partner_candidates(state, task, client, other_client)
                    and state.may_take(other, client) and not state.restores_more(task, client, other, other_client)
                    and state.spread_if(other, other_client, arriving) - state.spread_now(other) < gain):
                return False
    state.failed[(task, client, cls, gain)] = (len(log), state.task_version[task])
    return True


class _Losses:
    """Which standbys at a location would worsen their task's spread by less than a gain, were
    they moved to another location: what ``_find_partner`` narrows its candidates to.

    Most searches that fail do so on exactly that (a task stuck with two standbys in one
    location finds every partner worse off for the trade), and such partners cost no partner
    checks. Narrowing only: the search meets the same partners in the same order, minus those
    that fail on loss. Losses are worked out as the search reads them; once the searches of
    one (location, destination) have worked out as many as it had standbys, that pair gets an
    index of its slots by loss, client -> tasks, brought up to date from the location's log
    when next read. An index of every pair, kept up to date on every relocation, cost
    (standbys x locations) per relocation, mostly never read: 500 clients x 20,000 tasks, 2
    standbys, 3 tag keys of 5 values, 68,000 relocations, 16 s; the searches that fail there
    read 39 pairs.
    """

    def __init__(self, state: _Standbys) -> None:
        self.state = state
        self.looked: dict[tuple, int] = {}  # per pair without an index, losses worked out so far
        self.slots_at = {cls: sum(len(state.on_client[c]) for c in members) for cls, members in state.members.items()}
        self.indices: dict[tuple, _PairLosses] = {}
        self.tables: dict[int, tuple[int, dict]] = {}  # a task's table of moves, as of its version

    def below(self, here: tuple, there: tuple, gain: int) -> Callable[[int, Collection[int]], Iterable[int]]:
        """(client at ``here``, its candidates) -> those whose loss moving to ``there`` is below
        ``gain``, in task order."""
        pair = (here, there)
        index = self.indices.get(pair)
        if index is None and self.looked.get(pair, 0) >= self.slots_at[here]:
            index = self.indices[pair] = _PairLosses(self, here, there)
        if index is not None:
            return index.below(gain)
        loss = self.loss

        def fitting(client: int, candidates: Collection[int]) -> Iterator[int]:
            looked = 0
            for task in sorted(candidates):
                looked += 1
                if loss(task, client, here, there) < gain:
                    self._charge(pair, looked)
                    looked = 0
                    yield task
            self._charge(pair, looked)

        return fitting

    def _charge(self, pair: tuple, looked: int) -> None:
        self.looked[pair] = self.looked.get(pair, 0) + looked
        self.state.spread_budget -= looked

    def loss(self, task: int, client: int, here: tuple, there: tuple) -> int:
        """How much ``task``'s spread worsens were its standby on ``client`` (at ``here``) moved
        to ``there``, without charging the spread budget for a table of moves (one score)."""
        state = self.state
        held = state.holders[task]
        at = state.loc[state.active[task]]
        if len(held) == 1:
            return _single_spread(state.weight, at, there) - _single_spread(state.weight, at, here)
        moves = state.moves_of[task]
        if moves is None:
            version = state.task_version[task]
            known = self.tables.get(task)
            if known is not None and known[0] == version:
                moves = known[1]
            else:
                loc = state.loc
                moves = state.moves_memo.get((at, *[loc[c] for c in held]))
                if moves is None:
                    return state.spread(task, [there if c == client else loc[c] for c in held]) - state.scores[task]
                self.tables[task] = (version, moves)
        return moves[held.index(client), there]


class _PairLosses:
    """One (location, destination) pair's slots by loss: loss -> client -> tasks."""

    def __init__(self, losses: _Losses, here: tuple, there: tuple) -> None:
        self.losses, self.here, self.there = losses, here, there
        self.slots: dict[int, dict[int, set[int]]] = {}
        self.filed: dict[int, list[tuple[int, int]]] = {}
        state = losses.state
        self.synced = len(state.location_logs[here])
        members = state.members[here]
        sizes = [len(state.on_client[c]) for c in members]
        tasks = np.fromiter(itertools.chain.from_iterable(map(state.on_client.__getitem__, members)), dtype=np.int64,
                            count=sum(sizes))
        clients = np.repeat(np.array(members, dtype=np.int64), sizes)
        single = state.single[tasks]
        clients_of: dict[int, list[int]] = {}  # a task's standbys here, all filed together
        for task, client in zip(tasks[~single].tolist(), clients[~single].tolist(), strict=True):
            clients_of.setdefault(task, []).append(client)
        for task, clients_here in clients_of.items():
            self._file(task, clients_here)
        # A task with one standby loses by its active's location alone (``_Losses.loss``): all at once.
        tasks, clients = tasks[single], clients[single]
        if not len(tasks):
            return
        active = state.active_loc[tasks]
        losses_of = (_single_spreads(state.weight, active, np.array(there, dtype=np.int64))
                     - _single_spreads(state.weight, active, np.array(here, dtype=np.int64)))
        state.spread_budget -= len(tasks)
        entries = list(zip(losses_of.tolist(), clients.tolist(), strict=True))
        self.filed.update(zip(tasks.tolist(), ([entry] for entry in entries), strict=True))
        order = np.lexsort((clients, losses_of))
        tasks = tasks[order].tolist()
        bounds = np.flatnonzero((np.diff(losses_of[order]) != 0) | (np.diff(clients[order]) != 0)) + 1
        for start, stop in zip([0, *bounds.tolist()], [*bounds.tolist(), len(tasks)], strict=True):
            value, client = entries[order[start]]
            self.slots.setdefault(value, {}).setdefault(client, set()).update(tasks[start:stop])

    def _file(self, task: int, clients: list[int]) -> None:
        loss = self.losses.loss
        entries = self.filed[task] = [(loss(task, client, self.here, self.there), client) for client in clients]
        self.losses.state.spread_budget -= len(entries)
        for value, client in entries:
            self.slots.setdefault(value, {}).setdefault(client, set()).add(task)

    def below(self, gain: int) -> Callable[[int, Collection[int]], Iterable[int]]:
        state = self.losses.state
        log = state.location_logs[self.here]
        if len(log) > self.synced:
            holders, loc = state.holders, state.loc
            for task in set(log[self.synced:]):
                for value, client in self.filed.pop(task, ()):
                    tasks = self.slots[value][client]
                    tasks.discard(task)
                    if not tasks:
                        del self.slots[value][client]
                clients = [c for c in holders[task] if loc[c] == self.here]
                if clients:
                    self._file(task, clients)
            self.synced = len(log)
        fitting = [by_client for value, by_client in self.slots.items() if value < gain and by_client]

        def narrowed(client: int, candidates: Collection[int]) -> Iterable[int]:
            found = [tasks for by_client in fitting if (tasks := by_client.get(client))]
            if not found:
                return ()
            return sorted(candidates & (found[0] if len(found) == 1 else set().union(*found)))

        return narrowed


def _members_to_scan(state: _Standbys, task: int, client: int, cls: tuple[int, ...], start: int) -> list[int]:
    """The clients at ``cls`` where ``_partner_candidates`` can be non-empty, in scan order
    (from ``start``, rotating). Without readiness, all of them. With it, a client qualifies if
    ``task`` is caught up there, or holds a standby caught up on ``client`` (restoring there
    when ``task`` is caught up on ``client``), or, if ``task`` restores on ``client``, holds any
    restoring standby: in a caught-up group a handful instead of the whole location.
    """
    members = state.members[cls]
    if state.ready is None or state.everywhere_but:  # the latter: ready_on lists explicit readiness only
        return members[start:] + members[:start]
    loc, ready = state.loc, state.ready
    caught_up_here = client in ready[task]
    chosen = {c for c in ready[task] if loc[c] == cls}
    if not caught_up_here:
        chosen |= state.restoring_at[cls]
    everyone = len(members)
    if len(chosen) < everyone:
        held_ready, held_restoring = state.held_index()
        held = (held_restoring if caught_up_here else held_ready)[client]
        chosen.update(holder for holder in held if loc[holder] == cls)
    if 8 * len(chosen) > len(members):
        return [c for c in members[start:] + members[:start] if c in chosen]
    position, size = state.position_in_class, len(members)
    return sorted(chosen, key=lambda c: (position[c] - start) % size)


def _partner_candidates(state: _Standbys, task: int, client: int, other_client: int) -> set[int]:
    """The standbys on ``other_client`` that ``restores_more`` could let trade with ``task``.

    With a = [client not ready for task], c = [other_client not ready for task] and, for a
    partner, b = [other_client not ready for it], d = [client not ready for it], the swap is
    allowed only if c + d <= a + b. If c > a, the partner needs b = 1 and d = 0 (it restores
    where it is, is caught up on ``client``); if c = a, b = 1 or d = 0. In a caught-up group
    that leaves few or none, instead of every standby on the client.
    """
    on_there = state.on_client[other_client]
    if state.ready is None or state.everywhere_but:
        return on_there
    ready = state.ready[task]
    slack = (client not in ready) - (other_client not in ready)
    if slack > 0:
        return on_there
    held_ready, held_restoring = state.held_index()
    if slack < 0:
        return held_restoring[client].get(other_client, _NONE)
    return state.restoring[other_client] | held_ready[client].get(other_client, _NONE)


class _Pricing:
    """KIP-925 getCost for a standby: traffic per cross-rack partition + non-overlap."""

    def __init__(self, cross: np.ndarray, client_rack: list[int], costs: tuple[int, int],
                 anchored: list[set[int]], racks: int) -> None:
        self.cross_array = cross
        self.cross = cross.tolist()
        self.client_rack = client_rack
        self.traffic, self.non_overlap = costs
        self.anchored = anchored
        self.anchor_rows = _rows(anchored, max(map(len, anchored), default=0))  # the same, for numpy
        self.racks = racks

    def cost(self, task: int, client: int) -> int:
        return (self.traffic * self.cross[task][self.client_rack[client]]
                + self.non_overlap * (client not in self.anchored[task]))

    def delta(self, task: int, client: int, rack: int) -> int:
        """Cost change of moving off ``client`` to a client of ``rack`` that is not an anchor."""
        row = self.cross[task]
        return (self.traffic * (row[rack] - row[self.client_rack[client]])
                + self.non_overlap * (client in self.anchored[task]))


def _traffic_pass(state: _Standbys, pricing: _Pricing) -> bool:
    """One round of KIP-925 C.I swaps between each ordered pair of zones, best gains first.

    A zone is a (rack, location) pair: within one, a standby's spread and traffic are fixed,
    so each side of a swap is filtered once for "spread not worse" before pairing, and the
    pairing only meets candidates that are rejected for distinct clients or exact cost. A pair
    that swapped nothing is only rechecked (``_still_quiet``) until it may swap again.
    """
    if state.zone_of is None:
        state.zone_of = [(pricing.client_rack[c], state.loc[c]) for c in range(len(state.clients))]
        state.zone_logs = {zone: [] for zone in state.zone_of}
        state.zone_log = [state.zone_logs[zone] for zone in state.zone_of]
    zones = sorted(state.zone_logs)
    changed = False
    slots: dict[tuple, tuple[np.ndarray, np.ndarray]] | None = None  # taken when a pair first needs them
    deltas: dict[tuple, _ZoneDeltas] = {}
    readiness_narrows = state.ready is not None and not state.everywhere_but
    zone_logs = state.zone_logs
    for source, dest in [(source, dest) for source in zones for dest in zones if source[0] != dest[0]]:
        record = state.quiet.pop((source, dest), None)
        if REMEMBER_FAILED and record is not None and (
                record.since == (len(zone_logs[source]), len(zone_logs[dest]))
                or _still_quiet(state, pricing, record, source, dest)):
            state.quiet[(source, dest)] = record
            continue
        if state.budget < 0:
            return changed
        if slots is None:
            since = {zone: len(log) for zone, log in state.zone_logs.items()}
            slots = _slots_by_zone(state, state.zone_of)
        for zone in (source, dest):
            if zone in slots and zone not in deltas:
                deltas[zone] = _ZoneDeltas(pricing, state, zone, *slots[zone])
        movers, partners, ready_partners, full = [], [], None, False
        if source in deltas and dest in deltas:
            # Prices are fixed, so the cost deltas of a whole zone come at once (numpy); only
            # candidates that lower the cost get the state checks, as one by one before. Each
            # pairing is charged to the search budget (a numpy call, and a check per slot): with
            # client tags of many values nearly every client is a zone of its own, and the pairs of
            # thousands of zones were uncounted work (minutes, past any budget).
            state.budget -= PAIRING_COST + len(deltas[source].tasks)
            if state.budget < 0:
                return changed
            movers = deltas[source].movable(state, dest, 0)
        if movers:
            movers.sort()
            state.budget -= PAIRING_COST + len(deltas[dest].tasks)
            if state.budget < 0:
                return changed
            # Partners are met in increasing delta and never past -movers[0][0] (the pairing
            # below stops there): only that prefix of the sorted list is built.
            partners = sorted(deltas[dest].movable(state, source, -movers[0][0]))
            used = [False] * len(partners)
            ready_partners = _ReadyPartners(state, partners, used) if readiness_narrows else None
            swapped, full = _pair_zones(state, pricing, movers, partners, used, ready_partners)
            if swapped:
                changed = True
                continue
        state.quiet[(source, dest)] = _QuietPair((since[source], since[dest]), movers, partners, ready_partners, full)
    return changed


def _pair_zones(state: _Standbys, pricing: _Pricing, movers: list, partners: list, used: list[bool],
                ready_partners: _ReadyPartners | None) -> tuple[bool, bool]:
    """The pairing of one zone pair: (anything swapped, a mover gave up after LOOKAHEAD tries)."""
    changed = full = False
    first = 0
    for delta_t, task, client in movers:
        while first < len(partners) and used[first]:
            first += 1
        tried = 0
        if ready_partners is None:
            indices: Iterable[int] = range(first, len(partners))
        else:
            indices = ready_partners.allowed(task, client, first)
        for index in indices:
            delta_u, other, other_client = partners[index]
            if delta_t + delta_u >= 0:
                break
            if tried == LOOKAHEAD:
                full = True
                break
            if used[index]:
                continue
            if other_client not in state.holders[other]:
                used[index] = True
                continue
            if state.restores_more(task, client, other, other_client):
                continue  # never a candidate: not counted against the lookahead
            tried += 1
            if _traffic_swap_ok(state, pricing, task, client, other, other_client):
                state.swap(task, client, other, other_client)
                used[index] = changed = True
                break
    return changed, full


class _QuietPair:
    """A zone pair's last pairing that swapped nothing: the lengths of its zones' logs when its
    slots were taken, its movers and partners (sorted), and whether a mover gave up on LOOKAHEAD."""

    __slots__ = ("since", "movers", "partners", "ready_partners", "full", "index")

    def __init__(self, since: tuple[int, int], movers: list, partners: list,
                 ready_partners: _ReadyPartners | None, full: bool) -> None:
        self.since, self.movers, self.partners = since, movers, partners
        self.ready_partners, self.full = ready_partners, full
        self.index: tuple[dict, dict, list[int]] | None = None  # movers by task, by client; restoring ones


def _still_quiet(state: _Standbys, pricing: _Pricing, record: _QuietPair, source: tuple, dest: tuple) -> bool:
    """Would the pair swap nothing again? Its pairing refused every pair of its movers and
    partners, none giving up on LOOKAHEAD, so only a standby relocated since can make a new
    pair: those alone are checked against the rest, as the pairing would (past RECHECK_LIMIT
    of them, or CHECK_LIMIT checks, the pair is run again in full)."""
    source_log, dest_log = state.zone_logs[source][record.since[0]:], state.zone_logs[dest][record.since[1]:]
    if record.full or len(source_log) + len(dest_log) > RECHECK_LIMIT:
        return False
    state.budget -= 1 + len(source_log) + len(dest_log)
    moved = set(source_log) | set(dest_log)
    zone_of, holders = state.zone_of, state.holders

    def not_worse(task: int, client: int, there: tuple) -> bool:  # as ``_ZoneDeltas.movable``
        if not state.single[task] and state.moves_of[task] is None and state.spread_budget <= 0:
            return False
        return state.spread_if(task, client, there) <= state.spread_now(task)

    new_movers, new_partners = [], []
    for task in sorted(moved):
        for client in holders[task]:
            zone = zone_of[client]
            if zone == source:
                delta = pricing.delta(task, client, dest[0])
                if delta < 0 and not_worse(task, client, dest[1]):
                    new_movers.append((delta, task, client))
            elif zone == dest and not_worse(task, client, source[1]):
                new_partners.append((pricing.delta(task, client, source[0]), task, client))
    if not new_movers and not new_partners:
        return True
    movers, partners = record.movers, record.partners
    if new_movers and (not movers or min(new_movers)[0] < movers[0][0]):
        return False  # its partners would reach past the prefix kept
    checks = CHECK_LIMIT
    new_partners.sort()
    for delta_t, task, client in new_movers:
        indices = range(len(partners)) if record.ready_partners is None \
            else record.ready_partners.allowed(task, client, 0)
        kept = (partners[index] for index in indices)
        for candidates in (kept, new_partners):
            for delta_u, other, other_client in candidates:
                if delta_t + delta_u >= 0:
                    break
                if candidates is kept and other in moved:
                    continue  # a slot held then: among the new partners if still held
                checks -= 1
                state.budget -= 1
                if checks < 0 or (not state.restores_more(task, client, other, other_client)
                                  and _traffic_swap_ok(state, pricing, task, client, other, other_client)):
                    return False
    for delta_u, other, other_client in new_partners:
        for delta_t, task, client in _movers_for(state, record, other, other_client):
            if delta_t + delta_u >= 0:
                break
            if task in moved:
                continue  # checked above, as a new mover
            checks -= 1
            state.budget -= 1
            if checks < 0 or (not state.restores_more(task, client, other, other_client)
                              and _traffic_swap_ok(state, pricing, task, client, other, other_client)):
                return False
    return True


def _movers_for(state: _Standbys, record: _QuietPair, other: int, other_client: int) -> list[tuple[int, int, int]]:
    """The kept movers that readiness lets trade with ``other`` on ``other_client``, in order
    (``_ReadyPartners`` seen from the partner's side): all of them without readiness."""
    movers = record.movers
    if record.ready_partners is None:
        return movers
    if record.index is None:
        by_task: dict[int, list[int]] = {}
        by_client: dict[int, list[int]] = {}
        restoring = []
        for index, (_, task, client) in enumerate(movers):
            by_task.setdefault(task, []).append(index)
            by_client.setdefault(client, []).append(index)
            if client not in state.ready[task]:
                restoring.append(index)
        record.index = (by_task, by_client, restoring)
    by_task, by_client, restoring = record.index
    special = set()
    for task in state.ready_on[other_client]:
        special.update(by_task.get(task, ()))
    for client in state.ready[other]:
        special.update(by_client.get(client, ()))
    if other_client not in state.ready[other]:  # a partner restoring where it is: any restoring mover
        special.update(restoring)
    return [movers[index] for index in sorted(special)]


def _rows(lists: Iterable[Collection[int]], width: int) -> np.ndarray:
    """Client indices per task as a matrix, rows padded with -1."""
    lists = list(lists)
    lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(lengths.sum()))
    if width and len(flat) == len(lists) * width:  # every row full (one standby each, most often)
        return flat.reshape(len(lists), width)
    out = np.full((len(lists), max(width, 1)), -1, dtype=np.int64)
    rows = np.repeat(np.arange(len(lists)), lengths)
    out[rows, np.arange(len(flat)) - (np.cumsum(lengths) - lengths)[rows]] = flat
    return out


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices of each range [start, start + length), concatenated."""
    return np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))


class _AnchorReturns:
    """The swaps the zone pairing cannot see: those where a standby goes back to an anchor.

    The pairing prices a standby as landing off its anchors; on one (its standby target, or a
    previous holder with the sticky assignor) it costs the non-overlap cost less, so such a
    swap can pay where the pairing sees none. Here each standby of a task with a free anchor
    (holding no standby of it, not running its active) meets the standbys on that anchor, at
    exact cost, best gains first, until no swap pays. After the first search only what a
    relocation may have changed is looked at again: the tasks relocated since, and the tasks
    waiting for a client these now hold (every other pair was refused and still would be).
    """

    def __init__(self, state: _Standbys, pricing: _Pricing, settled: bool) -> None:
        anchored = pricing.anchored
        self.holders = _rows(state.holders, state.weight - 1)  # as of log position ``synced``, the last search's
        self.synced = len(state.log)
        self.anchors = pricing.anchor_rows
        if settled:  # the anchors are the standbys given: only a relocated task can have a free one
            self.free = np.zeros(len(anchored), dtype=bool)
            self.free[np.fromiter(state.swapped, dtype=np.int64, count=len(state.swapped))] = True
        rows, columns = np.nonzero(self.anchors >= 0)
        on = self.anchors[rows, columns]
        order = np.argsort(on, kind="stable")
        self.anchored_tasks = rows[order]  # the tasks anchored on each client, client by client
        self.anchored_start = np.searchsorted(on[order], np.arange(len(state.clients) + 1))
        self.active = np.fromiter(state.active, dtype=np.int64, count=len(state.active))
        self.rack = np.array(pricing.client_rack, dtype=np.int64)
        self.loc = np.array(state.loc, dtype=np.int64).reshape(len(state.clients), -1)
        self.best_cross = pricing.cross_array.min(axis=1)
        if not settled:
            self.free = self._free(np.arange(len(anchored))).any(axis=1)
        self.searched = False
        self.ready_keys: np.ndarray | None = None  # task x clients + client, as ``_not_ready`` reads readiness
        self.inverted: np.ndarray | None = None

    def _free(self, tasks: np.ndarray) -> np.ndarray:
        anchors = self.anchors[tasks]
        return (anchors >= 0) & (anchors != self.active[tasks][:, None]) & (
            anchors[:, :, None] != self.holders[tasks][:, None, :]).all(axis=2)

    def run(self, state: _Standbys, pricing: _Pricing) -> bool:
        """Search, and search again after any swap, until none pays: anything swapped?"""
        changed = False
        while True:
            log = state.log
            moved = np.unique(np.array(log[self.synced:], dtype=np.int64))
            if len(moved):
                self.holders[moved] = _rows((state.holders[t] for t in moved.tolist()), self.holders.shape[1])
            if self.searched:
                if not len(moved):
                    return changed
                if REMEMBER_FAILED:
                    clients = np.unique(self.holders[moved])
                    clients = clients[clients >= 0]
                    start = self.anchored_start[clients]
                    waiting = self.anchored_tasks[_ranges(start, self.anchored_start[clients + 1] - start)]
                    tasks = np.union1d(moved, waiting[self.free[waiting]])
                else:
                    tasks = np.union1d(np.flatnonzero(self.free), moved)
            else:  # every task with a free anchor
                tasks = np.flatnonzero(self.free)
            self.synced, self.searched = len(log), True
            free = self._free(tasks)
            self.free[tasks] = free.any(axis=1)
            if not self._swap(state, pricing, tasks, free):
                return changed
            changed = True

    def _swap(self, state: _Standbys, pricing: _Pricing, tasks: np.ndarray, free: np.ndarray) -> bool:
        """Swaps of the standbys of ``tasks`` to their free anchors (``free``, per anchor).

        A mover (a standby on client a, a free anchor b of its task) meets the standbys on b in
        the order of the gain, and only those whose swap pays. All else a check asks of the
        partner (spread, readiness, ``may_take``) depends on the client pair (a, b) alone, so
        per client pair the standbys on b that pass are filed once (``_partners``) and each
        mover takes the first one that its readiness lets trade: the pairs that the checks
        refuse are never met. With 2 standbys these had been nearly all (only one standby's
        spread was filtered; 100 x 20,000 tasks: 1.8M checks for 721 swaps) and few clients
        had built all of them (10 x 20,000: 60M pairs, 5 GB). What is filed is what the start
        of the search saw; a task swapped since is met wherever it stood then, and judged as
        it is now, so the swaps are the ones a check of every pair would take.
        """
        holders = self.holders[tasks]
        row, column = np.nonzero(free)
        movers, clients, anchors = [], [], []
        for k in range(holders.shape[1]):
            held = holders[row, k] >= 0
            movers.append(tasks[row[held]])
            clients.append(holders[row[held], k])
            anchors.append(self.anchors[tasks[row[held]], column[held]])
        mover, client, anchor = np.concatenate(movers), np.concatenate(clients), np.concatenate(anchors)
        traffic, non_overlap, cross, rack = pricing.traffic, pricing.non_overlap, pricing.cross_array, self.rack
        delta = (traffic * (cross[mover, rack[anchor]] - cross[mover, rack[client]])
                 + non_overlap * (self.anchors[mover] == client[:, None]).any(axis=1) - non_overlap)
        # a mover whose spread would be worse at its anchor: for good with one standby, with
        # several while its other standbys stay where they are
        spreads = self._spread_change(state, mover, client, anchor) <= 0
        keep = spreads | ~state.single[mover]
        order = np.flatnonzero(keep)[np.lexsort((anchor[keep], client[keep], mover[keep], delta[keep]))]
        mover, client, anchor, delta, spreads = mover[order], client[order], anchor[order], delta[order], spreads[order]
        if not len(mover):
            return False
        # readiness: a swap may not put more of the two on clients that restore them, so a mover
        # whose own standby would restore more (``owes`` 1) takes only a partner restoring less
        owes = self._not_ready(state, mover, anchor) - self._not_ready(state, mover, client)
        size = len(state.clients)
        keys, pair_of = np.unique(client * size + anchor, return_inverse=True)
        bound = np.full(len(keys), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(bound, pair_of, -delta)
        pair_client, pair_anchor = keys // size, keys % size
        cost, task_of, owed, starts = self._partners(state, pricing, pair_client, pair_anchor, bound)
        filed: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
        by_anchor: dict[int, list[int]] = {}
        for index, at in enumerate(pair_anchor.tolist()):
            by_anchor.setdefault(at, []).append(index)
        pair_client_list, bound_list = pair_client.tolist(), bound.tolist()
        single, holders, swapped = state.single, state.holders, False
        touched: dict[int, tuple[int, ...]] = {}  # tasks swapped in this search: their standbys' clients before
        revived: dict[int, list[tuple[int, int, int]]] = {}  # per client pair, (cost, task, owed) of these
        filings: dict[int, list[tuple[int, tuple[int, int, int]]]] = {}  # per touched task, where it is filed

        def unweighed(task: int) -> bool:  # past the spread budget, as ``_ZoneDeltas.movable``
            return not single[task] and state.moves_of[task] is None and state.spread_budget <= 0

        def not_ready(task: int, at: int) -> int:
            return 0 if state.ready is None else int(not state.ready_for(task, at))

        def worse(task: int, leaving: int, arriving: int) -> bool:  # ``spread_if``, no budget spent
            locs = [state.loc[arriving if c == leaving else c] for c in holders[task]]
            return state.spread(task, locs) > state.scores[task]

        def refile(task: int) -> None:
            """File a task just swapped wherever it stood at the start and still stands, as it is now."""
            for index, entry in filings.pop(task, ()):
                revived[index].remove(entry)
            now, filed_at = holders[task], []
            for at in touched[task]:
                if at not in now:
                    continue
                for index in by_anchor.get(at, ()):
                    there = pair_client_list[index]
                    change = pricing.cost(task, there) - pricing.cost(task, at)
                    if (change < bound_list[index] and there != state.active[task] and there not in now
                            and not worse(task, at, there)):
                        entry = (change, task, not_ready(task, there) - not_ready(task, at))
                        bisect.insort(revived.setdefault(index, []), entry)
                        filed_at.append((index, entry))
            filings[task] = filed_at

        for task, at_client, to, gain, fits, owe, index in zip(
                mover.tolist(), client.tolist(), anchor.tolist(), (-delta).tolist(), spreads.tolist(),
                owes.tolist(), pair_of.tolist(), strict=True):
            if task in touched:
                if at_client not in holders[task] or to in holders[task] or worse(task, at_client, to):
                    continue
            elif not fits:
                continue
            lists = filed.get((index, owe))
            if lists is None:
                begin, end = starts[index], starts[index + 1]
                allowed = np.flatnonzero(owed[begin:end] <= -owe) + begin
                lists = filed[(index, owe)] = (cost[allowed].tolist(), task_of[allowed].tolist())
            costs, others = lists
            stop = bisect.bisect_left(costs, gain)
            candidates = (t for t in itertools.islice(others, stop) if t not in touched)
            if revived.get(index):
                more = revived[index]
                more = ((c, t) for c, t, e in itertools.islice(more, bisect.bisect_left(more, (gain,))) if e <= -owe)
                candidates = (t for _, t in heapq.merge(
                    ((c, t) for c, t in itertools.islice(zip(costs, others, strict=True), stop) if t not in touched), more))
            for partner in candidates:
                if unweighed(task):
                    break  # past the spread budget, never weighed
                if unweighed(partner):
                    continue
                state.budget -= 1
                if state.budget < 0:
                    return swapped
                if _traffic_swap_ok(state, pricing, task, at_client, partner, to):
                    for moved in (task, partner):
                        touched.setdefault(moved, tuple(holders[moved]))
                    state.swap(task, at_client, partner, to)
                    refile(task)
                    refile(partner)
                    swapped = True
                    break
        return swapped

    def _partners(self, state: _Standbys, pricing: _Pricing, client: np.ndarray, anchor: np.ndarray,
                  bound: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
        """Per client pair (``client``, ``anchor``), the standbys on the anchor that may go to
        the client (not its active, not holding it, spread not worse) for a cost change below
        ``bound``: (cost change, task, how many more of its standbys would restore (-1 to 1))
        sorted by cost then task, pair by pair, and each pair's start. Built ``PARTNER_BATCH`` candidates at a time."""
        traffic, non_overlap, cross, rack = pricing.traffic, pricing.non_overlap, pricing.cross_array, self.rack
        # The standbys on each anchor, sorted by the least their move could cost (to their best
        # rack, back to an anchor of theirs): a pair meets only the prefix that could pay.
        targets = np.unique(anchor)
        sizes = np.fromiter((len(state.on_client[c]) for c in targets.tolist()), dtype=np.int64, count=len(targets))
        other = np.fromiter(itertools.chain.from_iterable(state.on_client[c] for c in targets.tolist()),
                            dtype=np.int64, count=int(sizes.sum()))
        there = np.repeat(targets, sizes)
        their = self.anchors[other]
        least = (traffic * (self.best_cross[other] - cross[other, rack[there]])
                 + non_overlap * (their == there[:, None]).any(axis=1)
                 - non_overlap * ((their >= 0) & (their != there[:, None])).any(axis=1))
        floor = int(least.min(initial=0))
        span = int(max(least.max(initial=0), bound.max())) - floor + 2
        key = np.repeat(np.arange(len(targets)), sizes) * span + (least - floor)
        order = np.argsort(key, kind="stable")
        key, other = key[order], other[order]
        at = np.searchsorted(targets, anchor) * span
        start = np.searchsorted(key, at)
        lengths = np.searchsorted(key, at + np.clip(bound - floor, 0, span - 1)) - start
        ends = np.cumsum(lengths)
        parts = []
        first = 0
        while first < len(lengths):
            last = max(first + 1, int(np.searchsorted(ends, ends[first] - lengths[first] + PARTNER_BATCH, "right")))
            pair = np.repeat(np.arange(first, last), lengths[first:last])
            task = other[_ranges(start[first:last], lengths[first:last])]
            a, b = client[pair], anchor[pair]
            theirs = self.anchors[task]
            change = (traffic * (cross[task, rack[a]] - cross[task, rack[b]])
                      + non_overlap * (theirs == b[:, None]).any(axis=1)
                      - non_overlap * (theirs == a[:, None]).any(axis=1))
            pick = np.flatnonzero((change < bound[pair]) & (self.active[task] != a)
                                  & (self.holders[task] != a[:, None]).all(axis=1))
            pair, task, a, b, change = pair[pick], task[pick], a[pick], b[pick], change[pick]
            pick = np.flatnonzero(self._spread_change(state, task, b, a) <= 0)
            pair, task, a, b, change = pair[pick], task[pick], a[pick], b[pick], change[pick]
            owed = self._not_ready(state, task, a) - self._not_ready(state, task, b)
            parts.append((pair, change, task, owed))
            first = last
        pair, change, task, owed = (np.concatenate([part[k] for part in parts]) if parts
                                     else np.zeros(0, dtype=np.int64) for k in range(4))
        order = np.lexsort((task, change, pair))
        return change[order], task[order], owed[order], np.searchsorted(pair[order], np.arange(len(client) + 1)).tolist()

    def _spread_change(self, state: _Standbys, tasks: np.ndarray, leaving: np.ndarray, arriving: np.ndarray) -> np.ndarray:
        """``_Standbys.spread_if`` - ``spread_now`` of each task's standby on ``leaving`` moving to
        ``arriving``, as its standbys were at the start of the search."""
        holders = self.holders[tasks]
        return _spread_changes(state.weight, state.active_loc[tasks], self.loc[holders],
                               (holders >= 0) & (holders != leaving[:, None]), self.loc[leaving], self.loc[arriving])

    def _not_ready(self, state: _Standbys, tasks: np.ndarray, clients: np.ndarray) -> np.ndarray:
        """1 where a client is not caught up on a task (``ready_for``), else 0; all 0 without readiness."""
        if state.ready is None:
            return np.zeros(len(tasks), dtype=np.int64)
        size = len(state.clients)
        if self.ready_keys is None:
            sets = [*state.ready, *state.everywhere_but.values()]
            owners = np.array([*range(len(state.ready)), *state.everywhere_but], dtype=np.int64)
            lengths = np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))
            listed = np.fromiter(itertools.chain.from_iterable(sets), dtype=np.int64, count=int(lengths.sum()))
            self.ready_keys = np.unique(np.repeat(owners, lengths) * size + listed)
            self.inverted = np.zeros(len(state.tasks), dtype=bool)  # listed: the clients *not* caught up
            self.inverted[np.fromiter(state.everywhere_but, dtype=np.int64, count=len(state.everywhere_but))] = True
        keys = tasks * size + clients
        found = np.zeros(len(keys), dtype=bool)
        if len(self.ready_keys):
            found = self.ready_keys[np.minimum(np.searchsorted(self.ready_keys, keys), len(self.ready_keys) - 1)] == keys
        return (found == self.inverted[tasks]).astype(np.int64)


class _ReadyPartners:
    """The partners (sorted (delta, task, client) slots) that readiness can let trade with a mover.

    With a = [mover restoring where it is], b = [partner restoring where it is], c = [partner's
    client not ready for the mover], d = [mover's client not ready for the partner], a swap is
    allowed only if c + d <= a + b (``restores_more``). A restoring mover may take any restoring
    partner; every other allowed pair has c = 0 (the partner sits on a client caught up on the
    mover) or d = 0 (the partner is caught up on the mover's client): *special* pairs, found
    through the few clients caught up on each task. In a caught-up group that spares checking
    thousands of partners that the rule refuses.
    """

    def __init__(self, state: _Standbys, partners: list[tuple[int, int, int]], used: list[bool]) -> None:
        self.state = state
        self.used = used
        self.first_restoring = 0
        self.restoring: list[int] = []
        self.on_client: dict[int, list[int]] = {}
        self.ready_on: dict[int, list[int]] = {}
        if not partners:
            return
        _, others, clients = zip(*partners, strict=True)
        ready_sets = list(map(state.ready.__getitem__, others))
        lengths = np.fromiter(map(len, ready_sets), dtype=np.int64, count=len(partners))
        ready_clients = np.fromiter(itertools.chain.from_iterable(ready_sets), dtype=np.int64, count=int(lengths.sum()))
        ready_index = np.repeat(np.arange(len(partners)), lengths)
        on = np.array(clients, dtype=np.int64)
        size = len(state.clients)
        caught_up = np.isin(np.arange(len(partners)) * size + on, ready_index * size + ready_clients)
        self.restoring = np.flatnonzero(~caught_up).tolist()
        self.on_client = _ascending_by(on, np.arange(len(partners)))
        self.ready_on = _ascending_by(ready_clients, ready_index)

    def allowed(self, task: int, client: int, first: int) -> Iterator[int]:
        """Partner indices from ``first`` on, ascending, that may pass ``restores_more`` (a superset)."""
        state = self.state
        special = set(self.ready_on.get(client, ()))
        on_client = self.on_client
        for ready_client in state.ready[task]:
            special.update(on_client.get(ready_client, ()))
        special = sorted(filter(first.__le__, special) if first else special)
        if client in state.ready[task]:
            return iter(special)
        if 2 * len(self.restoring) >= len(self.used):  # most partners restore: the check filters the rest
            return range(first, len(self.used))
        restoring, used = self.restoring, self.used
        while self.first_restoring < len(restoring) and used[restoring[self.first_restoring]]:
            self.first_restoring += 1
        start = max(self.first_restoring, bisect.bisect_left(restoring, first))
        return _unique(heapq.merge(special, (restoring[i] for i in range(start, len(restoring)))))


def _ascending_by(keys: np.ndarray, values: np.ndarray) -> dict[int, list[int]]:
    """key -> its ``values`` in their order (ascending ``values`` stay ascending)."""
    if not len(keys):
        return {}
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order].tolist()
    starts = [0, *(np.flatnonzero(np.diff(keys)) + 1).tolist()]
    return dict(zip(keys[starts].tolist(), map(values.__getitem__, map(slice, starts, [*starts[1:], len(values)])),
                    strict=True))


def _unique(ascending: Iterator[int]) -> Iterator[int]:
    last = -1
    for value in ascending:
        if value != last:
            yield value
            last = value


class _ZoneDeltas:
    """The standby slots (task, client) of one zone and their ``_Pricing.delta`` toward any rack."""

    def __init__(self, pricing: _Pricing, state: _Standbys, zone: tuple, tasks: np.ndarray, clients: np.ndarray) -> None:
        rack, location = zone
        self.pricing = pricing
        self.tasks, self.clients = tasks, clients
        self.rows = pricing.cross_array[tasks]
        anchored = (pricing.anchor_rows[tasks] == clients[:, None]).any(axis=1)
        self.base = pricing.non_overlap * anchored - pricing.traffic * self.rows[:, rack]
        self.active_loc = state.active_loc[self.tasks]
        self.single = state.single[self.tasks]
        self.weight = state.weight
        self.spread_here = _single_spreads(self.weight, self.active_loc, np.array(location, dtype=np.int64))

    def movable(self, state: _Standbys, dest: tuple, bound: int) -> list[tuple[int, int, int]]:
        """(delta, task, client) of the slots still held whose delta toward the ``dest`` zone is
        below ``bound`` and whose task's spread would not get worse there, in slot order (in
        ascending order when every task has one standby, so that the callers' sort is one pass).

        A task with one standby spreads by its active's location alone (``_single_spread``), so
        those are judged for the whole zone at once; tasks with several standbys one by one.
        """
        dest_rack, dest_location = dest
        delta = self.pricing.traffic * self.rows[:, dest_rack] + self.base
        spread_there = _single_spreads(self.weight, self.active_loc, np.array(dest_location, dtype=np.int64))
        keep = np.flatnonzero((delta < bound) & (~self.single | (spread_there <= self.spread_here)))
        if self.single[keep].all():  # judged without side effects: in the order the callers sort them
            keep = keep[np.lexsort((self.clients[keep], self.tasks[keep], delta[keep]))]
        holders, single = state.holders, self.single[keep].tolist()
        def not_worse(t: int, c: int, there: tuple) -> bool:
            # past the spread budget no new table of moves is worked out: a task not yet
            # weighed is taken as worse (it stays, as past any budget)
            if state.moves_of[t] is None and state.spread_budget <= 0:
                return False
            return state.moves(t)[holders[t].index(c), there] <= 0
        return [
            (d, t, c)
            for d, t, c, one in zip(delta[keep].tolist(), self.tasks[keep].tolist(), self.clients[keep].tolist(),
                                    single, strict=True)
            if c in holders[t] and (one or not_worse(t, c, dest_location))
        ]


def _slots_by_zone(state: _Standbys, zone_of: list) -> dict[tuple, tuple[np.ndarray, np.ndarray]]:
    """Per zone, its standby slots as (tasks, clients) arrays, by client then task."""
    clients = np.repeat(np.arange(len(state.on_client)), [len(tasks) for tasks in state.on_client])
    tasks = np.fromiter((task for on_client in state.on_client for task in sorted(on_client)), dtype=np.int64,
                        count=len(clients))
    zones = sorted(set(zone_of))
    zone_index = index_of(zones)
    slot_zone = np.array([zone_index[zone] for zone in zone_of], dtype=np.int64)[clients]
    order = np.argsort(slot_zone, kind="stable")
    bounds = np.searchsorted(slot_zone[order], np.arange(len(zones) + 1))
    return {zone: (tasks[order[start:stop]], clients[order[start:stop]])
            for zone, start, stop in zip(zones, bounds[:-1].tolist(), bounds[1:].tolist(), strict=True) if stop > start}


def _traffic_swap_ok(state: _Standbys, pricing: _Pricing, task: int, client: int, other: int, other_client: int) -> bool:
    """Distinct clients, neither on its active, lower exact cost, neither spread worse."""
    if not (state.may_take(task, other_client) and state.may_take(other, client)):
        return False
    if state.restores_more(task, client, other, other_client):
        return False
    before = pricing.cost(task, client) + pricing.cost(other, other_client)
    after = pricing.cost(task, other_client) + pricing.cost(other, client)
    if after >= before:
        return False
    return (state.spread_if(task, client, state.loc[other_client]) <= state.spread_now(task)
            and state.spread_if(other, other_client, state.loc[client]) <= state.spread_now(other))
