"""Standbys across racks and client tags (KIP-925 C, KIP-708), by swaps and balanced moves.

``assignor.rack_aware`` calls this on the balanced standby target. A swap trades two standbys
between two clients, so each keeps its standby count; a *move* takes one standby to another
client, only where both stay within their windows of stateful replicas (the standby target's
own, ``windows``), so the result is as balanced as the target. A change is
taken only if every task keeps distinct clients, none lands on its own active's client, and it
strictly improves, in this order (KIP-925 C's list):

1. *spread* (KIP-925 C items 2-3, KIP-708): per location key (each configured tag, or the
   rack), a standby sharing the active's value costs ``replicas`` points and each further
   repeated value one point. A key with fewer values than replicas can never reach 0: it is
   relaxed by this very measure, not an error. Swaps lowering the two tasks' sum are taken,
   else a move lowering the task's own (a free client of another location: counts alone would
   keep the standby beside its active, KIP-708's first rule).
2. *traffic* (KIP-925 C.I, "Balance reliability over cost"): swaps between two racks that
   lower traffic + non-overlap cost and leave neither task's spread worse.

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
import operator
from collections.abc import Collection, Iterator, Mapping

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
# spread tables of new combinations of locations (locations x keys each) and the loss index's
# updates count too: with random tag values every client is a location of its own, and those
# were uncounted (fresh 1,000 x 20,000, 3 values per key: 5 keys 31 s, 20 keys and 2 standbys
# 375 s; counted, 9.6 and 8.8 s).
SPREAD_BUDGET = 500
LOOKAHEAD = 64  # traffic pass: partners tried per standby before giving up on it
MAX_ROUNDS = 50
LOSS_INDEX_AFTER = 10_000  # partner checks after which the spread search builds its loss index
REMEMBER_FAILED = True  # skip a spread search that found nothing, while nothing it reads has changed


class _Standbys:
    """The private, mutable builder: standby holders by task and tasks by client, as indices."""

    def __init__(self, group: Group, actives: Mapping[TaskId, str], standbys: Mapping[TaskId, tuple[str, ...]],
                 location: Mapping[str, tuple[str, ...]], ranking: Ranking | None = None,
                 windows: Mapping[str, tuple[int, int]] | None = None) -> None:
        self.clients = group.clients
        client_index = index_of(self.clients)
        self.tasks = tuple(t for t in group.stateful if standbys.get(t))
        self.active = [client_index[actives[t]] for t in self.tasks]
        self.holders = [sorted([client_index[c] for c in standbys[t]]) for t in self.tasks]
        self.on_client: list[set[int]] = [set() for _ in self.clients]
        for task, holders in enumerate(self.holders):
            for client in holders:
                self.on_client[client].add(task)
        values = [index_of(sorted({location[c][k] for c in self.clients})) for k in range(len(location[self.clients[0]]))]
        self.loc = [tuple(values[k][location[c][k]] for k in range(len(values))) for c in self.clients]
        self.classes = sorted(set(self.loc))
        self.members = {cls: [c for c, here in enumerate(self.loc) if here == cls] for cls in self.classes}
        self.cursor = dict.fromkeys(self.classes, 0)
        self.weight = max((len(h) for h in self.holders), default=0) + 1
        self.spread_memo: dict[tuple, int] = {}
        self.moves_memo: dict[tuple, dict[tuple[int, tuple[int, ...]], int]] = {}
        self.moves_of: list[dict[tuple[int, tuple[int, ...]], int] | None] = [None] * len(self.tasks)
        self.budget = SEARCH_BUDGET
        self.spread_budget = SPREAD_BUDGET * sum(map(len, self.holders))
        self.swapped: set[int] = set()
        # For whole zones at once (``_ZoneDeltas``): each task's active location, and whether it
        # has one standby (swaps keep every task's count, so this never changes).
        locations = np.array(self.loc, dtype=np.int64).reshape(len(self.clients), len(values))
        self.active_loc = locations[np.array(self.active, dtype=np.int64)]
        self.single = np.array([len(h) == 1 for h in self.holders], dtype=bool)
        # ``spread`` of every task: those with one standby (most) at once, as it scores them
        singles = np.flatnonzero(self.single)
        scores = np.zeros(len(self.tasks), dtype=np.int64)
        scores[singles] = (self.weight + 1) * (self.active_loc[singles] == locations[
            [self.holders[task][0] for task in singles.tolist()]]).sum(axis=1)
        self.scores = scores.tolist()
        for task in np.flatnonzero(~self.single).tolist():
            self.scores[task] = self.spread(task, [self.loc[c] for c in self.holders[task]])
        # Readiness (``Ranking.caught_up``, with the high-availability assignor only): per task,
        # the clients caught up on it; for a task whose whole changelog is within the acceptable
        # lag every client reporting nothing is caught up too, so ``everywhere_but`` holds the
        # few that are not (reported lags beyond it) instead.
        self.ready: list[frozenset[int]] | None = None
        self.everywhere_but: dict[int, frozenset[int]] = {}
        if ranking is not None:
            self.ready = []
            for task, task_id in enumerate(self.tasks):
                ranks = ranking.holders.get(task_id, {})
                if ranking.absent[task_id] == 0:
                    self.everywhere_but[task] = frozenset([client_index[c] for c, rank in ranks.items() if rank])
                    self.ready.append(frozenset())
                else:
                    self.ready.append(frozenset([client_index[c] for c, rank in ranks.items() if rank == 0]))
            if not self.everywhere_but and not any(self.ready):
                self.ready = None  # nobody caught up on anything (a fresh group): every swap restores as much
        # Per client, the standbys on it that still restore there, and the tasks caught up on
        # it (only with ``ready``): what ``_partner_candidates`` narrows the search to.
        self.restoring: list[set[int]] = [set() for _ in self.clients]
        self.ready_on: list[set[int]] = [set() for _ in self.clients]
        self.restoring_at: dict[tuple[int, ...], set[int]] = {cls: set() for cls in self.classes}
        if self.ready is not None:
            everywhere_but = self.everywhere_but
            for task, (holders, ready) in enumerate(zip(self.holders, self.ready, strict=True)):
                for client in ready:
                    self.ready_on[client].add(task)
                exceptions = everywhere_but.get(task)  # ``ready_for``, inlined (a loop over every standby)
                for client in holders:
                    if client not in ready if exceptions is None else client in exceptions:
                        self.restoring[client].add(task)
                        self.restoring_at[self.loc[client]].add(client)
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
        # Searches that found no partner, and what they read: each location's version moves when
        # a swap touches a client there or a task with a standby there; a task's when it swaps.
        self.class_version = dict.fromkeys(self.classes, 0)
        self.task_version = [0] * len(self.tasks)
        self.failed: dict[tuple, tuple[int, int, int]] = {}
        # Likewise for the traffic pass: zones (rack, location) and their versions, and the zone
        # pairs whose last run swapped nothing, with the versions it read.
        self.zone_of: list[tuple] | None = None
        self.zone_version: dict[tuple, int] = {}
        self.quiet: dict[tuple, tuple[int, int]] = {}

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
        if len(holder_locs) == 1:
            # One standby (the common case): a key scores weight + 1 exactly where it shares
            # the active's value, the general sum below with one holder.
            return (self.weight + 1) * sum(map(operator.eq, active, holder_locs[0]))
        # Several standbys: the score depends on the locations alone, in any order, and groups
        # have few of them, so each combination is worked out once.
        memo_key = (active, *sorted(holder_locs))
        score = self.spread_memo.get(memo_key)
        if score is None:
            score = 0
            for key, value in enumerate(active):
                seen = [loc[key] for loc in holder_locs]
                score += self.weight * seen.count(value) + len(seen) + 1 - len(set(seen) | {value})
            self.spread_memo[memo_key] = score
        return score

    def spread_now(self, task: int) -> int:
        return self.scores[task]

    def spread_if(self, task: int, leaving: int, arriving_loc: tuple[int, ...]) -> int:
        holders = self.holders[task]
        if len(holders) == 1 and holders[0] == leaving:
            return (self.weight + 1) * sum(map(operator.eq, self.loc[self.active[task]], arriving_loc))
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
            score = self.spread(task, locs)
            moves = {(position, there): self.spread(task, [*locs[:position], there, *locs[position + 1:]]) - score
                     for position in range(len(holders)) for there in self.classes}
            self.moves_memo[key] = moves
            # locations x keys of work each: with many tag keys every client is a location of
            # its own, and these tables (and the loss index they feed) were the unbounded part
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
        self._relocate(task, client, there)
        self._file_room(client)
        self._file_room(there)

    def _relocate(self, who: int, leave: int, arrive: int) -> None:
        if self.losses is not None:
            self.losses.remove(who)
        holders = self.holders[who]
        self.task_version[who] += 1
        self.moves_of[who] = None
        for holder in (*holders, arrive):
            self.class_version[self.loc[holder]] += 1
            if self.zone_of is not None:
                self.zone_version[self.zone_of[holder]] += 1
        holders[holders.index(leave)] = arrive
        holders.sort()
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
        if self.losses is not None:
            self.losses.add(who)

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
    pricing = None
    if traffic is not None:
        cross, racks, costs = traffic
        stateful_row = index_of(group.stateful)
        rows = np.array([stateful_row[t] for t in state.tasks], dtype=np.int64)
        rack_index = index_of(racks)
        client_rack = [rack_index[group.states[c].rack] for c in group.clients]
        if anchors is None:
            anchored = [set(holders) for holders in state.holders]
        else:
            client_index = index_of(group.clients)
            anchored = [{client_index[c] for c in anchors.get(t, ()) if c in client_index} for t in state.tasks]
        pricing = _Pricing(cross[rows], client_rack, costs, anchored, len(racks))
    for _ in range(MAX_ROUNDS):
        changed = _spread_pass(state)
        if pricing is not None:
            changed = _traffic_pass(state, pricing) or changed
        if not changed:
            break
    return state.result(standbys)


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
        options = []
        for cls in state.classes:
            if cls != state.loc[client]:
                score = state.spread_if(task, client, cls)
                if score < current:
                    options.append((score, cls))
        for score, cls in sorted(options):
            partner = _find_partner(state, task, client, cls, current - score)
            if partner is not None:
                state.swap(task, client, partner[1], partner[0])
                return True
            there = _find_room(state, task, client, cls)
            if there is not None:
                state.move(task, client, there)
                return True
    return False


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
    seen = (state.class_version[cls], state.class_version[state.loc[client]], state.task_version[task])
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
    until a swap touches the location, the mover's or the mover itself (``_Standbys.failed``).
    """
    members = state.members[cls]
    start = state.cursor[cls]
    arriving = state.loc[client]
    search = (task, client, cls, gain)
    seen = (state.class_version[cls], state.class_version[arriving], state.task_version[task])
    if REMEMBER_FAILED and state.failed.get(search) == seen:
        return None
    if state.losses is None and SEARCH_BUDGET - state.budget >= LOSS_INDEX_AFTER:
        state.losses = _Losses(state)
    below = None if state.losses is None else state.losses.below(cls, arriving, gain)
    scanned = _members_to_scan(state, task, client, cls, start)
    state.spread_budget -= 1 + len(scanned) + (len(state.ready_on[client]) if state.ready is not None else 0)
    for other_client in scanned:
        if below is not None:
            fitting = [tasks for by_client in below if (tasks := by_client.get(other_client))]
            if not fitting:
                continue
        if not state.may_take(task, other_client):
            continue
        candidates = _partner_candidates(state, task, client, other_client)
        if below is not None:
            candidates = candidates & (fitting[0] if len(fitting) == 1 else set().union(*fitting))
        for other in sorted(candidates):
            state.budget -= 1
            if state.budget < 0:
                return None
            if not state.may_take(other, client) or state.restores_more(task, client, other, other_client):
                continue
            loss = state.spread_if(other, other_client, arriving) - state.spread_now(other)
            if loss < gain:
                state.cursor[cls] = (state.position_in_class[other_client] + 1) % len(members)
                return other_client, other
    state.failed[search] = seen
    return None


class _Losses:
    """Every standby slot by how much its task's spread would worsen were it moved elsewhere.

    ``_find_partner`` needs a partner whose loss is below the mover's gain; most searches that
    fail do so on exactly that (a task stuck with two standbys in one location finds every
    partner worse off for the trade). For each (location a slot is at, location it would move
    to), slots are filed by their loss, client -> tasks, and kept up to date on every swap, so
    such a search visits only the clients holding a slot that could accept. Narrowing only:
    the search meets the same partners in the same order, minus those that fail on loss.
    """

    def __init__(self, state: _Standbys) -> None:
        self.state = state
        self.slots: dict[tuple, dict[int, dict[int, set[int]]]] = {}
        self.filed: dict[int, list[tuple[tuple, int, int]]] = {}
        counts = np.array([len(h) for h in state.holders], dtype=np.int64)
        for count in np.unique(counts).tolist():
            self._file_alike(np.flatnonzero(counts == count), count)

    def _file_alike(self, tasks: np.ndarray, count: int) -> None:
        """``add`` for every task with ``count`` standbys at once (numpy): per key, a location
        scores weight x (standbys sharing the active's value) + count + 1 - (distinct values
        among the active and its standbys), as ``_Standbys.spread``."""
        state = self.state
        classes = state.classes
        class_index = {cls: index for index, cls in enumerate(classes)}
        class_values = np.array(classes, dtype=np.int64).reshape(len(classes), -1)
        client_class = np.array([class_index[loc] for loc in state.loc], dtype=np.int64)
        holders = np.array([state.holders[t] for t in tasks.tolist()], dtype=np.int64).reshape(len(tasks), count)
        active = class_values[client_class[np.asarray(state.active, dtype=np.int64)[tasks]]][:, None, :]
        held = class_values[client_class[holders]]  # (tasks, count, keys)
        score = np.asarray(state.scores, dtype=np.int64)[tasks]
        parts = []
        for slot in range(count):
            here = client_class[holders[:, slot]]
            for there in range(len(classes)):
                moved = held.copy()
                moved[:, slot, :] = class_values[there]
                values = np.concatenate([moved, active], axis=1)  # (tasks, count + 1, keys)
                distinct = np.ones(values.shape[::2], dtype=np.int64)
                for index in range(1, count + 1):
                    distinct += (values[:, index:index + 1, :] != values[:, :index, :]).all(axis=1)
                shared = (moved == active).sum(axis=1)
                loss = (state.weight * shared + count + 1 - distinct).sum(axis=1) - score
                keep = here != there
                parts.append(np.column_stack([here[keep], np.full(int(keep.sum()), there), loss[keep],
                                              holders[keep, slot], tasks[keep]]))
        table = np.concatenate(parts)
        if not len(table):
            return
        table = table[np.lexsort(table.T[::-1])]
        bounds = np.flatnonzero((np.diff(table[:, :4], axis=0) != 0).any(axis=1)) + 1
        starts = np.concatenate([[0], bounds]).tolist()
        ends = [*bounds.tolist(), len(table)]
        members = table[:, 4].tolist()
        for (here, there, loss, client), begin, end in zip(table[starts, :4].tolist(), starts, ends, strict=True):
            by_client = self.slots.setdefault((classes[here], classes[there]), {}).setdefault(loss, {})
            by_client.setdefault(client, set()).update(members[begin:end])

    def _entries(self, task: int) -> list[tuple[tuple, int, int]]:
        state = self.state
        holders, loc = state.holders[task], state.loc
        return [((loc[holders[position]], there), loss, holders[position])
                for (position, there), loss in state.moves(task).items() if there != loc[holders[position]]]

    def add(self, task: int) -> None:
        entries = self.filed[task] = self._entries(task)
        self.state.spread_budget -= 2 * len(entries)  # filed now, removed at the next change
        for key, loss, client in entries:
            self.slots.setdefault(key, {}).setdefault(loss, {}).setdefault(client, set()).add(task)

    def remove(self, task: int) -> None:
        """Before ``task``'s standbys change: its entries are where ``add`` filed them (worked
        out again for a task filed in bulk: its standbys have not changed since)."""
        entries = self.filed.pop(task, None)
        for key, loss, client in entries if entries is not None else self._entries(task):
            by_client = self.slots[key][loss]
            tasks = by_client[client]
            tasks.discard(task)
            if not tasks:
                del by_client[client]

    def below(self, here: tuple, there: tuple, gain: int) -> list[dict[int, set[int]]] | None:
        """The slots at ``here`` whose loss moving to ``there`` is below ``gain``: client -> tasks,
        one mapping per loss (a handful of distinct values). (None would mean: do not narrow.)"""
        return [by_client for loss, by_client in self.slots.get((here, there), {}).items() if loss < gain and by_client]


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
    loc, ready, holders = state.loc, state.ready, state.holders
    caught_up_here = client in ready[task]
    chosen = {c for c in ready[task] if loc[c] == cls}
    for other in state.ready_on[client]:
        for holder in holders[other]:
            if loc[holder] == cls and not (caught_up_here and holder in ready[other]):
                chosen.add(holder)
    if not caught_up_here:
        chosen |= state.restoring_at[cls]
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
    if slack < 0:
        return state.restoring[other_client] & state.ready_on[client]
    return state.restoring[other_client] | (on_there & state.ready_on[client])


class _Pricing:
    """KIP-925 getCost for a standby: traffic per cross-rack partition + non-overlap."""

    def __init__(self, cross: np.ndarray, client_rack: list[int], costs: tuple[int, int],
                 anchored: list[set[int]], racks: int) -> None:
        self.cross_array = cross
        self.cross = cross.tolist()
        self.client_rack = client_rack
        self.traffic, self.non_overlap = costs
        self.anchored = anchored
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
    pairing only meets candidates that are rejected for distinct clients or exact cost.
    """
    if state.zone_of is None:
        state.zone_of = [(pricing.client_rack[c], state.loc[c]) for c in range(len(state.clients))]
        state.zone_version = dict.fromkeys(state.zone_of, 0)
    zone_of, version = state.zone_of, state.zone_version
    zones = sorted(version)
    at_start = dict(version)
    pairs = [(source, dest) for source in zones for dest in zones if source[0] != dest[0]
             and not (REMEMBER_FAILED and state.quiet.get((source, dest)) == (version[source], version[dest]))]
    if not pairs:
        return False
    changed = False
    slots = _slots_by_zone(state, zone_of)
    readiness_narrows = state.ready is not None and not state.everywhere_but
    deltas = {zone: _ZoneDeltas(pricing, state, zone, tasks, clients) for zone, (tasks, clients) in slots.items()}
    for source, dest in pairs:
        stamp = (version[source], version[dest])
        if REMEMBER_FAILED and state.quiet.get((source, dest)) == stamp:
            continue
        # A pair that swaps nothing, on zones unchanged since this pass took its slots, swaps
        # nothing again until a swap touches one of them (``_Standbys.quiet``).
        if stamp == (at_start[source], at_start[dest]):
            state.quiet[(source, dest)] = stamp
        if source not in slots or dest not in slots:
            continue
        # Prices are fixed, so the cost deltas of a whole zone come at once (numpy); only
        # candidates that lower the cost get the state checks, as one by one before. Each
        # pairing is charged to the search budget (a numpy call, and a check per slot): with
        # client tags of many values nearly every client is a zone of its own, and the pairs of
        # thousands of zones were uncounted work (minutes, past any budget).
        state.budget -= PAIRING_COST + len(deltas[source].tasks)
        if state.budget < 0:
            return changed
        movers = deltas[source].movable(state, dest, 0)
        if not movers:
            continue
        movers.sort()
        state.budget -= PAIRING_COST + len(deltas[dest].tasks)
        if state.budget < 0:
            return changed
        # Partners are met in increasing delta and never past -movers[0][0] (the pairing
        # below stops there): only that prefix of the sorted list is built.
        partners = sorted(deltas[dest].movable(state, source, -movers[0][0]))
        used = [False] * len(partners)
        first = 0
        ready_partners = _ReadyPartners(state, partners, used) if readiness_narrows else None
        for delta_t, task, client in movers:
            while first < len(partners) and used[first]:
                first += 1
            tried = 0
            indices = range(first, len(partners)) if ready_partners is None \
                else ready_partners.allowed(task, client, first)
            for index in indices:
                delta_u, other, other_client = partners[index]
                if delta_t + delta_u >= 0 or tried == LOOKAHEAD:
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
    return changed


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
        self.restoring: list[int] = []
        self.on_client: dict[int, list[int]] = {}
        self.ready_on: dict[int, list[int]] = {}
        ready = state.ready
        for index, (_, other, other_client) in enumerate(partners):
            if other_client not in ready[other]:
                self.restoring.append(index)
            self.on_client.setdefault(other_client, []).append(index)
            for client in ready[other]:
                self.ready_on.setdefault(client, []).append(index)
        self.first_restoring = 0

    def allowed(self, task: int, client: int, first: int) -> Iterator[int]:
        """Partner indices from ``first`` on, ascending, that may pass ``restores_more`` (a superset)."""
        state = self.state
        special = set(self.ready_on.get(client, ()))
        for ready_client in state.ready[task]:
            special.update(self.on_client.get(ready_client, ()))
        special = sorted(index for index in special if index >= first)
        if client in state.ready[task]:
            return iter(special)
        if 2 * len(self.restoring) >= len(self.used):  # most partners restore: the check filters the rest
            return range(first, len(self.used))
        restoring, used = self.restoring, self.used
        while self.first_restoring < len(restoring) and used[restoring[self.first_restoring]]:
            self.first_restoring += 1
        start = max(self.first_restoring, bisect.bisect_left(restoring, first))
        return _unique(heapq.merge(special, (restoring[i] for i in range(start, len(restoring)))))


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
        anchored = np.array([c in pricing.anchored[t] for t, c in zip(tasks.tolist(), clients.tolist(), strict=True)],
                            dtype=np.int64)
        self.base = pricing.non_overlap * anchored - pricing.traffic * self.rows[:, rack]
        self.active_loc = state.active_loc[self.tasks]
        self.single = state.single[self.tasks]
        self.shared_here = (self.active_loc == np.array(location, dtype=np.int64)).sum(axis=1)

    def movable(self, state: _Standbys, dest: tuple, bound: int) -> list[tuple[int, int, int]]:
        """(delta, task, client) of the slots still held whose delta toward the ``dest`` zone is
        below ``bound`` and whose task's spread would not get worse there, in slot order.

        A task with one standby in this zone shares ``shared_here`` location values with its
        active; its spread is not worse at ``dest`` exactly when it shares no more there, so
        those are judged for the whole zone at once; tasks with several standbys one by one.
        """
        dest_rack, dest_location = dest
        delta = self.pricing.traffic * self.rows[:, dest_rack] + self.base
        shared_there = (self.active_loc == np.array(dest_location, dtype=np.int64)).sum(axis=1)
        keep = np.flatnonzero((delta < bound) & (~self.single | (shared_there <= self.shared_here)))
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
