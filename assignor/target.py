"""The balanced target: where every replica should live once everything has caught up.

Both assignors first compute this target, then decide what can run there now. It is two
min-cost flows (actives, then standbys) whose capacities encode balance and whose costs
encode, in this order of priority:

1. balance: every client gets at least the floor of its thread share (scenario.md "Balance";
   KIP-441 "Defining balance", instance balance) of all actives, of stateful actives and of
   stateful replicas, and never more than the ceiling;
2. (high availability only) as few replicas as possible on clients that are not caught up,
   so that the fewest warm-ups are needed (KIP-441 "Iterative Balancing Assignments");
3. stability: previous owners keep their tasks (KIP-441 property 6), a moved active prefers
   a client that already has its state;
4. subtopology balance: a soft cap of ceil(S[j] * t_c / T) tasks of subtopology j on a client
   (KIP-441 "Defining balance", subtopology balance; the cap of KIP-925 4.B.II).

The graph has an arc only where a client reports state for a task (or ran it before), plus
one hub per subtopology through which any task reaches any client: its size grows with the
reported lags and previous owners, not with tasks x clients. Clients without state are
interchangeable for a task, so the flow only decides how many of a subtopology's hub tasks
each client takes; which ones is then dealt out in task order. Likewise, tasks alike in their
ways out (hub price, previous owner, the prices of their special clients) share one node
(``_TaskClasses``), and a (subtopology, client) node exists only where some direct arc must
count against that pair's cap (``_SubtopologyHubs``). A fresh group of 20,000 tasks and 500
clients is then a graph of about a thousand nodes, which OR-Tools solves in milliseconds; the
same group settled and scaling out (every task with a previous owner and a caught-up standby)
has one node per (subtopology, previous owner) rather than per task. With many subtopologies
that is still a node per task: there each flow is first solved with subtopology caps only
where previous owners already crowd them (``_relaxed_active_target``, ``_RelaxedStandbyFlow``),
a lower bound whose decoding, when it keeps the caps as the bound paid, is the optimum.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache, partial
from itertools import chain, compress
from operator import attrgetter, itemgetter, ne, not_, or_

import numpy as np

from assignor.balance import quotas
from assignor.flow import (
    FUNNEL_PAIRS,
    FlowError,
    FlowGraph,
    feasible_flow,
    fill_by_demand,
    maximum_flow,
    split_exactly,
    split_least_excess,
)
from assignor.model import ClientState, TaskId, TaskSpec
from assignor.ranking import TIER_BY_RESIDUE, Ranking, Tier, tier_of

# Cost weights, one order of magnitude (at least) per priority level above.
# A floor reward only has to beat the cost of the few task moves that fill the floor; a tier
# has to beat the sum of every move and subtopology cost (tasks x 11 < 10**7). Small weights
# keep OR-Tools' cost-scaling phases few: 4*10**13 instead of 4*10**8 made solves ~1.5x slower.
BALANCE_FLOOR = 4 * 10**8  # reward per unit that fills a client up to its floor
STATEFUL_FLOOR = 10**8
OVER_CEILING = 4 * 10**8  # only when constraints leave no other way
TIER_COST = {Tier.CAUGHT_UP: 0, Tier.LAGGING: 10_000_000, Tier.UNKNOWN: 12_000_000, Tier.NO_STATE: 15_000_000}
MOVE = 10
# Every weight above the ties (floors, ceilings, tiers) is a multiple of 10**6, the ties (MOVE
# and below, a few per arc) far below: ``FlowGraph`` solves first with that unit priced 10**3.
PRIORITIES = ((10**6, 10**3),)
# TIER_COST of a non-zero rank by its residue mod 4 (``ranking.TIER_BY_RESIDUE``; no rank has residue 3)
_COST_BY_RESIDUE = (*map(TIER_COST.__getitem__, TIER_BY_RESIDUE), None)
SUBTOPOLOGY_EXCESS = 1
# Without lag awareness (the sticky assignor), what a client without a task's state costs more
# than one with some, whatever its lag: a moved or orphaned active goes to a previous standby
# (Kafka's StickyTaskAssignor, shouldAssignTasksToClientWithPreviousStandbyTasks). Below half
# a MOVE: never worth moving another task.
STICKY_STATE_PREFERENCE = 4
# Per unit of a client's stateless actives (active flow) or standbys (standby flow) outside its
# own thread share, inside the balance windows: a tie-break, never worth a move (MOVE). A group
# kept at these shares gives a newcomer its quotas by drops alone: each client above a new
# ceiling hands one replica over, and nothing shuffles among the others (docs/assignor.md).
SHARE_PREFERENCE = 1
# Per task whose active cannot leave its owner without a standby chain (``chain_prone``): on
# every way out but the owner. A tie-break among the actives a client must give up.
STANDBY_CHAIN = 1
# Moves counted on a sparing client beyond what it spares (``_overdrawn``) up to which the
# active flow is solved once more with them chain-prone: a join of one instance overdraws one
# or two; a scale-out of 10% of 1,000 clients some 260, which a second solve cannot avoid
# (measured: 272, then 259, then 258) and which would double the flow's time.
OVERDRAWN_RESOLVE = 16
# Moves off caught-up owners beyond which no second solve is tried: a chain costs a probing
# round when the restores are few (one instance joining moves its share, 16 of 1,000 tasks on
# 50 clients); among hundreds, one restore more is lost in the warm-up budget's rounds (a
# replace of 10% of 1,000 clients moves some 2,000 and overdraws one).
OVERDRAWN_MOVES = 256
BIG_CAPACITY = 1 << 40
EXACT_STANDBY_ARCS = 50_000  # tasks x clients up to which standby targets use every arc
# Share of the graph up to which the subtopology layer of the clients that will receive units
# (``_SubtopologyHubs``, ``receiving``) is added rather than funnelled: a cheap insurance
# against a failed split, which solves the whole graph again.
RECEIVING_ARCS_SHARE = 0.3
# (subtopology keys short of standby holders x clients short of their standby floor) up to which
# ``_hub_standbys_fit`` runs its max flow (a few ms at this size): the failures it spares came
# with few such keys or clients (at most 16,000 cells, in 270 groups); beyond, the relaxed flow
# decides as before (26,000 cells, 1% leaving at 500 subtopologies: 10 ms for nothing).
HUB_FIT_CELLS = 20_000
# (subtopology, client) cells the standby hub's trades may look at in one dealing
# (``_trade_hub_units``); beyond that, the hub solves again with trees.
TRADE_BUDGET = 200_000
# Tasks per (subtopology key, previous owner) from which a capped flow puts tasks of the same
# further special clients in one uniform class (``_TaskClasses``, ``_tasks_alike``).
UNIFORM_CLASS_MIN = 3
# Units (plus cut clients) up to which a funnel's key is split by ``_DemandQueue``'s heap rather
# than by ``fill_by_demand`` over every client, or up to a sixteenth of the funnelled clients.
QUEUE_UNITS = 16


_ID, _STATEFUL, _SUBTOPOLOGY = attrgetter("id"), attrgetter("stateful"), attrgetter("subtopology")


@dataclass(frozen=True, slots=True)
class Group:
    """Indexes over one problem, computed once and shared by every step."""

    specs: Mapping[TaskId, TaskSpec]
    stateful: tuple[TaskId, ...]
    stateless: tuple[TaskId, ...]
    clients: tuple[str, ...]
    threads: Mapping[str, int]
    states: Mapping[str, ClientState]
    prev_active_owner: Mapping[TaskId, str]
    prev_standby_holders: Mapping[TaskId, frozenset[str]]
    key_counts: Mapping[tuple[int, bool], int]  # tasks per subtopology key (``_group_key``), in key order

    @classmethod
    def of(cls, tasks: Sequence[TaskSpec], clients: Sequence[ClientState]) -> Group:
        specs = {spec.id: spec for spec in sorted(tasks, key=_ID)}
        ordered = sorted(clients, key=lambda c: c.id)
        owner: dict[TaskId, str] = {}
        holders: dict[TaskId, set[str]] = defaultdict(set)
        for client in ordered:
            for task in sorted(client.prev_active):
                if task in specs:
                    # Two clients claiming one active (possible after a partition of the
                    # group): the first by client order keeps the claim, deterministically.
                    owner.setdefault(task, client.id)
            for task in client.prev_standby:
                if task in specs:
                    holders[task].add(client.id)
        for task, client_id in owner.items():
            holders[task].discard(client_id)
        stateful = list(map(_STATEFUL, specs.values()))  # columns by C-level maps: a group's every task
        return cls(
            specs=specs,
            stateful=tuple(compress(specs, stateful)),
            stateless=tuple(compress(specs, map(not_, stateful))),
            clients=tuple(c.id for c in ordered),
            threads={c.id: c.threads for c in ordered},
            states={c.id: c for c in ordered},
            prev_active_owner=owner,
            prev_standby_holders={t: frozenset(h) for t, h in holders.items()},
            key_counts=dict(sorted(Counter(zip(map(_SUBTOPOLOGY, specs), stateful, strict=True)).items())),
        )

    def stateful_counts(self) -> dict[int, int]:
        """Stateful tasks per subtopology, in subtopology order."""
        return {subtopology: count for (subtopology, stateful), count in self.key_counts.items() if stateful}

    def orphans(self) -> int:
        """Tasks without a live previous owner: their owner left, or nobody ran them."""
        return len(self.specs) - len(self.prev_active_owner)

    def standby_count(self, num_standby_replicas: int) -> int:
        """Standbys per stateful task: as configured, but never more than other clients exist."""
        return max(0, min(num_standby_replicas, len(self.clients) - 1))


@dataclass(frozen=True, slots=True)
class CostModel:
    """How a placement is priced. ``lag_aware`` is the high-availability assignor's view."""

    lag_aware: bool

    def no_state_arc(self, ranking: Ranking, task: TaskId) -> int:
        return no_state_price(self.lag_aware, ranking.absent[task])

    def special_arcs(self, ranks: Mapping[str, int], absent: int, best: int, clients: Iterable[str],
                     sticky: Container[str], surcharge: int = 0) -> dict[str, int]:
        """The price of one task on each of ``clients`` that report state or held it: its tier
        (lag-aware only; none at a best rank that beats no state, ``tier_price``) plus MOVE
        and ``surcharge`` unless the client is in ``sticky``; in one pass (hot loop). Without
        lag awareness any state is as good as any other, and better than none by the hub's
        ``STICKY_STATE_PREFERENCE`` (``no_state_arc``). The task is given by its ranks
        (``Ranking``'s holders, absent and best of it), which the callers' loops hold already."""
        move = MOVE + surcharge
        if not self.lag_aware:
            return {client: 0 if client in sticky else move for client in clients}
        free = best if best < absent else 0  # the rank priced as caught up
        prices = {}
        for client in clients:
            rank = ranks.get(client, absent)
            prices[client] = (_COST_BY_RESIDUE[rank & 3] if rank != free else 0) + (0 if client in sticky else move)
        return prices


@lru_cache(maxsize=1024)
def no_state_price(lag_aware: bool, absent: int) -> int:
    """A task's price on a client without its state (``CostModel.no_state_arc``): it depends on
    the rank of no state alone, which few tasks' changelog sizes share, so the hot loops of
    both flows look it up rather than compute it per task."""
    if lag_aware:
        return TIER_COST[tier_of(absent)] + MOVE
    return MOVE + (STICKY_STATE_PREFERENCE if absent else 0)


def tier_price(rank: int, best: int, absent: int) -> int:
    """What placing a task's active on a client of ``rank`` costs in restoration: nothing when
    caught up or at a best rank that beats no state, else its tier. KIP-441 "Assignment
    Algorithm" property 1 puts actives on the most caught-up clients, caught up or not: with
    none caught up, a client at the best rank takes the task at once, and a target that
    preferred another lagging client only bought a warm-up and a probing rebalance that the
    next round undid. Where nobody beats no state, every price of the task would shift alike:
    they stay as they were (ties among targets fall as before). ``CostModel``'s arcs price the
    same way, inline."""
    return 0 if rank == 0 or (rank == best < absent) else TIER_COST[tier_of(rank)]


def restoration_cost(ranking: Ranking, actives: Mapping[TaskId, str], tasks: Sequence[TaskId]) -> int:
    """The restoration potential of ``tasks`` in a target: the tier cost of each stateful active
    placed away from its best rank (``tier_price``; docs/assignor.md, "Convergence"). Two
    targets compare on the tasks where they differ."""
    return sum(tier_price(ranking.rank(task, actives[task]), ranking.best[task], ranking.absent[task]) for task in tasks)


class _SubtopologyHubs:
    """Per subtopology key, a hub from which flow reaches any client, counting the key's
    replicas there: free up to the soft cap ceil(S[j] * t_c / T), SUBTOPOLOGY_EXCESS per
    replica above it (KIP-441 "Defining balance", subtopology balance).

    A (key, client) node exists only where a direct arc must count against the same cap
    (``node``: an *inner* client of the key); the key's other, *outer* clients are reached by
    two priced arcs, free up to the cap and excess beyond. ``close`` adds the layer, in bulk,
    once every direct arc is known.

    That layer has subtopologies x clients arcs (400,000 for 200 subtopologies on 1,000
    clients: most of the solver's time). *Funnelled* (by default when it would be large), the
    hubs of keys sharing a downstream reach their outer clients through one funnel node instead
    (hub -> funnel at most the key's free caps in all, funnel -> client at most the client's
    free caps in all) and one overflow node for the excess. Every flow of the full layer is a
    flow of the funnelled one at the same cost, so the funnelled optimum is at most the full
    one. ``realize`` then splits each funnel's flow into units per (key, client), within the
    caps, largest remaining demand first: when the split needs no more excess than the funnel
    paid, it is a flow of the full layer at the funnelled optimum, hence optimal there too.
    When it does not, ``realize`` names the clients that funnel fed, and the caller solves
    again with those clients reached by the hubs' own arcs (``own_arcs``, ``next_round``); a
    third round, if needed, is the full layer. In a scale-out, the second round takes the new
    clients out. (The clients fed by a funnel whose split held stay in it: with 10 of 1,000
    members gone at 200 subtopologies, the stateful funnel's split failed on 39 clients and
    the stateless one held on 158 more; the second round took 0.33 s with all 197 out.)
    """

    def __init__(self, graph: FlowGraph, counts: Mapping, clients: Sequence[str], threads: Mapping[str, int],
                 downstream, own_arcs: frozenset[str] | None = None, layer_when_small: bool = False,
                 receiving: Collection[str] = ()) -> None:
        self._graph = graph
        self._clients = clients
        self._position = {client: index for index, client in enumerate(clients)}
        self._downstream = downstream
        caps = _subtopology_caps(counts, threads, clients)  # keys alike share one array (``close`` sums them at once)
        self._caps = {key: caps[key] for key in sorted(counts)}
        self.hub = {key: graph.node() for key in sorted(counts)}
        self._node: dict = {key: {} for key in self.hub}
        self._detached: dict = defaultdict(set)  # per key, the clients whose node the hub does not feed
        self._reached: set[str] = set()  # the clients some direct arc reaches (``node``)
        self._entries: dict = {}
        self._by_size = own_arcs is None
        self._first_round = own_arcs is None or not own_arcs  # by size, or every client funnelled
        self._layer_when_small = layer_when_small
        self._receiving = receiving
        if own_arcs is None:  # by size: a small layer is cheap, a large one funnelled
            own_arcs = frozenset() if len(self.hub) * len(clients) >= FUNNEL_PAIRS else frozenset(clients)
        self.own_arcs = own_arcs
        self._funnelled = np.array([client not in own_arcs for client in clients], dtype=bool)
        self._funnels: list[tuple] = []
        self._funnelled_units: dict = {}

    @property
    def caps(self) -> Mapping:
        """Per key, its soft cap on each client, in client order."""
        return self._caps

    def node(self, key, client: str) -> int:
        self._reached.add(client)
        nodes = self._node[key]
        if client not in nodes:
            nodes[client] = self._graph.node()
        return nodes[client]

    def nodes(self, key) -> list[int]:
        return [self.node(key, client) for client in self._clients]

    def detached_node(self, key, client: str) -> int:
        """The (key, client) node, counting the key's replicas there against the cap, which the
        hub does not reach: only the caller's arcs feed it (``_StandbyFlow.plant_trees``)."""
        self._detached[key].add(client)
        nodes = self._node[key]
        if client not in nodes:
            nodes[client] = self._graph.node()
        return nodes[client]

    def close(self) -> None:
        graph = self._graph
        everyone = np.arange(len(self._clients))
        if self._by_size and not self.own_arcs:
            # A few clients with no direct arc at all (new members of a settled group) are where
            # the hubs' units go: funnelled, their demand concentrates on few clients and the
            # split fails, so they keep arcs of their own from the first round. Not when they are
            # most of the group (a fresh one), whose funnel splits evenly.
            idle = [client for client in self._clients if client not in self._reached]
            if self._layer_when_small and 2 * len(self.hub) * len(self._clients) <= 1.5 * graph.arc_count:
                # The layer would add at most 1.5 times the arcs that direct arcs already make (a
                # settled group losing members, where the funnels' split often fails and costs a
                # second solve): no funnel. Actives only: the standby targets a full layer deals,
                # as good, measured slower in the rack-aware standby steps (scale-out, 50
                # subtopologies, 2 standbys: +0.27 s).
                self.own_arcs = frozenset(self._clients)
                self._funnelled[:] = False
            elif 2 * len(idle) < len(self._clients):
                # So do the clients that the caller says will receive units (``receiving``), when
                # their arcs add little to the graph: with 1-3% of a group's members gone, the
                # funnels' split failed at 50-200 subtopologies, and the second round, with the
                # clients it fed out of the funnels (nearly the same ones), doubled the time.
                receiving = [client for client in self._receiving if client in self._reached]
                inner = sum(len(nodes) for nodes in self._node.values())  # 3 arcs each, below
                if 2 * len(self.hub) * len(receiving) > RECEIVING_ARCS_SHARE * (graph.arc_count + 3 * inner):
                    receiving = []
                self.own_arcs = frozenset(idle).union(receiving)
                self._funnelled[[self._position[client] for client in self.own_arcs]] = False
        funnels: dict[int, list] = defaultdict(list)  # keys by downstream (head arrays are equal or disjoint)
        is_inner = np.zeros(len(self._clients), dtype=bool)
        # A key without inner clients (most, in a fresh group) splits its clients as every such key
        # does: one pair of arrays for all of them. Their arcs, in the order of a call per key and
        # kind, go to the graph in one call: with 20,000 subtopologies of one partition, those
        # calls (most of them empty) cost more than the solves. A key with inner clients keeps
        # them as its *cut* from the funnelled clients, not the funnelled clients it has left:
        # a pass over every client per key cost O(subtopologies x clients) (``_funnelled_of``).
        unfunnelled_all, funnelled_all = everyone[~self._funnelled], everyone[self._funnelled]
        self._funnelled_all = funnelled_all
        is_funnelled = self._funnelled.tolist()
        as_lists: dict[int, list[int]] = {}  # the head and cap arrays as lists, for keys of few inner clients
        none = np.zeros(0, dtype=np.int64)
        no_cut: list[int] = []
        layer = _ArcBatch(graph)
        for key, hub in self.hub.items():
            heads, caps, nodes = self._downstream(key), self._caps[key], self._node[key]
            if nodes:
                everywhere = [self._position[c] for c in nodes]
                node_ids = list(nodes.values())
                head_of = as_lists.get(id(heads))
                if head_of is None:
                    head_of = as_lists[id(heads)] = heads.tolist()
                cap_of = as_lists.get(id(caps))
                if cap_of is None:
                    cap_of = as_lists[id(caps)] = caps.tolist()
                inner_heads = [head_of[position] for position in everywhere]
                layer.add(node_ids, inner_heads, [cap_of[position] for position in everywhere], 0)
                layer.add(node_ids, inner_heads, BIG_CAPACITY, SUBTOPOLOGY_EXCESS)
                if len(unfunnelled_all):
                    is_inner[everywhere] = True
                    outer = unfunnelled_all[~is_inner[unfunnelled_all]]
                    is_inner[everywhere] = False
                else:
                    outer = none
                cut = sorted(position for position in everywhere if is_funnelled[position])
                detached = self._detached.get(key)
                if detached:
                    fed = [client not in detached for client in nodes]
                    everywhere = [position for position, feeds in zip(everywhere, fed, strict=True) if feeds]
                    node_ids = [node for node, feeds in zip(node_ids, fed, strict=True) if feeds]
                inner = np.array(everywhere, dtype=np.int64)
                via_node = layer.add(hub, node_ids, BIG_CAPACITY, 0)
            else:
                inner, via_node, outer, cut = none, layer.add(hub, none, 0, 0), unfunnelled_all, no_cut
            if len(outer):
                free = layer.add(hub, heads[outer], caps[outer], 0)
                excess = layer.add(hub, heads[outer], BIG_CAPACITY, SUBTOPOLOGY_EXCESS)
            else:
                free = excess = layer.add(hub, none, 0, 0)
            self._entries[key] = (inner, via_node, outer, free, excess, cut)
            if len(funnelled_all) > len(cut):
                funnels[int(heads[0])].append(key)
        layer.close()
        for keys in funnels.values():
            heads = self._downstream(keys[0])
            funnel, overflow = graph.node(), graph.node()
            client_caps = np.zeros(len(self._clients), dtype=np.int64)
            key_caps = []
            alike: dict[int, list] = {}  # keys sharing their caps array: [caps, keys, funnelled caps in all]
            cut_positions: list[np.ndarray] = []
            cut_caps: list[np.ndarray] = []
            for key in keys:
                cut, caps = self._entries[key][5], self._caps[key]
                share = alike.get(id(caps))
                if share is None:
                    share = alike[id(caps)] = [caps, 0, int(caps[funnelled_all].sum())]
                share[1] += 1
                if len(cut):
                    cut_positions.append(cut)
                    cut_caps.append(caps[cut])
                    key_caps.append(share[2] - int(cut_caps[-1].sum()))
                else:
                    key_caps.append(share[2])
            for caps, times, _ in alike.values():
                client_caps[funnelled_all] += times * caps[funnelled_all]
            if cut_positions:
                np.subtract.at(client_caps, np.concatenate(cut_positions), np.concatenate(cut_caps))
            hubs = np.array([self.hub[key] for key in keys], dtype=np.int64)
            reached = np.flatnonzero(client_caps)
            self._funnels.append((
                keys, reached,
                graph.arcs(hubs, funnel, key_caps, 0),
                graph.arcs(hubs, overflow, BIG_CAPACITY, SUBTOPOLOGY_EXCESS),
                graph.arcs(funnel, heads[reached], client_caps[reached], 0),
                graph.arcs(overflow, heads[reached], BIG_CAPACITY, 0),
            ))

    def _funnelled_of(self, key) -> np.ndarray:
        """The funnelled clients of ``key`` (positions, in client order): every funnelled client
        but its cut."""
        cut = self._entries[key][5]
        if not len(cut):
            return self._funnelled_all
        everyone = self._funnelled_all
        return everyone[~np.isin(everyone, cut, assume_unique=True)]

    def realize(self, graph: FlowGraph) -> frozenset[str]:
        """Split each funnel's solved flow into units per (key, funnelled client). Returns the
        clients fed by the funnels for which no split needs as little excess as they paid (the
        funnelled optimum may then be lower than the full layer's), else nothing.

        The split is first dealt greedily (``fill_by_demand``, key by key); when that leaves
        units only excess can place, the split with the least excess is found exactly
        (``split_exactly`` when the funnels paid no excess, else ``split_least_excess``): a
        greedy deal can miss a split that exists, and each miss costs a second, larger solve."""
        fed: set[str] = set()
        for funnel in self._funnels:
            keys, reached, to_funnel, to_overflow, from_funnel, from_overflow = funnel
            paid = int(graph.flows(to_overflow).sum())
            supplied = (graph.flows(to_funnel) + graph.flows(to_overflow)).tolist()
            demand = np.zeros(len(self._clients), dtype=np.int64)
            demand[reached] = graph.flows(from_funnel) + graph.flows(from_overflow)
            units = self._deal_greedily(keys, supplied, demand.copy(), paid)
            if units is None:
                units = self._split_exactly(keys, supplied, demand, paid)
            if units is None:  # only this funnel's clients leave it: another's split held
                fed.update(self._clients[index] for index in np.flatnonzero(demand).tolist())
            else:
                self._funnelled_units.update(units)  # kept sparse: one unit each, at 20,000 subtopologies
        return frozenset(fed)

    def _deal_greedily(self, keys: list, supplied: list[int], demand: np.ndarray,
                       paid: int) -> dict[object, tuple[list[int], list[int]]] | None:
        """Per key, the clients (positions) that ``fill_by_demand`` gives units and how many, key
        after key within the caps, then any excess the funnels paid; None when it needs more."""
        units = {}
        queue = _DemandQueue(demand)
        small = max(QUEUE_UNITS, len(self._funnelled_all) // 16)
        for key, amount in zip(keys, supplied, strict=True):
            if not amount:
                continue
            cut, caps = self._entries[key][5], self._caps[key]
            if amount + len(cut) <= small:
                given, over = queue.fill(caps, set(cut), amount)
                if over:
                    paid -= over
                    if paid < 0 or not queue.spill(set(cut), over, given):
                        return None
                positions = sorted(given)
                units[key] = (positions, [given[position] for position in positions])
                continue
            funnelled = self._funnelled_of(key)
            wants = queue.read(funnelled)
            given_array = fill_by_demand(wants, caps[funnelled], amount)
            over = amount - int(given_array.sum())
            if over:  # every funnelled client with demand left is at its cap: excess
                paid -= over
                left = wants - given_array
                extra = fill_by_demand(left, left, over)
                if paid < 0 or int(extra.sum()) < over:
                    return None
                given_array += extra
            receiving = np.flatnonzero(given_array)
            queue.write(funnelled[receiving], wants[receiving] - given_array[receiving])
            units[key] = (funnelled[receiving].tolist(), given_array[receiving].tolist())
        return units

    def _split_exactly(self, keys: list, supplied: list[int], demand: np.ndarray,
                       paid: int) -> dict[object, tuple[list[int], list[int]]] | None:
        sending = [(key, amount) for key, amount in zip(keys, supplied, strict=True) if amount]
        if not sending:
            return {}
        # only clients with demand can take units: the others' cells are left out of the graph
        wanting = np.flatnonzero(demand)
        cells = []
        for key, _ in sending:
            cut = self._entries[key][5]
            cells.append(wanting[~np.isin(wanting, cut, assume_unique=True)] if len(cut) else wanting)
        rows = np.repeat(np.arange(len(sending)), [len(funnelled) for funnelled in cells])
        columns = np.concatenate(cells)
        caps = np.concatenate([self._caps[key][funnelled] for (key, _), funnelled in zip(sending, cells, strict=True)])
        supply = np.array([amount for _, amount in sending], dtype=np.int64)
        if paid:
            split = split_least_excess(supply, demand, rows, columns, caps)
            if split is None or split[1] > paid:
                return None
            flows = split[0]
        else:  # no unit may exceed its cap: a feasible plan, by a max flow (0.02 s where the least
            # excess took 0.19 s: 10% of 1,000 members leaving, 500 subtopologies)
            flows = split_exactly(supply, demand, rows, columns, caps)
            if flows is None:
                return None
        units, start = {}, 0
        for (key, _), funnelled in zip(sending, cells, strict=True):
            given = np.asarray(flows[start:start + len(funnelled)], dtype=np.int64)
            receiving = np.flatnonzero(given)
            units[key] = (funnelled[receiving].tolist(), given[receiving].tolist())
            start += len(funnelled)
        return units

    def next_round(self, fed: frozenset[str]) -> frozenset[str]:
        """The clients out of the funnels next round: after the first round (by size, or every
        client in them), those out of them already and those the failed funnels fed; after
        that, everyone."""
        return self.own_arcs | fed if self._first_round else frozenset(self._clients)

    def receivers(self, graph: FlowGraph, key) -> dict[str, int]:
        """How many of the key's hub replicas each client received, for the clients that received
        any, in client order: a key's hub replicas go to few of a large group's clients, so this
        looks at the key's own arcs and funnelled units, never at every client."""
        inner, via_node, outer, free, excess, _ = self._entries[key]
        funnelled = self._funnelled_units.get(key)
        clients = self._clients
        if not len(inner) and not len(outer):  # every client funnelled: units on those that take some
            return {} if funnelled is None else dict(zip([clients[index] for index in funnelled[0]], funnelled[1],
                                                         strict=True))
        parts = [(inner, graph.flows(via_node)), (outer, graph.flows(free) + graph.flows(excess))]
        if funnelled is not None:
            parts.append((np.array(funnelled[0], dtype=np.int64), np.array(funnelled[1], dtype=np.int64)))
        # the parts' clients are disjoint; inner clients in the order of their nodes
        positions = np.concatenate([positions for positions, _ in parts])
        units = np.concatenate([units for _, units in parts])
        order = np.argsort(positions)
        positions, units = positions[order], units[order]
        receiving = np.flatnonzero(units)
        return dict(zip([clients[index] for index in positions[receiving].tolist()], units[receiving].tolist(),
                        strict=True))


class _DemandQueue:
    """``fill_by_demand`` key after key over one demand (``_SubtopologyHubs._deal_greedily``),
    for a key of few units in O(units log clients) rather than O(clients): a heap of the
    clients by remaining demand, the first in client order among equals, which is the order in
    which ``fill_by_demand`` gives units one at a time. Keys of many units read and write the
    demand as arrays (``read``, ``write``) and ``fill_by_demand`` splits them."""

    def __init__(self, demand: np.ndarray) -> None:
        self._demand = demand
        self._left: list[int] = []  # the demand as a list, with the heap: built by the first ``fill``
        self._heap: list[tuple[int, int]] | None = None
        self._changed: list[int] = []  # positions of ``_left`` not yet written to ``_demand``
        self._caps: dict[int, tuple[np.ndarray, list[int]]] = {}

    def _built(self) -> list[tuple[int, int]]:
        if self._heap is None:
            self._left = self._demand.tolist()
            self._heap = [(-left, position) for position, left in enumerate(self._left) if left]
            heapq.heapify(self._heap)
        return self._heap

    def fill(self, caps: np.ndarray, cut: Container[int], amount: int) -> tuple[dict[int, int], int]:
        """``fill_by_demand`` of ``amount`` within ``caps`` (in client order) over every client
        but ``cut``: the units per position, and how many found no room."""
        known = self._caps.get(id(caps))
        if known is None or known[0] is not caps:
            known = self._caps[id(caps)] = (caps, caps.tolist())
        given: dict[int, int] = {}
        return given, self._take(given, known[1], cut, amount)

    def spill(self, cut: Container[int], amount: int, given: dict[int, int]) -> bool:
        """``amount`` more into ``given`` above the caps, as ``fill_by_demand`` of the demand
        left; False when the demand left is less."""
        return not self._take(given, None, cut, amount)

    def _take(self, given: dict[int, int], caps: list[int] | None, cut: Container[int], amount: int) -> int:
        heap = self._built()
        left = self._left
        aside = []
        while amount and heap:
            negative, position = heap[0]
            if left[position] != -negative:  # an older entry of a client whose demand fell since
                heapq.heappop(heap)
                continue
            taken = given.get(position, 0)
            if position in cut or (caps is not None and taken >= caps[position]):
                aside.append(heapq.heappop(heap))
                continue
            given[position] = taken + 1
            left[position] = rest = -negative - 1
            self._changed.append(position)
            if rest:
                heapq.heapreplace(heap, (-rest, position))
            else:
                heapq.heappop(heap)
            amount -= 1
        for entry in aside:
            heapq.heappush(heap, entry)
        return amount

    def read(self, positions: np.ndarray) -> np.ndarray:
        if self._changed:
            changed = np.array(self._changed, dtype=np.int64)
            self._demand[changed] = [self._left[position] for position in self._changed]
            self._changed.clear()
        return self._demand[positions]

    def write(self, positions: np.ndarray, left: np.ndarray) -> None:
        """The demand left at ``positions``, lower than before."""
        self._demand[positions] = left
        if self._heap is None:  # no key of few units yet: the heap is built from ``_demand`` when one comes
            return
        for position, rest in zip(positions.tolist(), left.tolist(), strict=True):
            self._left[position] = rest
            if rest:
                heapq.heappush(self._heap, (-rest, position))


class _ArcBatch:
    """Arcs added as by one ``FlowGraph.arcs`` call each, numbered as those calls would number
    them, but handed to the graph in one call (``close``): many small calls cost more than
    their arcs. Nothing else may add arcs to the graph until then."""

    def __init__(self, graph: FlowGraph) -> None:
        self._graph = graph
        self._next = graph.arc_count
        self._columns: list[tuple] = []
        self._rows: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])

    def add(self, tail, heads: np.ndarray | list[int], capacities, cost: int) -> range:
        """``tail``: one node, or one per arc; ``capacities``: one, or one per arc. Heads given as
        a list (few arcs: tails and capacities then lists or numbers too) are kept as rows, an
        array's worth of numpy calls less per call."""
        count = len(heads)
        if count:
            if isinstance(heads, list):
                tails, head_rows, capacity_rows, costs = self._rows
                tails.extend(tail if isinstance(tail, list) else [tail] * count)
                head_rows.extend(heads)
                capacity_rows.extend(capacities if isinstance(capacities, list) else [capacities] * count)
                costs.extend([cost] * count)
            else:
                self._flush_rows()
                self._columns.append((_column(tail, count), heads, _column(capacities, count), _column(cost, count)))
        self._next += count
        return range(self._next - count, self._next)

    def _flush_rows(self) -> None:
        if self._rows[0]:
            self._columns.append(tuple(np.array(rows, dtype=np.int64) for rows in self._rows))
            self._rows = ([], [], [], [])

    def close(self) -> None:
        self._flush_rows()
        if self._columns:
            self._graph.arcs(*(np.concatenate(column) for column in zip(*self._columns, strict=True)))


def _column(values, count: int) -> np.ndarray:
    return values if isinstance(values, np.ndarray) else np.full(count, values, dtype=np.int64)


def share_segments(window: tuple[int, int], share: tuple[int, int]) -> list[tuple[int, int]]:
    """(capacity, price) of the convex segments that fill ``window`` while preferring ``share``:
    below the share -SHARE_PREFERENCE a unit, inside it 0, above it +SHARE_PREFERENCE."""
    low, high = window
    start = min(max(share[0], low), high)
    stop = min(max(share[1], start), high)
    return [(start - low, -SHARE_PREFERENCE), (stop - start, 0), (high - stop, SHARE_PREFERENCE)]


def _prefer_share(graph: FlowGraph, tail: int, head: int, window: tuple[int, int], share: tuple[int, int]) -> list[int]:
    """Arcs from ``tail`` to ``head`` for the units in ``window``, preferring ``share`` among them."""
    return [graph.arc(tail, head, capacity, price) for capacity, price in share_segments(window, share) if capacity]


def _group_key(spec: TaskSpec) -> tuple[int, bool]:
    return (spec.id.subtopology, spec.stateful)


def chain_prone(group: Group, ranking: Ranking, per_task: int) -> tuple[set[TaskId], set[TaskId], dict[str, int]]:
    """Stateful tasks whose caught-up owner cannot keep, or cannot give up, the active without a
    standby chain: (moving starts one, staying starts one, the replicas each sparing client
    can spare).

    The flows run actives first. When an owner must give up an active but no replica, it keeps
    that task as a standby, and one of the task's standby holders must give its standby up; if
    none holds a replica to spare either, the chain goes on, to a standby on a client without
    state: one warm-up, and one probing rebalance, more than the move needs (docs/assignor.md,
    "Scaling out at the floor"). Sparing are the clients holding more caught-up replicas than
    their new ceiling, which must shed some; when the change leaves nobody there (a newcomer
    that does not lower the ceiling: 220 replicas on 30 clients, then 31, ceiling 8 both
    times), the clients above their new floor, from some of which the newcomer's replicas
    must come.

    Staying starts a chain when a task has more caught-up holders besides its owner than
    standbys (a warm-up finished there) and fewer of them can spare a replica than must drop
    one: with the owner keeping the active, a holder at its floor, or the newcomer whose
    warm-up it was, loses a caught-up replica that another restore replaces; moved to such a
    holder, the active lets the owner be the one that drops.
    """
    if per_task == 0 or not group.prev_active_owner:  # no owner: nothing to keep or give up
        return set(), set(), {}
    windows = quotas(len(group.stateful) * (1 + per_task), group.threads, limit=len(group.stateful))
    held: dict[str, int] = defaultdict(int)
    owners, standbys, ranks, absent = group.prev_active_owner, group.prev_standby_holders, ranking.holders, ranking.absent
    none: frozenset[str] = frozenset()
    owned = []  # the tasks whose owner is caught up, with what the second pass reads of them
    for task in group.stateful:  # caught up: rank 0 (ranking.caught_up, inlined: a hot loop)
        task_ranks, rank_absent = ranks[task], absent[task]
        owner = owners.get(task)
        holders = standbys.get(task, none)
        if owner is not None and task_ranks.get(owner, rank_absent) == 0:
            held[owner] += 1
            owned.append((task, owner, holders, task_ranks, rank_absent))
        for client in holders:
            if task_ranks.get(client, rank_absent) == 0:
                held[client] += 1
    spare = ({c: held[c] - windows[c].ceiling for c in group.clients if held[c] > windows[c].ceiling}
             or {c: held[c] - windows[c].floor for c in group.clients if held[c] > windows[c].floor})
    sparing = spare.keys()
    if not spare:  # every client at or below its new floor: no move is free of a chain
        return set(map(itemgetter(0), owned)), set(), spare
    prone, staying = set(), set()
    for task, owner, holders, task_ranks, rank_absent in owned:
        if len(holders) > per_task:
            others = [c for c in holders if task_ranks.get(c, rank_absent) == 0]
            if len(others) - per_task > sum(c in sparing for c in others):
                staying.add(task)
        if owner in sparing:
            continue
        for client in holders:  # a caught-up holder that can spare a replica takes the chain's end
            if client in sparing and task_ranks.get(client, rank_absent) == 0:
                break
        else:
            prone.add(task)
    return prone, staying, spare


def active_target(group: Group, ranking: Ranking, costs: CostModel, per_task: int = 0,
                  own_arcs: frozenset[str] | None = None, relaxed: bool | None = None) -> dict[TaskId, str]:
    """One active per task, balanced in total and in stateful actives, sticky, lag-aware.

    ``per_task``, the standbys per stateful task to come, lets a lag-aware target prefer
    moving actives that start no standby chain (``chain_prone``, ``STANDBY_CHAIN``).
    ``own_arcs``: the clients the subtopology hubs reach by arcs of their own, not through a
    funnel (``_SubtopologyHubs``); by size when None. ``relaxed``: first try the flow without
    subtopology caps (``_relaxed_active_target``); by size when None.
    """
    if not group.clients or not group.specs:
        return {}
    if not costs.lag_aware:
        return _solved_active_target(group, ranking, costs, (set(), set()), own_arcs, relaxed)
    prone, staying, spare = chain_prone(group, ranking, per_task)
    target = _solved_active_target(group, ranking, costs, (prone, staying), own_arcs, relaxed)
    overdrawn = _overdrawn(group, ranking, spare, target) - prone
    if 0 < len(overdrawn) <= OVERDRAWN_RESOLVE:
        target = _solved_active_target(group, ranking, costs, (prone | overdrawn, staying), own_arcs, relaxed)
    return target


def _overdrawn(group: Group, ranking: Ranking, spare: Mapping[str, int], target: Mapping[TaskId, str]) -> set[TaskId]:
    """The target's moves that ``chain_prone`` counted as free of a chain although their
    sparing client spares fewer replicas than are counted on it: it prices each task on its own,
    so one client's one spare replica paid for several moves (an owner giving up one active
    and the standby it held of another), and the second started a chain. Per client, the
    moves beyond its spare count, those to a client not caught up first, then by task; none
    when more than ``OVERDRAWN_MOVES`` tasks move."""
    if not spare:
        return set()
    owners, standbys, ranks, absent = group.prev_active_owner, group.prev_standby_holders, ranking.holders, ranking.absent
    none: frozenset[str] = frozenset()
    paid: dict[str, list[tuple[bool, TaskId]]] = defaultdict(list)
    moves = 0
    for task in group.stateful:
        owner = owners.get(task)
        if owner is None or target[task] == owner:
            continue
        task_ranks, rank_absent = ranks[task], absent[task]
        if task_ranks.get(owner, rank_absent) != 0:
            continue
        moves += 1
        if moves > OVERDRAWN_MOVES:
            return set()
        payer = owner if owner in spare else next(
            (c for c in sorted(standbys.get(task, none)) if c in spare and task_ranks.get(c, rank_absent) == 0), None)
        if payer is not None:
            paid[payer].append((task_ranks.get(target[task], rank_absent) != 0, task))
    return {task for client, moved in paid.items() if len(moved) > spare[client]
            for _, task in sorted(moved)[spare[client]:]}


def _solved_active_target(group: Group, ranking: Ranking, costs: CostModel,
                          chains: tuple[Container[TaskId], Container[TaskId]], own_arcs: frozenset[str] | None,
                          relaxed: bool | None) -> dict[TaskId, str]:
    """``active_target``'s flow with the chain prices given (prone, staying)."""
    hub_only, ways = _active_ways(group, ranking, costs, *chains)
    few_left = _few_left(group)
    stays_mostly = few_left or _joined(group)
    if relaxed is None:
        relaxed = own_arcs is None and not few_left and _relaxation_pays(group, hub_only, ways)
    if relaxed:
        target = _relaxed_active_target(group, hub_only, ways)
        if target is not None:
            return target
    receiving = _below_floor(group)
    while True:
        target, fed, hubs = _capped_active_target(group, hub_only, ways, own_arcs, stays_mostly, receiving)
        if not fed:
            return target
        own_arcs = hubs.next_round(fed)


# One task's ways out in the active flow: (task, its key, hub price, special clients' prices,
# previous owner)
_Ways = tuple[TaskId, tuple[int, bool], int, dict[str, int], "str | None"]
# The tasks without special clients, by (key, hub price)
_HubOnly = dict[tuple[tuple[int, bool], int], list[TaskId]]


def _active_ways(group: Group, ranking: Ranking, costs: CostModel,
                 prone: Container[TaskId], staying: Container[TaskId]) -> tuple[_HubOnly, list[_Ways]]:
    """Every task's prices in the active flow, computed once for whichever graph is solved: the
    tasks that only the hubs reach, and the others' ways out."""
    hub_only: _HubOnly = defaultdict(list)
    ways = []
    append = ways.append
    owners, all_ranks, absent, best = group.prev_active_owner, ranking.holders, ranking.absent, ranking.best
    special_arcs, lag_aware = costs.special_arcs, costs.lag_aware
    for task, spec in group.specs.items():
        key = (task.subtopology, spec.stateful)  # _group_key, inlined (a hot loop)
        owner = owners.get(task)
        if spec.stateful:
            rank_absent = absent[task]
            hub_cost = no_state_price(lag_aware, rank_absent)
            holders = all_ranks[task]
            if owner is None and not holders:
                hub_only[key, hub_cost].append(task)
                continue
            chain = STANDBY_CHAIN if task in prone else 0
            special = special_arcs(holders, rank_absent, best[task], holders if owner is None or owner in holders
                                   else [*holders, owner], (owner,), chain)
            hub_cost += chain
            if task in staying:  # caught up there (``chain_prone``), so among ``special``
                special[owner] += STANDBY_CHAIN
        elif owner is None:
            hub_only[key, MOVE].append(task)
            continue
        else:
            hub_cost, special = MOVE, {owner: 0}
        append((task, key, hub_cost, special, owner))
    return hub_only, ways


def _active_windows(graph: FlowGraph, group: Group) -> tuple[list[int], list[int], int, list[int]]:
    """Per client (in client order) the nodes its stateful and its stateless actives enter, and
    the sink, with the balance windows between them: total and stateful actives within their
    quotas, stateless actives preferring their own share. Last, the windows' arcs above the
    floors, which a warm start does not fill (``_joined``)."""
    clients = group.clients
    client_node = dict(zip(clients, graph.nodes(len(clients)), strict=True))
    stateful_node = dict(zip(clients, graph.nodes(len(clients)), strict=True))
    stateless_node = dict(zip(clients, graph.nodes(len(clients)), strict=True))
    sink = graph.node()
    total = quotas(len(group.specs), group.threads)
    stateful = quotas(len(group.stateful), group.threads)
    stateless = quotas(len(group.stateless), group.threads)
    above_floors = []
    for client in clients:
        q, s, free = total[client], stateful[client], stateless[client]
        graph.floor(client_node[client], sink, q.floor, -BALANCE_FLOOR)
        above_floors.append(graph.arc(client_node[client], sink, q.ceiling - q.floor, 0))
        above_floors.append(graph.last_resort(client_node[client], sink, BIG_CAPACITY, OVER_CEILING))
        graph.floor(stateful_node[client], client_node[client], s.floor, -STATEFUL_FLOOR)
        above_floors.append(graph.arc(stateful_node[client], client_node[client], s.ceiling - s.floor, 0))
        above_floors.append(graph.last_resort(stateful_node[client], client_node[client], BIG_CAPACITY, OVER_CEILING))
        _prefer_share(graph, stateless_node[client], client_node[client], (0, BIG_CAPACITY),
                      (free.floor, free.ceiling))
    return [stateful_node[c] for c in clients], [stateless_node[c] for c in clients], sink, above_floors


def _capped_active_target(group: Group, hub_only: _HubOnly, ways: list[_Ways], own_arcs: frozenset[str] | None,
                          stays_mostly: bool, receiving: Collection[str]):
    """The active flow with every subtopology cap: (target, clients the funnels fed, hubs); the
    target is None when the funnels' flow found no split (solve again, ``next_round``).
    ``stays_mostly``: solved from every task on its previous owner (``_few_left``, ``_joined``);
    ``receiving``: ``_below_floor``."""
    graph = FlowGraph(PRIORITIES)
    clients = group.clients
    stateful_nodes, stateless_nodes, sink, above_floors = _active_windows(graph, group)
    counts = group.key_counts
    keys = sorted(counts)
    stateful_array = np.array(stateful_nodes, dtype=np.int64)
    stateless_array = np.array(stateless_nodes, dtype=np.int64)
    hubs = _SubtopologyHubs(graph, counts, clients, group.threads,
                            lambda key: stateful_array if key[1] else stateless_array,
                            own_arcs, layer_when_small=True, receiving=receiving)
    way_tasks, way_keys, way_costs, way_specials, way_owners = _columns(ways)
    classes = _TaskClasses(units=1, uniform=_tasks_alike(zip(way_keys, way_owners, strict=True)))
    hub = hubs.hub
    for (key, hub_cost), tasks in hub_only.items():
        classes.hub_only[key, hub[key], hub_cost].extend(tasks)
    classes.add(zip(way_tasks, way_keys, map(hub.__getitem__, way_keys), way_costs, way_specials, way_owners,
                    strict=True))
    classes.build(graph, hubs)
    hubs.close()
    graph.supply(sink, -len(group.specs))
    graph.solve(partial(_on_previous_owners, group, classes) if stays_mostly else None, held=above_floors)
    fed = hubs.realize(graph)
    if fed:
        return None, fed, hubs

    pick_tasks, pick_clients, hub_tasks, _ = classes.decode(graph)
    target = dict(zip(pick_tasks, pick_clients, strict=True))
    for key in keys:
        tasks = hub_tasks.get(key)
        if not tasks:
            continue
        units = hubs.receivers(graph, key)
        for task, client in zip(tasks, round_robin(units, list(units)), strict=True):
            target[task] = client
    return target, frozenset(), hubs


def _on_previous_owners(group: Group, classes: _TaskClasses) -> tuple[list[int], list[int]]:
    """The active flow's warm start: every task on its previous owner (``_TaskClasses.staying``)."""
    owners = group.prev_active_owner
    return classes.staying(lambda task, client: owners.get(task) == client)


def _below_floor(group: Group) -> list[str]:
    """The clients whose previous actives that stay fall short of their floor: where the tasks
    without a live owner, and those that balance moves, go."""
    staying = Counter(group.prev_active_owner.values())
    total = quotas(len(group.specs), group.threads)
    return [client for client in group.clients if staying[client] < total[client].floor]


# Share of the tasks that may lack a live previous owner for the warm start: a group that ran
# little before (a fresh one) gains nothing from it, and would load scipy for nothing.
STAYING_ORPHANS_SHARE = 0.1
# Tasks without a live owner up to which a member or a few leaving take the warm start
FEW_ORPHANS = 64


def _few_left(group: Group) -> bool:
    """Whether the active flow starts from every task on its previous owner because a member or
    a few left (``FlowGraph.solve``, ``assignor.warm_start``): few tasks lack an owner and no
    client holds more than its new ceilings, so that flow is the optimum but for a few units.
    Their homes are chains through caught-up holders, of many lengths and tie-breaks: each
    length is a phase of its own, so only a few units take this way (1% of 1,000 members
    leaving, 200 units: 7 to 97 phases on the bench's groups, where OR-Tools is as fast)."""
    orphans = group.orphans()
    if orphans > FEW_ORPHANS or orphans > STAYING_ORPHANS_SHARE * len(group.specs):
        return False
    total = quotas(len(group.specs), group.threads)
    stateful = quotas(len(group.stateful), group.threads)
    owners = group.prev_active_owner
    held = Counter(owners.values())
    held_stateful = Counter(owners[task] for task in group.stateful if task in owners)
    return all(held[c] <= total[c].ceiling and held_stateful[c] <= stateful[c].ceiling for c in group.clients)


def _joined(group: Group) -> bool:
    """Whether the active flow starts from every task on its previous owner because members
    joined: some clients hold nothing yet, and few tasks lack an owner. Each client's units
    above its new floor wait at its node (``_active_windows``: the arcs above the floors stay
    empty; filled, they would make the start no optimum at all, as a newcomer below its floor
    gains more from a moved task than any move costs), and the phases place them: what moves
    goes to new members at one price, no state and a move, so a few phases route it all (3 to
    10 on the bench's scale-outs of 10%, 2,000 units; at most 19 on 15 groups measured, randomly
    laid out ones among them). Only where every client runs as many threads: with 1 or 2 per
    client, the moves' prices spread over many tie-breaks, and four randomly laid out groups
    took 22 to 59 phases, three of them slower than OR-Tools from scratch (0.64-0.94x)."""
    if not _settled_before(group):
        return False
    holding = set(group.prev_active_owner.values())
    return any(client not in holding for client in group.clients)


def _settled_before(group: Group) -> bool:
    """Whether few tasks lack a live previous owner and every client runs as many threads: a
    settled group that members joined or left. Its standby flow starts from every standby
    where it ran (``_StandbyFlow.solve``): with members gone, their standbys and those of
    promoted standbys wait, a few thousand units at most, where OR-Tools solved the whole
    graph again (1% or 10% of 1,000 members leaving at 20 or 50 subtopologies, the standby
    target: 0.20-0.25 s down to 0.18-0.19 s). Not with threads of several sizes, as for
    ``_joined``: a randomly laid out group of 1-4 threads per client took 0.63 s against 0.54 s."""
    return group.orphans() <= STAYING_ORPHANS_SHARE * len(group.specs) and len(set(group.threads.values())) == 1


# (subtopology keys x clients) from which the relaxed flows are tried first, when each client's
# tasks span more than SPREAD keys on average
RELAXED_PAIRS = 5_000
SPREAD = 3
# When the previous owners (standby holders) already hold more than this share of the tasks
# above their subtopology caps, the relaxed active (standby) flow is not tried: its decoding must keep caps that the
# group breaks widely (a group settled by min_traffic, which ignores them), so it rarely
# certifies and only adds a solve (bench/bench_rack.py, scale-out min_traffic: 23% over, never
# certified; the HA sweep's 10-subtopology scale-out: 10% over, certified).
CROWDED_EXCESS_SHARE = 0.15


def _relaxation_pays(group: Group, hub_only: _HubOnly, ways: list[_Ways]) -> bool:
    """Try the relaxed flow first when the capped one is large and the relaxed one much smaller:
    most tasks have a previous owner (a settled group changing) and each owner's tasks span
    several subtopology keys (``SPREAD``: the capped flow has a class per (key, owner), the
    relaxed one per owner), and the tasks that lost their owner fit on new members
    (``_orphans_fit_on_new_members``)."""
    if 2 * len(group.prev_active_owner) <= len(group.specs):
        return False
    keys = {key for _, key, _, _, _ in ways}.union(key for key, _ in hub_only)
    if len(keys) <= SPREAD or len(keys) * len(group.clients) < RELAXED_PAIRS:
        return False
    owned = [(key, owner) for _, key, _, _, owner in ways if owner is not None]
    if 2 * len(owned) <= len(group.specs) or not _orphans_fit_on_new_members(group):
        return False
    return len(set(owned)) > SPREAD * len({owner for _, owner in owned})


def _orphans_fit_on_new_members(group: Group) -> bool:
    """Whether the tasks that lost their owner fit within the floors of the members that hold
    nothing yet (new members), where no task of theirs is displaced and no subtopology is
    crowded. When they do not (a scale-in: every member already holds its share), their homes
    are chains through caught-up holders whose other tasks are of the same subtopologies; the
    relaxed optimum, free to move those past the caps, then never decoded within the caps in
    our sweeps (1% to 10% leaving, with or without new members) and only added a solve."""
    orphans = group.orphans()
    if not orphans:
        return True
    holding = set(group.prev_active_owner.values())
    total = quotas(len(group.specs), group.threads)
    return orphans <= sum(total[client].floor for client in group.clients if client not in holding)


def _crowding(caps: Mapping, clients: Sequence[str], staying: Iterable[tuple[object, str]]) -> tuple[dict, int]:
    """The (key, client) pairs where more of ``staying`` (one pair per task that may stay, or
    placed) fall than the cap, with their caps; and how many units of ``staying`` lie above the
    caps. Caps are at least one, so a pair of one unit is never crowded."""
    position = {client: index for index, client in enumerate(clients)}
    crowded = {}
    over = 0
    for (key, client), tasks in Counter(staying).items():
        if tasks == 1:
            continue
        cap = int(caps[key][position[client]])
        if tasks > cap:
            crowded[key, client] = cap
            over += tasks - cap
    return crowded, over


class _CrowdedPairs:
    """The special arcs of a relaxed flow (``_relaxed_active_target``, ``_RelaxedStandbyFlow``):
    into the client's node directly, counted against no subtopology cap, except on *crowded*
    (subtopology key, client) pairs, where the tasks that may well stay there (``crowded``:
    previous owners, and every special client of a task without one for actives; every
    special client for standbys) already exceed the cap. A crowded pair keeps its node, which
    charges SUBTOPOLOGY_EXCESS above the cap as the capped flow does: the capped optimum may
    keep such excess rather than pay a move. Its tasks keep their key in their class; all
    others share classes across subtopologies."""

    def __init__(self, graph: FlowGraph, head: Callable[[object, str], int], crowded: Mapping[tuple, int],
                 over: int = 0) -> None:
        self._graph, self._head, self._crowded = graph, head, crowded
        self.over = over  # the units of ``staying`` above the crowded pairs' caps
        self._pairs: dict[tuple, int] = {}
        self._excess = range(0)

    @classmethod
    def of(cls, graph: FlowGraph, head: Callable[[object, str], int], caps: Mapping, clients: Sequence[str],
           staying: Iterable[tuple[object, str]]) -> _CrowdedPairs:
        """The crowded pairs of ``staying`` (``_crowding``)."""
        crowded, over = _crowding(caps, clients, staying)
        return cls(graph, head, crowded, over)

    def crowds(self, key, clients: Iterable[str]) -> bool:
        crowded = self._crowded
        return bool(crowded) and any((key, client) in crowded for client in clients)

    def node(self, key, client: str) -> int:
        if (key, client) not in self._crowded:
            return self._head(key, client)
        pair = self._pairs.get((key, client))
        if pair is None:
            pair = self._pairs[key, client] = self._graph.node()
        return pair

    def close(self) -> None:
        if not self._pairs:
            return
        pairs = list(self._pairs)
        nodes = list(self._pairs.values())
        heads = [self._head(key, client) for key, client in pairs]
        self._graph.arcs(nodes, heads, [self._crowded[pair] for pair in pairs], 0)
        self._excess = self._graph.arcs(nodes, heads, BIG_CAPACITY, SUBTOPOLOGY_EXCESS)

    def paid(self, graph: FlowGraph) -> int:
        """The units the solved flow put above the crowded pairs' caps."""
        return int(graph.flows(self._excess).sum())


def _relaxed_active_target(group: Group, hub_only: _HubOnly, ways: list[_Ways]) -> dict[TaskId, str] | None:
    """The active flow with subtopology caps only on crowded pairs (``_CrowdedPairs``), then
    each of its units placed within the caps.

    Without caps, tasks of all subtopologies with one owner and one price share a class: on a
    settled group of many subtopologies the graph has a node per owner instead of one per task.
    Every capped flow is a flow of this one at the same cost or more (it only adds
    SUBTOPOLOGY_EXCESS elsewhere), so its optimum bounds the capped optimum from below. The
    solution is then decoded with the caps in view (``_CapKeeper``): which of a class's tasks
    leave it (spread over subtopologies), and how each subtopology's hub tasks meet the
    clients' hub units within what the caps leave (one max flow, ``_settle_leavers``). When
    the decoded actives exceed the caps by no more than the relaxed flow paid, the decoded
    target costs the relaxed optimum in the capped flow too, so it is the capped optimum.
    Otherwise None: the caller solves the capped flow.
    """
    counts = group.key_counts
    clients = group.clients
    caps = _subtopology_caps(counts, group.threads, clients)
    crowded, over = _crowding(caps, clients, ((key, client) for _, key, _, special, owner in ways
                                              for client in ((owner,) if owner is not None else special)))
    if over > CROWDED_EXCESS_SHARE * len(group.specs):  # known before any graph is built
        return None
    graph = FlowGraph(PRIORITIES)
    stateful_nodes, stateless_nodes, sink, above_floors = _active_windows(graph, group)
    heads = {True: dict(zip(clients, stateful_nodes, strict=True)),
             False: dict(zip(clients, stateless_nodes, strict=True))}
    pairs = _CrowdedPairs(graph, lambda key, client: heads[key[1]][client], crowded, over)
    hub = {True: graph.node(), False: graph.node()}
    hub_arcs = {True: graph.arcs(hub[True], stateful_nodes, BIG_CAPACITY, 0),
                False: graph.arcs(hub[False], stateless_nodes, BIG_CAPACITY, 0)}
    classes = _TaskClasses(units=1)
    shared = {True: (None, True), False: (None, False)}  # the class key of tasks on no crowded pair
    for (key, hub_cost), tasks in hub_only.items():
        classes.hub_only[shared[key[1]], hub[key[1]], hub_cost].extend(tasks)
    classes.add((task, key if pairs.crowds(key, special) else shared[key[1]], hub[key[1]], hub_cost, special, owner)
                for task, key, hub_cost, special, owner in ways)
    classes.build(graph, pairs)
    pairs.close()
    graph.supply(sink, -len(group.specs))
    graph.solve(partial(_on_previous_owners, group, classes) if _joined(group) else None, held=above_floors)
    keys = {task: _group_key(spec) for task, spec in group.specs.items()}
    keeper = _CapKeeper(caps, keys.__getitem__, group.prev_active_owner, clients)
    return _place_within_caps(group, graph, classes, hub_arcs, keeper, pairs.paid(graph))


def _columns(ways: Sequence[tuple]) -> tuple[tuple, ...]:
    """A flow's ways (``_Ways``, ``_StandbyWays``) by columns, empty ones when there are none: zips
    and maps over columns make ``_TaskClasses.add``'s rows in C, not in a generator (a hot loop)."""
    return tuple(zip(*ways, strict=True)) or ((),) * 5


def _tasks_alike(pairs: Iterable[tuple]) -> bool:
    """Whether a capped flow's uniform classes pay: UNIFORM_CLASS_MIN tasks or more per
    (subtopology key, previous owner) on average, so that tasks of one owner whose further
    special clients are the same can be many (two standbys on few subtopologies: 20 per class
    instead of one each). Below that a uniform class saves few nodes, and the targets it deals,
    as good, measured slower downstream (scale-in, 10 subtopologies, 2 standbys: +5% in all;
    scale-out with racks: the standby steps +0.28 s). Never in the relaxed flows, for that reason."""
    pairs = list(pairs)
    return len(pairs) >= UNIFORM_CLASS_MIN * len(set(pairs))


def _subtopology_caps(counts: Mapping, threads: Mapping[str, int], clients: Sequence[str]) -> dict:
    """Per key, the soft cap ceil(S[j] * t_c / T) of every client (in client order)."""
    thread_counts = np.array([threads[c] for c in clients], dtype=np.int64)
    capacity = int(thread_counts.sum())
    # one array per count, shared by the keys of that count (never written): a pass over every
    # client per key cost O(subtopologies x clients)
    caps_of = {count: -(-(count * thread_counts) // capacity) for count in set(counts.values())}
    return {key: caps_of[count] for key, count in counts.items()}


def _place_within_caps(group: Group, graph: FlowGraph, classes: _TaskClasses, hub_arcs, keeper: _CapKeeper,
                       paid: int) -> dict[TaskId, str] | None:
    """``_relaxed_active_target``'s decoding: None when it exceeds the caps by more than the
    relaxed flow ``paid``."""
    clients, specs = group.clients, group.specs
    decoded = classes.decode_within(graph, keeper)
    target: dict[TaskId, str] = {}
    for stateful in (True, False):
        part = _Decoded()
        for task, client in zip(decoded.pick_tasks, decoded.pick_clients, strict=True):
            if specs[task].stateful == stateful:
                part.pick_tasks.append(task)
                part.pick_clients.append(client)
        part.hub_tasks = [task for task in decoded.hub_tasks if specs[task].stateful == stateful]
        part.groups = [entry for entry in decoded.groups if specs[entry[1][0]].stateful == stateful]
        settled = _settle_leavers(part, keeper.key_of, keeper.caps, graph.flows(hub_arcs[stateful]), clients)
        if settled is None:
            return None
        pick_tasks, pick_clients, hub_tasks, plan = settled
        target.update(zip(pick_tasks, pick_clients, strict=True))
        for key, units in plan.items():
            for task, client in zip(sorted(hub_tasks[key]), round_robin(units, sorted(units)), strict=True):
                target[task] = client
    if _crowding(keeper.caps, clients, ((keeper.key_of(task), client) for task, client in target.items()))[1] > paid:
        return None
    return target


class _TaskClasses:
    """Tasks that the flow cannot tell apart share one node: the graph grows with the distinct
    ways tasks can be placed (subtopology, previous owner, prices), not with tasks.

    A task leaves by its hub entry (any client, at its hub price) or by an arc to one of its
    *special* clients (a previous owner, a client reporting state), each at its own price,
    carrying one of its u units (u standbys per task; 1 for actives). Tasks of one subtopology
    key with the same entry and hub price form a class: one node with their summed supply and
    an arc to the hub entry able to carry all of it. With u = 1, a task that has other special
    clients besides its previous owner joins the class of that *anchor* (the owner, at its
    price), whose arc to it can carry every unit of the class. Each further special client
    adds to the class's arc to that client at that price, of capacity how many of the class's
    tasks have it. A task with more further special clients than u is a class alone (its own
    node, as without classes), or, where classes are ``uniform`` (``_tasks_alike``) and it has
    an anchor or u > 1, shares a class only with tasks of exactly the same ones at the same
    prices (a *uniform* class: with two standbys, the tasks of one owner whose standbys sit on
    the same two clients).

    Exact: every per-task assignment sums to a class flow of the same cost, and every class
    flow decomposes into one (``decode``): a special arc's units go to tasks having that special
    client, in task order (a task takes at most u of them, one per client, since it has at most
    u); in a uniform class, to its tasks in turn from where the previous arc stopped (each arc
    carries at most one unit per task, all arcs at most u per task, so no task takes more than
    u); the class's tasks then take the anchor's and the hub's units in any pairing, at one
    price for all of them.
    """

    def __init__(self, units: int, uniform: bool = False) -> None:
        self._units = units
        self.uniform = uniform  # uniform classes (``_tasks_alike``); never in the relaxed flows
        self._classes: dict[tuple, _Class] = {}
        # Tasks without special clients (every task of a fresh group), by (key, entry, hub price):
        # callers append to it directly, the cheapest way to ``add`` them.
        self.hub_only: dict[tuple, list[TaskId]] = defaultdict(list)

    def add(self, rows: Iterable[tuple[TaskId, object, int, int, dict[str, int], str | None]]) -> None:
        """Place each task of ``rows``, (task, key, entry, hub price, special, previous owner), in
        its class; ``special`` maps its special clients to their prices (left as it is: the
        relaxed and the capped flows read the same prices). One call for all tasks: it is the
        hot loop of every flow built."""
        units, uniform, classes = self._units, self.uniform, self._classes
        for task, key, entry, hub_cost, special, owner in rows:
            anchor = anchor_cost = None
            further = len(special)
            if units == 1 and further > 1 and owner in special:
                anchor, anchor_cost = owner, special[owner]
                further -= 1
            alike = None
            if further > units:  # alone, or in a uniform class: with the tasks of the same ways out
                alike = frozenset(special.items()) if uniform and (units > 1 or anchor is not None) else task
            class_key = (key, entry, hub_cost, anchor, anchor_cost, alike)
            members = classes.get(class_key)
            if members is None:
                members = classes[class_key] = _Class(key, entry, hub_cost, anchor, anchor_cost)
                members.uniform = type(alike) is frozenset
                members.apart = alike is not None
            members.tasks.append(task)
            # in client order, whatever order the caller's clients came in (one further client: any)
            extras = members.extras
            for client, cost in sorted(special.items()) if further > 1 else special.items():
                if client != anchor:
                    extras += (client, cost, task)

    def build(self, graph: FlowGraph, hubs: _SubtopologyHubs) -> None:
        for (key, entry, hub_cost), tasks in self.hub_only.items():
            members = self._classes.get((key, entry, hub_cost, None, None, None))
            if members is None:
                members = self._classes[key, entry, hub_cost, None, None, None] = _Class(key, entry, hub_cost, None, None)
            members.tasks.extend(tasks)
        units = self._units
        arcs: list[int] = []  # tail, head, capacity, price of each arc, flat
        add = arcs.extend
        nodes: list[int] = []
        hub_node, new_node = hubs.node, graph.node
        anchored = False
        for members in self._classes.values():
            node = new_node()
            nodes.append(node)
            size = len(members.tasks)
            members.start = len(arcs) // 4
            key, extras, anchor = members.key, members.extras, members.anchor
            if anchor is not None:
                anchored = True
                add((node, members.entry, units * size, members.hub_cost,
                     node, hub_node(key, anchor), size, members.anchor_cost))
            else:
                add((node, members.entry, units * size, members.hub_cost))
            if len(extras) == 3:  # one further special client (most classes of a settled group): one run
                members.runs = _ONE_RUN
                add((node, hub_node(key, extras[0]), 1, extras[1]))
                continue
            if members.apart and not members.uniform:  # a class alone: ``add`` sorted its clients, each a run
                members.runs = [(start, start + 3) for start in range(0, len(extras), 3)]
                for start in range(0, len(extras), 3):
                    add((node, hub_node(key, extras[start]), 1, extras[start + 1]))
                continue
            if len(extras) > 6:  # sorted by (client, price, task), so that one arc carries a run of one
                # client and price (two extras are a run or not already)
                extras[:] = chain.from_iterable(sorted(zip(extras[::3], extras[1::3], extras[2::3], strict=True)))
            members.runs = _runs(extras)
            for start, stop in members.runs:
                add((node, hub_node(key, extras[start]), (stop - start) // 3, extras[start + 1]))
        tails, heads, capacities, prices = arcs[::4], arcs[1::4], arcs[2::4], arcs[3::4]
        self._arcs = graph.arcs(tails, heads, capacities, prices)
        if anchored:  # only an anchor arc can be a stay (a fresh group has none)
            graph.stay(self._stays)
        graph.supplies(nodes, [units * len(members.tasks) for members in self._classes.values()])

    def _stays(self) -> list[int]:
        """The anchor arcs a solve may merge away (``FlowGraph.stay``, which keeps the free ones), once
        built. Merged into its anchor's node, a class lends its arcs to every unit that reaches that
        node, and a flow in which a unit leaves by them while the class's own tasks leave too does
        not decode (the whole graph is then solved again). No optimal flow does that when every such
        unit pays more that way than by its own arcs: the class is shared (its tasks have at most
        one further special client each: a task alone or uniform has several, and one could take the
        second while the task takes the first), its hub price is the dearest of the tasks that land
        on its anchor by arcs of their own, and every arc that lands there, and every arc of its
        own, costs something (no free way round). So the active flow merges a settled group's
        classes, whose moves cost at least MOVE, and the standby flow few (a standby may stay free
        on every previous holder). Seen without the price rules: varied changelog sizes, some within
        the acceptable lag, made a scale-in's merged flow fail to decode and be solved twice."""
        dearest: dict[tuple, int] = {}  # per (key, client): the dearest hub price landing there
        free: set[tuple] = set()  # the (key, client) pairs some free further arc lands on
        shared = []  # the anchored classes without a free arc of their own, in class order: (start, price, pair)
        for members in self._classes.values():
            key, price, extras, anchor = members.key, members.hub_cost, members.extras, members.anchor
            if anchor is not None:
                pair = (key, anchor)
                if dearest.get(pair, -1) < price:
                    dearest[pair] = price
            paid = True
            for index in range(0, len(extras), 3):
                client = extras[index]
                if dearest.get((key, client), -1) < price:
                    dearest[key, client] = price
                if extras[index + 1] <= 0:
                    free.add((key, client))
                    paid = False
            if paid and anchor is not None and not members.apart:
                shared.append((members.start, price, pair))
        first = self._arcs.start + 1  # a class's anchor arc follows its hub arc
        return [first + start for start, price, pair in shared if price >= dearest[pair] and pair not in free]

    def staying(self, stays: Callable[[TaskId, str], bool]) -> tuple[list[int], list[int]]:
        """The flow where every task stays on the clients ``stays`` names, on the class arcs:
        (arcs, units), the start of ``FlowGraph.solve``. Actives: the previous owner. Standbys:
        every client the task ran on, previous holders and owner, even beyond its units (its
        class then lacks units, and the completion gives up the costliest). With the previous
        holders alone, a task lagging on one but caught up on its previous owner stayed lagging,
        a swap the completion's paths cannot make (a negative cycle: every one of the six
        scale-outs measured, the bench's settled ones among them).

        ``stays`` must hold for every task on its previous owner: an anchored class's tasks all
        stay on their anchor, that owner, unasked (most classes of a settled group)."""
        arcs: list[int] = []
        units: list[int] = []
        first = self._arcs.start
        for members in self._classes.values():
            arc = first + members.start + 1
            if members.anchor is not None:
                arcs.append(arc)
                units.append(len(members.tasks))
                arc += 1
            extras = members.extras
            for start, stop in members.runs:
                client = extras[start]
                if stop - start == 3:  # most runs: one task (no generator: 24 to 15 ms a scale-out)
                    staying = 1 if stays(extras[start + 2], client) else 0
                else:
                    staying = sum(stays(task, client) for task in extras[start + 2:stop:3])
                if staying:
                    arcs.append(arc)
                    units.append(staying)
                arc += 1
        return arcs, units

    def decode(self, graph: FlowGraph) -> tuple[list[TaskId], list[str], dict, dict[TaskId, int]]:
        """One decomposition of the solved flow, deterministic: the direct placements (tasks and
        their clients, in two lists); per key its hub tasks, sorted; the hub units of those hub
        tasks that take fewer than ``units`` (the others take ``units``)."""
        pick_tasks: list[TaskId] = []
        pick_clients: list[str] = []
        hub_tasks: dict = defaultdict(list)
        short: dict[TaskId, int] = {}
        taken: dict[TaskId, int] = defaultdict(int)
        flows = graph.flows(self._arcs).tolist()
        units = self._units
        for members in self._classes.values():
            extras = members.extras
            if members.anchor is None and not extras:
                hub_tasks[members.key].extend(members.tasks)
                continue
            arc = members.start + 1  # after the hub arc: its units are whatever the rest leaves
            anchor_units = 0
            if members.anchor is not None:
                anchor_units = flows[arc]
                arc += 1
            if units == 1 and len(extras) == 3 and len(members.tasks) == 1:
                # one task, one further special client (most classes of a settled group): its one
                # unit takes that client's arc, else the anchor's, else the hub
                task = members.tasks[0]
                if flows[arc]:
                    pick_tasks.append(task)
                    pick_clients.append(extras[0])
                elif anchor_units:
                    pick_tasks.append(task)
                    pick_clients.append(members.anchor)
                else:
                    hub_tasks[members.key].append(task)
                continue
            if members.apart and not members.uniform:  # a class alone: a unit per run at most, one task
                task = members.tasks[0]
                left = units
                for start, _ in members.runs:
                    if flows[arc]:
                        pick_tasks.append(task)
                        pick_clients.append(extras[start])
                        left -= 1
                    arc += 1
                if anchor_units and left:
                    pick_tasks.append(task)
                    pick_clients.append(members.anchor)
                elif left:
                    hub_tasks[members.key].append(task)
                    if left < units:
                        short[task] = left
                continue
            turn = 0  # a uniform class deals its runs' units to its tasks in turn
            for start, stop in members.runs:
                amount = flows[arc]
                arc += 1
                if members.uniform:
                    run = extras[start + 2:stop:3]
                    chosen = [run[(turn + index) % len(run)] for index in range(amount)]
                    turn = (turn + amount) % len(run)
                else:
                    chosen = extras[start + 2:min(stop, start + 3 * amount):3]
                for task in chosen:
                    pick_tasks.append(task)
                    pick_clients.append(extras[start])
                    taken[task] += 1
            for task in members.tasks:
                left = units - taken.get(task, 0)
                if anchor_units and left:
                    pick_tasks.append(task)
                    pick_clients.append(members.anchor)
                    anchor_units -= 1
                elif left:
                    hub_tasks[members.key].append(task)
                    if left < units:
                        short[task] = left
        for tasks in hub_tasks.values():
            tasks.sort()
        return pick_tasks, pick_clients, hub_tasks, short


    def decode_within(self, graph: FlowGraph, caps: _CapKeeper) -> _Decoded:
        """``decode`` for one unit per task with the subtopology caps in view (the relaxed
        flows): a task that moves to a special client is chosen so that it keeps the caps there
        (``caps.pick``); where a class's tasks either stay on one client or leave for the hub,
        which ones leave is left open (``_Decoded.groups``) for ``_settle_leavers`` to choose
        together with where the hub sends them."""
        decoded = _Decoded()
        flows = graph.flows(self._arcs).tolist()
        anchored: dict[tuple, list] = {}
        for members in self._classes.values():
            extras = members.extras
            if members.anchor is None and not extras:
                decoded.hub_tasks.extend(members.tasks)
                continue
            arc = members.start + 1
            anchor_units = 0
            if members.anchor is not None:
                anchor_units = flows[arc]
                arc += 1
            # Without an anchor, the tasks of a class of several have one special client each:
            # those a run does not take go to the hub.
            shared = members.anchor is None and len(members.tasks) > 1
            taken: set[TaskId] = set()
            for start, stop in members.runs:
                amount = flows[arc]
                arc += 1
                if not amount and not shared:
                    continue
                client = extras[start]
                candidates = [extras[index + 2] for index in range(start, stop, 3) if extras[index + 2] not in taken]
                if shared:
                    taken.update(candidates)
                    decoded.group(client, candidates, amount)
                    continue
                for task in caps.pick(candidates, amount, client):
                    taken.add(task)
                    decoded.pick_tasks.append(task)
                    decoded.pick_clients.append(client)
            rest = [task for task in members.tasks if task not in taken] if taken else members.tasks
            if members.anchor is None:
                decoded.group(None, rest, 0)
                continue
            # The rest stay on the anchor or leave for the hub, at the same two prices in every
            # class alike but for its further special clients (a task with more of them than
            # units is a class alone): one open group for all of them.
            signature = (members.key, members.entry, members.hub_cost, members.anchor, members.anchor_cost)
            group = anchored.get(signature)
            if group is None:
                anchored[signature] = [list(rest), anchor_units]
            else:
                group[0].extend(rest)
                group[1] += anchor_units
        for (_, _, _, anchor, _), (tasks, stay) in anchored.items():
            decoded.group(anchor, tasks, stay)
        return decoded


class _Decoded:
    """A relaxed flow decoded but for its open choices: the direct placements so far (tasks and
    clients, in two lists), the hub tasks so far, and the *groups*: tasks of which ``stay`` go
    to ``client`` and the others to the hub, any of them."""

    def __init__(self) -> None:
        self.pick_tasks: list[TaskId] = []
        self.pick_clients: list[str] = []
        self.hub_tasks: list[TaskId] = []
        self.groups: list[tuple[str, list[TaskId], int]] = []

    def group(self, client: str | None, tasks: list[TaskId], stay: int) -> None:
        if stay >= len(tasks):
            self.pick_tasks.extend(tasks)
            self.pick_clients.extend([client] * len(tasks))
        elif stay == 0:
            self.hub_tasks.extend(tasks)
        else:
            self.groups.append((client, tasks, stay))


def _settle_leavers(decoded: _Decoded, key_of: Callable[[TaskId], object], caps: Mapping, demand: np.ndarray,
                    clients: Sequence[str]) -> tuple[list[TaskId], list[str], dict[object, list[TaskId]],
                                                     dict[object, dict[str, int]]] | None:
    """Which tasks of each open group leave for the hub, and how many of each key's hub tasks
    each client takes, so that the hub's units (``demand``, in client order) land within what
    the caps leave: one max flow, groups -> keys -> clients (``assignor.flow.feasible_flow``).
    Room on a client counts every direct placement there, and every task of a group that may
    stay there. Returns the direct placements (tasks, clients), the hub tasks by key and the
    hub units per key and client; None when no choice fits."""
    wanting = np.flatnonzero(demand).tolist()
    column_of = {clients[index]: column for column, index in enumerate(wanting)}
    groups = decoded.groups
    # The groups' tasks in one column; a *pair* is a group's tasks of one key, an arc of the flow,
    # pairs in group order, a group's keys in order of first appearance (its tasks in order).
    grouped = list(chain.from_iterable(tasks for _, tasks, _ in groups))
    grouped_keys = list(map(key_of, grouped))
    fixed: dict[object, int] = Counter(map(key_of, decoded.hub_tasks))
    keys = sorted(set(fixed).union(grouped_keys), key=_sort_key)
    row_of = {key: row for row, key in enumerate(keys)}
    width = max(len(keys), 1)
    owner = np.repeat(np.arange(len(groups), dtype=np.int64), [len(tasks) for _, tasks, _ in groups])
    codes = owner * width + np.fromiter(map(row_of.__getitem__, grouped_keys), dtype=np.int64, count=len(grouped))
    pair_codes, first, pair_of_task, pair_size = np.unique(codes, return_index=True, return_inverse=True,
                                                           return_counts=True)
    in_order = np.argsort(first, kind="stable")
    arc_of_pair = np.empty_like(in_order)
    arc_of_pair[in_order] = np.arange(len(in_order))
    pair_group, pair_row = np.divmod(pair_codes[in_order], width)
    pair_size = pair_size[in_order]
    tails, heads, capacities = pair_group, pair_row + len(groups), pair_size
    first_cell = len(tails)
    if keys:  # keys of one count share their caps (``_subtopology_caps``): a row per count, then per key
        row_of_caps: dict[int, int] = {}
        rows_alike = [row_of_caps.setdefault(id(caps[key]), len(row_of_caps)) for key in keys]
        distinct = {id(caps[key]): caps[key] for key in keys}
        room = np.stack([distinct[array][wanting] for array in row_of_caps])[rows_alike]
    else:
        room = np.zeros((0, len(wanting)), dtype=np.int64)
    # room on the clients the hub serves counts their direct placements and the groups that may stay
    wanted = map(column_of.__contains__, decoded.pick_clients)
    for (key, client), count in Counter(compress(zip(map(key_of, decoded.pick_tasks), decoded.pick_clients, strict=True),
                                                 wanted)).items():
        row = row_of.get(key)
        if row is not None:
            room[row, column_of[client]] -= count
    group_column = np.array([column_of.get(client, -1) for client, _, _ in groups], dtype=np.int64)
    pair_column = group_column[pair_group]
    served = pair_column >= 0
    np.subtract.at(room, (pair_row[served], pair_column[served]), pair_size[served])
    first_client = len(groups) + len(keys)
    supplies = [len(tasks) - stay for _, tasks, stay in groups] + [fixed.get(key, 0) for key in keys]
    flows = None
    for rows, columns in _settle_cells(room, tails, heads, capacities, len(groups), supplies[len(groups):]):
        flows = feasible_flow(
            first_client + len(wanting),
            np.concatenate([tails, rows + len(groups)]),
            np.concatenate([heads, columns + first_client]),
            np.concatenate([capacities, room[rows, columns]]),
            np.arange(first_client), supplies, np.arange(first_client, first_client + len(wanting)), demand[wanting])
        if flows is not None:
            break
    if flows is None:
        return None
    hub_tasks: dict[object, list[TaskId]] = defaultdict(list)
    for task in decoded.hub_tasks:
        hub_tasks[key_of(task)].append(task)
    for row in dict.fromkeys(pair_row.tolist()):  # every key of a group is a hub key, even when none leaves
        hub_tasks.setdefault(keys[row], [])
    # Per pair, its first tasks stay on the group's client and the flow's leavers go to the hub.
    arc_of_task = arc_of_pair[pair_of_task]
    order = np.argsort(arc_of_task, kind="stable")
    arc_sorted = arc_of_task[order]
    starts = np.cumsum(pair_size) - pair_size
    staying = (np.arange(len(order)) - starts[arc_sorted]) < (pair_size - flows[:first_cell])[arc_sorted]
    group_client = [client for client, _, _ in groups]
    stay = order[staying].tolist()
    pick_tasks = [*decoded.pick_tasks, *map(grouped.__getitem__, stay)]
    pick_clients = [*decoded.pick_clients, *map(group_client.__getitem__, owner[order[staying]].tolist())]
    for index in order[~staying].tolist():
        hub_tasks[grouped_keys[index]].append(grouped[index])
    plan: dict[object, dict[str, int]] = defaultdict(dict)
    cell_flows = flows[first_cell:]
    for cell in np.flatnonzero(cell_flows).tolist():
        plan[keys[int(rows[cell])]][clients[wanting[int(columns[cell])]]] = int(cell_flows[cell])
    return pick_tasks, pick_clients, hub_tasks, plan


# (subtopology keys x clients wanting hub units) above which ``_settle_leavers`` first tries a
# sparse choice of those cells: each key reaches a window of the clients, SPARSE_WINDOW per
# unit it may have to place (at least SPARSE_MIN_WINDOW), the windows spread around the
# clients. Any split within the caps is as good (the caller checks the total against what the
# relaxed flow paid), so the sparse one is used when it is feasible and the full one
# otherwise. A 5,000-client scale-in at 500 subtopologies: 1.9 million cells with room, a max
# flow of 0.21 s; 447,000 cells and 0.04 s with 32 per unit (with 8, no split: 0.01 s lost).
SPARSE_SETTLE_CELLS = 1_000_000
SPARSE_WINDOW = 32
SPARSE_MIN_WINDOW = 64


def _settle_cells(room: np.ndarray, tails: list[int], heads: list[int], capacities: list[int], groups: int,
                  fixed: list[int]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The (key row, client column) cells with room that ``_settle_leavers``' flow may use: a
    sparse choice first on large groups (``SPARSE_SETTLE_CELLS``), then every cell."""
    keys, width = room.shape
    if keys * width > SPARSE_SETTLE_CELLS:
        into = np.bincount(np.asarray(heads, dtype=np.int64) - groups, weights=capacities, minlength=keys)
        units = into.astype(np.int64) + np.asarray(fixed, dtype=np.int64)
        lengths = np.minimum(width, np.maximum(SPARSE_MIN_WINDOW, SPARSE_WINDOW * units))
        starts = np.arange(keys, dtype=np.int64) * width // keys
        rows = np.repeat(np.arange(keys, dtype=np.int64), lengths)
        columns = (np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))) % width
        kept = room[rows, columns] > 0
        yield rows[kept], columns[kept]
    yield np.nonzero(room > 0)


def _sort_key(key) -> tuple:
    """Keys of the relaxed flows (subtopology, or (subtopology, stateful)) in a total order."""
    return key if isinstance(key, tuple) else (key,)


class _CapKeeper:
    """While a relaxed flow is decoded: every (subtopology key, client)'s direct placements so
    far, counting each task on its origin (its previous owner, for actives) until it is placed
    elsewhere. ``pick`` chooses which of a run's tasks take its arc to a client: those that keep
    the client's caps, fewest there first."""

    def __init__(self, caps: Mapping, key_of: Callable[[TaskId], object], origin: Mapping[TaskId, str],
                 clients: Sequence[str]) -> None:
        self.key_of, self._origin = key_of, origin
        self._position = {client: index for index, client in enumerate(clients)}
        self.caps = caps
        self.held: dict[tuple, int] = Counter((key_of(task), client) for task, client in origin.items())

    def cap(self, key, client: str) -> int:
        return int(self.caps[key][self._position[client]])

    def pick(self, tasks: list[TaskId], amount: int, client: str) -> list[TaskId]:
        key_of, origin, held = self.key_of, self._origin, self.held
        if amount < len(tasks):
            def score(task):
                key = key_of(task)
                if origin.get(task) == client:
                    return (held[key, client] > self.cap(key, client), 0, task)
                return (held[key, client] >= self.cap(key, client), held[key, client], task)
            tasks = sorted(tasks, key=score)[:amount]
        for task in tasks:
            previous = origin.get(task)
            if previous != client:
                key = key_of(task)
                held[key, client] += 1
                if previous is not None:
                    held[key, previous] -= 1
        return tasks


_ONE_RUN = ((0, 3),)  # the runs of a class with one extra (client, price, task)


def _runs(extras: list) -> Sequence[tuple[int, int]]:
    """[start, stop) of each run of one (client, price) in a flat (client, price, task) list."""
    if len(extras) <= 3:
        return _ONE_RUN if extras else ()
    clients, prices = extras[::3], extras[1::3]
    # a run starts where the client or the price changes (maps and compress iterate in C: a hot loop)
    changes = map(or_, map(ne, clients[1:], clients), map(ne, prices[1:], prices))
    starts = [0, *compress(range(3, len(extras), 3), changes)]
    return list(zip(starts, [*starts[1:], len(extras)], strict=True))


class _Class:
    """One class of ``_TaskClasses`` while the graph is built and decoded."""

    __slots__ = ("key", "entry", "hub_cost", "anchor", "anchor_cost", "tasks", "extras", "runs", "start", "uniform",
                 "apart")

    def __init__(self, key, entry: int, hub_cost: int, anchor: str | None, anchor_cost: int | None) -> None:
        self.key, self.entry, self.hub_cost = key, entry, hub_cost
        self.anchor, self.anchor_cost = anchor, anchor_cost
        self.tasks: list[TaskId] = []
        self.extras: list = []  # (client, price, task) for each further special client of each task, flat
        self.runs: Sequence[tuple[int, int]] = ()  # ``_runs(extras)``, once built (an arc each)
        self.start = 0  # its first arc among the graph's class arcs, once built
        self.uniform = False  # every task has the same further special clients, more than its units
        # Its tasks have more further special clients than units (a class alone, or uniform):
        # merged into its anchor, a unit arriving there could leave by a second of a task's arcs
        # while the task leaves by the first, a flow that does not decode (``FlowGraph.stay``).
        self.apart = False


def round_robin(counts: Mapping[str, int], clients: Sequence[str]) -> list[str]:
    """Deal ``counts[c]`` slots per client in turns, so consecutive tasks land apart."""
    remaining = dict(counts)
    turn = [client for client in clients if remaining.get(client)]
    slots = []
    while turn:
        slots.extend(turn)
        for client in turn:
            remaining[client] -= 1
        turn = [client for client in turn if remaining[client]]
    return slots


# The standby flow's view of its tasks (``standby_ways``): the stateful tasks no client has
# state of nor held before (only hubs reach them), and every other task's ways out: (task,
# subtopology, hub price, its special clients' prices, previous owner).
_StandbyWays = tuple[list[TaskId], list[tuple[TaskId, int, int, dict[str, int], "str | None"]]]


def standby_ways(group: Group, ranking: Ranking, costs: CostModel, actives: Mapping[TaskId, str]) -> _StandbyWays:
    """Computed once per standby target, for every graph it solves (relaxed, hub rounds, trees)."""
    hub_only, ways = [], []
    owners, standbys, threads, all_ranks = group.prev_active_owner, group.prev_standby_holders, group.threads, ranking.holders
    special_arcs, lag_aware, absent, best = costs.special_arcs, costs.lag_aware, ranking.absent, ranking.best
    none: frozenset[str] = frozenset()
    for task in group.stateful:
        owner = owners.get(task)
        previous = standbys.get(task, none)
        if owner is not None and owner not in previous:
            previous = (owner, *previous)
        holders = all_ranks[task]
        if not holders and not previous:
            hub_only.append(task)
            continue
        active = actives[task]
        # the clients with its state or that ran it, but its active (in any order: the classes
        # sort them); loops, not comprehensions: each of those is a call (a hot loop)
        clients = []
        for client in holders:
            if client != active and client in threads:
                clients.append(client)
        for client in previous:
            if client != active and client not in holders and client in threads:
                clients.append(client)
        rank_absent = absent[task]
        ways.append((task, task.subtopology, no_state_price(lag_aware, rank_absent),
                     special_arcs(holders, rank_absent, best[task], clients, previous), owner))
    return hub_only, ways


def standby_windows(group: Group, actives: Mapping[TaskId, str], per_task: int) -> dict[str, tuple[int, int]]:
    """Per client, the (floor, ceiling) of the standbys it may take: balance over stateful
    replicas, actives plus standbys (scenario.md "Stateful balance"), less its stateful actives."""
    stateful_actives: dict[str, int] = Counter(map(actives.__getitem__, group.stateful))
    replicas = quotas(len(group.stateful) * (1 + per_task), group.threads, limit=len(group.stateful))
    windows = {}
    for client in group.clients:
        floor = max(0, replicas[client].floor - stateful_actives[client])
        windows[client] = (floor, max(floor, replicas[client].ceiling - stateful_actives[client]))
    return windows


class _StandbyFlow:
    """The part of the standby graph every formulation shares, then its solution decoded.

    One node per client with the window of stateful replicas it may still take (balance over
    actives plus standbys, scenario.md "Stateful balance"), the subtopology hubs, and the task
    classes a formulation adds (``add_classes``). ``standbys`` decodes the solved flow; the
    formulation deals each subtopology's hub units to tasks.
    """

    def __init__(self, group: Group, ranking: Ranking, costs: CostModel, actives: Mapping[TaskId, str],
                 per_task: int, own_arcs: frozenset[str] | None = None, ways: _StandbyWays | None = None) -> None:
        self.group, self.ranking, self.costs, self.actives, self.per_task = group, ranking, costs, actives, per_task
        self._ways = ways
        self.graph = graph = FlowGraph(PRIORITIES)
        clients = group.clients
        replica_node = dict(zip(clients, graph.nodes(len(clients)), strict=True))
        self.sink = sink = graph.node()
        windows = standby_windows(group, actives, per_task)
        standby_share = quotas(len(group.stateful) * per_task, group.threads, limit=len(group.stateful))
        # the standbys each client should take at least
        self.floors: dict[str, int] = {client: floor for client, (floor, _) in windows.items()}
        self.above_floors: list[int] = []  # the windows' arcs above the floors (``_settled_before``)
        for client in clients:
            (floor, ceiling), share = windows[client], standby_share[client]
            graph.floor(replica_node[client], sink, floor, -BALANCE_FLOOR)
            self.above_floors += _prefer_share(graph, replica_node[client], sink, (floor, ceiling),
                                               (share.floor, share.ceiling))
            self.above_floors.append(graph.last_resort(replica_node[client], sink, BIG_CAPACITY, OVER_CEILING))
        self.counts: dict[int, int] = defaultdict(int)
        for task in group.stateful:
            self.counts[task.subtopology] += per_task
        replica_nodes = np.array([replica_node[c] for c in clients], dtype=np.int64)
        self.hubs = self._hubs(replica_nodes, own_arcs)
        self.position = {client: index for index, client in enumerate(clients)}
        self.caught_up = _CaughtUpTasks(group, ranking)
        self.classes = _TaskClasses(units=per_task)
        self.trees: dict[int, _AllButOneHub] = {}  # the tree formulation's, per subtopology (``plant_trees``)
        self.tree_leaf: dict[int, dict[str, int]] = {}  # per subtopology, its tree's leaf of each active client
        self.every_arc: tuple = ()  # the every-arc formulation's arcs and their (task, client) cells
        # after a failed dealing, the subtopologies to give trees (``standbys``)
        self.undealt: frozenset[int] = frozenset()

    @property
    def ways(self) -> _StandbyWays:
        if self._ways is None:
            self._ways = standby_ways(self.group, self.ranking, self.costs, self.actives)
        return self._ways

    @property
    def known_ways(self) -> _StandbyWays | None:
        """``ways`` if some step needed them (for the next flow to reuse), without computing them."""
        return self._ways

    def _hubs(self, replica_nodes: np.ndarray, own_arcs: frozenset[str] | None):
        return _SubtopologyHubs(self.graph, self.counts, self.group.clients, self.group.threads,
                                lambda key: replica_nodes, own_arcs, receiving=self._below_floor())

    def _below_floor(self) -> list[str]:
        """As the module's ``_below_floor`` for actives: the clients below their standby floor
        with the standbys that may stay there, previous ones and previous actives moved away
        (``_SubtopologyHubs``, ``receiving``). Not in the relaxed flow, which has no funnels."""
        group, actives = self.group, self.actives
        kept: dict[str, int] = defaultdict(int)
        for task, holders in group.prev_standby_holders.items():
            for holder in holders:
                kept[holder] += holder != actives[task]
        for task in group.stateful:
            owner = group.prev_active_owner.get(task)
            if owner is not None and owner != actives[task]:
                kept[owner] += 1
        return [client for client in group.clients if kept[client] < self.floors[client]]

    def plant_trees(self, keys: Iterable[int]) -> None:
        """Per subtopology of ``keys``, a segment tree (``_AllButOneHub``) over the clients running its
        tasks' actives, which the hub no longer reaches, and whose entries reach the hub too: a
        task's standby then reaches every client but its active (``entry``).

        No other client is any task's active: the hub serves them all. The tree grows with the
        subtopology's tasks, not with the clients: 300 subtopologies of 53 stateful tasks on
        1,000 clients made 1.4 million arcs and took 4 s with a tree over every client, 230,000
        and 0.5 s so."""
        running: dict[int, set[str]] = defaultdict(set)
        for task in self.group.stateful:
            running[task.subtopology].add(self.actives[task])
        for key in sorted(keys):
            members = sorted(running[key], key=self.position.__getitem__)
            self.tree_leaf[key] = {client: leaf for leaf, client in enumerate(members)}
            self.trees[key] = _AllButOneHub(self.graph, [self.hubs.detached_node(key, client) for client in members],
                                            rest=self.hubs.hub[key])

    def entry(self, key: int, active: str) -> int:
        """Where a task of subtopology ``key`` whose active is ``active`` enters the clients
        without its state: its subtopology's tree, if planted, else its hub."""
        tree = self.trees.get(key)
        return self.hubs.hub[key] if tree is None else tree.entry(self.tree_leaf[key][active])

    def add_classes(self, entry: Callable[[int, str], int]) -> None:
        """Every stateful task into its class; ``entry(subtopology, active)`` is the node through
        which its standbys reach clients without its state."""
        classes, actives, ranking, costs = self.classes, self.actives, self.ranking, self.costs
        hub_only, ways = self.ways
        way_tasks, way_keys, way_costs, way_specials, way_owners = _columns(ways)
        classes.uniform = _tasks_alike(zip(way_keys, way_owners, strict=True))
        for task in hub_only:
            key = task.subtopology
            classes.hub_only[key, entry(key, actives[task]), costs.no_state_arc(ranking, task)].append(task)
        classes.add(zip(way_tasks, way_keys, map(entry, way_keys, map(actives.__getitem__, way_tasks)), way_costs,
                        way_specials, way_owners, strict=True))

    def solve(self) -> None:
        self.classes.build(self.graph, self.hubs)
        self.hubs.close()
        self.graph.supply(self.sink, -self.per_task * len(self.group.stateful))
        start = None
        if _settled_before(self.group):
            holders, owners = self.group.prev_standby_holders, self.group.prev_active_owner

            def ran_on(task: TaskId, client: str) -> bool:
                return client in holders.get(task, ()) or owners.get(task) == client

            start = partial(self.classes.staying, ran_on)
        self.graph.solve(start, held=self.above_floors)

    def standbys(self, formulation: StandbyFormulation,
                 chosen: dict[TaskId, list[str]]) -> dict[TaskId, tuple[str, ...]] | None:
        """The decoded standbys, ``chosen`` holding those the formulation decoded itself; None
        when the formulation finds no exact dealing of some hub's units (their subtopologies:
        ``undealt``)."""
        graph = self.graph
        pick_tasks, pick_clients, hub_units, short = self.classes.decode(graph)
        for task, client in zip(pick_tasks, pick_clients, strict=True):
            chosen[task].append(client)
        load: dict[str, int] = defaultdict(int)
        for holders in chosen.values():
            for client in holders:
                load[client] += 1
        units_of = {key: self.hubs.receivers(graph, key) for key in hub_units}
        if formulation.trades_units:
            _trade_hub_units(units_of, {key: tasks for key, tasks in hub_units.items() if key not in self.trees},
                             self.actives, zip(pick_tasks, pick_clients, strict=True), self.hubs.caps, self.position)
        tasks_of = {key: [(task, short.get(task, self.per_task)) for task in tasks] for key, tasks in hub_units.items()}
        # A round with a key that has no dealing is thrown away: the keys that have none are
        # known without dealing any (20,000 subtopologies of one partition: most of them)
        undealt = {key for key, hub_tasks in tasks_of.items() if formulation.undealable(self, key, hub_tasks, units_of[key])}
        for key in sorted(hub_units) if not undealt else ():
            # a failed dealing leaves ``chosen`` as it was: the other keys are still dealt, to
            # learn which fail too
            if not self.deal(formulation, key, tasks_of[key], units_of[key], chosen, load, repair=True):
                undealt.add(key)
        if undealt:
            # the others whose hub tasks mostly share one active may fail next round
            self.undealt = frozenset(undealt | {
                key for key, tasks in hub_units.items()
                if key not in self.trees and 2 * max(Counter(self.actives[task] for task in tasks).values()) >= len(tasks)})
            return None
        return {task: tuple(sorted(holders)) for task, holders in chosen.items()}

    def deal(self, formulation: StandbyFormulation, key: int, hub_tasks: list[tuple[TaskId, int]],
             units: Mapping[str, int], chosen: dict[TaskId, list[str]], load: dict[str, int], repair: bool) -> bool:
        """Deal one subtopology's hub units to its hub tasks (into ``chosen``), as the formulation
        says. False when it finds no exact dealing, or, without ``repair``, when a unit could only
        be placed by a swap with another task (``_SlotDealer.take_by_swap``)."""
        pools = formulation.deal(self, key, hub_tasks, units, chosen, load)
        if pools is None:
            return False
        for tasks, pool_units in pools:
            dealer = _SlotDealer(pool_units, self.group, load)
            for task, amount in tasks:
                for _ in range(amount):
                    excluded = {self.actives[task], *chosen[task]}
                    client = dealer.take(excluded)
                    if client is None:
                        if not repair:
                            return False
                        client = dealer.take_by_swap(task, excluded, chosen, self.actives, self.caught_up)
                    chosen[task].append(client)
        return True

    def by_active(self, hub_tasks: list[tuple[TaskId, int]], dealt: Mapping[int, Mapping[int, int]],
                  shared: Mapping[str, int] | None = None) -> list[Pool]:
        """Pools per active client (in client order): its tasks and the hub units dealt to them.
        With ``shared`` (units any of the tasks may take), an active's pool keeps as many of its
        tasks as units were dealt to it (one unit per task: one standby each), and the others
        share ``shared`` in one last pool."""
        clients = self.group.clients
        buckets: dict[str, list[tuple[TaskId, int]]] = defaultdict(list)
        for task, amount in hub_tasks:
            buckets[self.actives[task]].append((task, amount))
        pools: list[Pool] = []
        rest: list[tuple[TaskId, int]] = []
        for active, tasks in sorted(buckets.items()):
            units = {clients[i]: n for i, n in dealt.get(self.position[active], {}).items()}
            if shared is not None:
                taken = sum(units.values())
                tasks, left = tasks[:taken], tasks[taken:]
                rest.extend(left)
            pools.append((tasks, units))
        if shared is not None:
            pools.append((rest, shared))
        return pools


class _RelaxedStandbyFlow(_StandbyFlow):
    """One standby per task, the standby flow without subtopology caps (as the relaxed active
    flow, ``_relaxed_active_target``): tasks of every subtopology with the same ways out share
    a class, so a settled group has a node per previous holder rather than one per task. Its
    optimum bounds the capped flow's from below (the hub formulation's flow, whose optimum is
    exact whenever its hub units can be dealt). ``standbys_within_caps`` decodes it keeping
    every cap and every standby off its task's active; the result then costs that bound in the
    exact per-task flow, so it is optimal; None when it cannot."""

    def _hubs(self, replica_nodes: np.ndarray, own_arcs: frozenset[str] | None) -> _CrowdedPairs:
        group, graph = self.group, self.graph
        self.caps = _subtopology_caps(self.counts, group.threads, group.clients)
        self.hub_only, self.special = self.ways
        self.hub = graph.node()
        self.hub_arcs = graph.arcs(self.hub, replica_nodes, BIG_CAPACITY, 0)
        head = dict(zip(group.clients, replica_nodes.tolist(), strict=True))
        return _CrowdedPairs.of(graph, lambda key, client: head[client], self.caps, group.clients,
                                ((key, client) for _, key, _, special, _ in self.special for client in special))

    def build(self) -> None:
        classes, pairs, hub = self.classes, self.hubs, self.hub
        hub_only = classes.hub_only
        ranking, costs = self.ranking, self.costs
        for task in self.hub_only:
            hub_only[None, hub, costs.no_state_arc(ranking, task)].append(task)
        classes.add((task, key if pairs.crowds(key, special) else None, hub, hub_cost, special, owner)
                    for task, key, hub_cost, special, owner in self.special)

    def standbys_within_caps(self) -> dict[TaskId, tuple[str, ...]] | None:
        group = self.group
        # a task counts on its previous standby holder until placed elsewhere, as an active on its owner
        origin = {}
        for task, holders in group.prev_standby_holders.items():
            if len(holders) == 1:
                holder = next(iter(holders))
                if holder != self.actives[task] and holder in group.threads:
                    origin[task] = holder
        keeper = _CapKeeper(self.caps, _SUBTOPOLOGY, origin, group.clients)
        settled = _settle_leavers(self.classes.decode_within(self.graph, keeper), keeper.key_of, self.caps,
                                  self.graph.flows(self.hub_arcs), group.clients)
        if settled is None:
            return None
        pick_tasks, pick_clients, hub_tasks, plan = settled
        _trade_hub_units(plan, hub_tasks, self.actives, zip(pick_tasks, pick_clients, strict=True), self.caps,
                         self.position)
        chosen: dict[TaskId, list[str]] = {task: [] for task in group.stateful}
        load: dict[str, int] = defaultdict(int)
        for task, client in zip(pick_tasks, pick_clients, strict=True):
            chosen[task].append(client)
            load[client] += 1
        for key in sorted(plan):
            if not self.deal(HUB, key, [(task, 1) for task in sorted(hub_tasks[key])], plan[key], chosen, load,
                             repair=False):
                return None
        placed = ((task.subtopology, client) for task, holders in chosen.items() for client in holders)
        if _crowding(self.caps, group.clients, placed)[1] > self.hubs.paid(self.graph):
            return None
        return {task: tuple(sorted(holders)) for task, holders in chosen.items()}


# Hub units dealt to tasks by ``_SlotDealer``: the tasks (with the units each takes) and the
# units per client that they share.
Pool = tuple[list[tuple[TaskId, int]], Mapping[str, int]]


class StandbyFormulation:
    """One way to write the standby flow: how a task's standbys reach clients without its state,
    and how the units a subtopology hub sends to each client become standbys of its tasks.

    ``solve`` returns None only when the formulation finds no exact dealing of its hub units;
    ``standby_formulations`` says which formulation runs when.
    """

    name = ""
    tree_rounds = 1  # solves with more trees after a failed dealing (``_Hub``), the first included
    trades_units = False  # hub units traded between subtopologies before dealing (``_trade_hub_units``)

    def solve(self, group: Group, ranking: Ranking, costs: CostModel, actives: Mapping[TaskId, str],
              per_task: int, own_arcs: frozenset[str] | None = None,
              ways: _StandbyWays | None = None) -> dict[TaskId, tuple[str, ...]] | None:
        """``own_arcs``: as for ``active_target``; ``ways``: ``standby_ways``, if known."""
        trees: frozenset[int] = frozenset()
        for _ in range(self.tree_rounds):
            while True:
                flow = _StandbyFlow(group, ranking, costs, actives, per_task, own_arcs, ways)
                self.build(flow, trees)
                ways = flow.known_ways  # for the next rounds
                flow.solve()
                fed = flow.hubs.realize(flow.graph)
                if not fed:
                    break
                own_arcs = flow.hubs.next_round(fed)
            chosen: dict[TaskId, list[str]] = {task: [] for task in group.stateful}
            self.decode(flow, chosen)
            standbys = flow.standbys(self, chosen)
            if standbys is not None:
                return standbys
            trees |= flow.undealt
        return None

    def build(self, flow: _StandbyFlow, trees: frozenset[int]) -> None:
        """Add the tasks' arcs to the flow; ``trees``: the subtopologies that enter segment
        trees (``_StandbyFlow.plant_trees``) rather than their hub."""
        if flow.per_task != 1:
            raise ValueError(f"the {self.name} formulation places one standby per task")
        flow.plant_trees(trees)
        flow.add_classes(flow.entry)

    def decode(self, flow: _StandbyFlow, chosen: dict[TaskId, list[str]]) -> None:
        """The standbys of the arcs the formulation added itself, before the classes' ones."""

    def deal(self, flow: _StandbyFlow, key: int, hub_tasks: list[tuple[TaskId, int]], units: Mapping[str, int],
             chosen: dict[TaskId, list[str]], load: dict[str, int]) -> list[Pool] | None:
        raise NotImplementedError

    def undealable(self, flow: _StandbyFlow, key: int, hub_tasks: list[tuple[TaskId, int]],
                   units: Mapping[str, int]) -> bool:
        """Whether ``deal`` returns None for this key whatever was dealt before it."""
        return False

    def __repr__(self) -> str:
        return f"<standby formulation {self.name}>"


class _Hub(StandbyFormulation):
    """One standby per task. Clients without state are reached through one hub per subtopology;
    the units each client receives are dealt to tasks away from each task's active, greedily
    when that keeps the flow's counts, else by a small exact flow (``_deal_hub_units``).

    No such dealing exists when one client runs most of a subtopology's hub tasks. Those
    subtopologies, and the others whose hub tasks mostly share one active, then enter segment
    trees, as in ``_Tree``, and the flow is solved again: exact for them, still the hub's
    relaxation for the others, so a dealing of every other hub is again optimal. (Trees for
    the failed ones alone moved the failure to another subtopology, round after round.) After
    ``tree_rounds`` solves, ``solve`` returns None."""

    name = "hub"
    tree_rounds = 3
    trades_units = True

    def deal(self, flow, key, hub_tasks, units, chosen, load):
        if key in flow.trees:
            return _tree_pools(flow, key, hub_tasks, units)
        if _deal_greedily(hub_tasks, units, flow.group, load, flow.ranking, chosen, flow.actives):
            return []
        bucket_units: dict[int, int] = defaultdict(int)
        for task, amount in hub_tasks:
            bucket_units[flow.position[flow.actives[task]]] += amount
        position = flow.position
        dealt = _deal_hub_units(bucket_units, {position[c]: n for c, n in units.items() if n}, len(flow.group.clients))
        return None if dealt is None else flow.by_active(hub_tasks, dealt)

    def undealable(self, flow, key, hub_tasks, units):
        """A dealing that ``_deal_greedily`` finds is one that ``_deal_hub_units`` finds (it only
        keeps more clients apart), so ``deal`` fails exactly where ``_dealable`` says no."""
        if key in flow.trees:
            return False
        bucket_units: dict[str, int] = defaultdict(int)
        for task, amount in hub_tasks:
            bucket_units[flow.actives[task]] += amount
        return not _dealable(bucket_units, units)


class _Tree(StandbyFormulation):
    """One standby per task. Each task enters a segment tree of its subtopology at the point
    that excludes its active (``_StandbyFlow.plant_trees``): exact, at O(log n) arcs per
    active client. A task's units reach the tree's clients (the subtopology's actives) or,
    through the hub, any other client, where no task of the subtopology has its active: the
    hub's units are one pool for all of them."""

    name = "tree"

    def build(self, flow, trees):
        super().build(flow, frozenset(flow.counts))

    def deal(self, flow, key, hub_tasks, units, chosen, load):
        return _tree_pools(flow, key, hub_tasks, units)


def _tree_pools(flow: _StandbyFlow, key: int, hub_tasks: list[tuple[TaskId, int]], units: Mapping[str, int]) -> list[Pool]:
    """The pools of a subtopology whose tasks entered its segment tree: per active client, the
    units its entry reached; the hub's units shared by the rest."""
    position = [flow.position[client] for client in flow.tree_leaf[key]]  # of each leaf
    dealt = {position[excluded]: {position[leaf]: n for leaf, n in reached.items()}
             for excluded, reached in flow.trees[key].decode(flow.graph).items()}
    return flow.by_active(hub_tasks, dealt, shared=units)


class _PooledHub(StandbyFormulation):
    """Several standbys per task, through one hub per subtopology. The dealing cannot see that
    one task's hub standbys must land on different clients; a conflict is repaired by a swap,
    which can cost optimality (docs/assignor.md, "Convergence": the one known gap)."""

    name = "pooled_hub"

    def build(self, flow, trees):
        flow.add_classes(flow.entry)

    def deal(self, flow, key, hub_tasks, units, chosen, load):
        return [(hub_tasks, units)]


class _EveryArc(StandbyFormulation):
    """An arc from every stateful task to every client but its active: exact for any number of
    standbys, at tasks x clients arcs (``_every_standby_arc``)."""

    name = "every_arc"

    def build(self, flow, trees):
        graph = flow.graph
        task_nodes = graph.nodes(len(flow.group.stateful))
        graph.supplies(task_nodes, flow.per_task)
        flow.every_arc = _every_standby_arc(flow.group, flow.ranking, flow.costs, flow.actives, graph, task_nodes,
                                            flow.hubs, flow.position)

    def decode(self, flow, chosen):
        clients, stateful = flow.group.clients, flow.group.stateful
        all_arcs, allowed = flow.every_arc
        for index in np.flatnonzero(flow.graph.flows(all_arcs)).tolist():
            row, column = divmod(int(allowed[index]), len(clients))
            chosen[stateful[row]].append(clients[column])

    def deal(self, flow, key, hub_tasks, units, chosen, load):
        return [(hub_tasks, units)]  # no task enters a hub


HUB: StandbyFormulation = _Hub()
TREE: StandbyFormulation = _Tree()
POOLED_HUB: StandbyFormulation = _PooledHub()
EVERY_ARC: StandbyFormulation = _EveryArc()

# (group, standbys per task) -> the formulations to try, in order, until one finds a dealing
StandbyChoice = Callable[[Group, int], Sequence[StandbyFormulation]]


def standby_formulations(group: Group, per_task: int, exact_arcs: int = EXACT_STANDBY_ARCS) -> tuple[StandbyFormulation, ...]:
    """The formulations ``standby_target`` tries, in order, and why.

    One standby per task: the hub first, the smallest graph (it grows with reported state, not
    with tasks x clients) and exact whenever its units can be dealt; when they cannot (one
    client runs most of a subtopology's hub tasks), an exact formulation: every arc while the
    group is small (stateful tasks x clients <= ``exact_arcs``), otherwise the segment trees
    (over each subtopology's actives, the hub serving the other clients). Two or more
    standbys: the hubs cannot keep one task's standbys apart, so every arc while the group is
    small, and above that size the pooled hub with its swap repair, the one inexact case.
    """
    small = len(group.stateful) * len(group.clients) <= exact_arcs
    if per_task >= 2:
        return (EVERY_ARC if small else POOLED_HUB,)
    return (HUB, EVERY_ARC if small else TREE)


def large_group_formulations(group: Group, per_task: int) -> tuple[StandbyFormulation, ...]:
    """The choice ``standby_formulations`` makes for groups above ``EXACT_STANDBY_ARCS``, at any
    size: tests force it on small groups, where conflicts are likeliest."""
    return standby_formulations(group, per_task, exact_arcs=0)


def standby_target(
    group: Group,
    ranking: Ranking,
    costs: CostModel,
    actives: Mapping[TaskId, str],
    num_standby_replicas: int,
    choice: StandbyChoice = standby_formulations,
    relaxed: bool | None = None,
) -> dict[TaskId, tuple[str, ...]]:
    """``num_standby_replicas`` standbys per stateful task, on distinct clients, none on the active.

    Balance is over stateful replicas (actives plus standbys, scenario.md "Stateful balance");
    stickiness keeps previous standbys and lets a demoted previous active keep its state as
    a standby. KIP-441 "Assignment Algorithm" property 2: the next-most-caught-up come first.
    ``choice`` picks the formulation (``standby_formulations``). ``relaxed``: with one standby
    per task, first try the flow without subtopology caps (``_RelaxedStandbyFlow``); by size
    when None.
    """
    per_task = group.standby_count(num_standby_replicas)
    if per_task == 0 or not group.stateful:
        return {task: () for task in group.stateful}
    if relaxed is None:
        relaxed = _standby_relaxation_pays(group, ranking, per_task) and _hub_standbys_fit(group, actives, per_task)
    ways = None
    if relaxed and per_task == 1:
        flow = _RelaxedStandbyFlow(group, ranking, costs, actives, per_task)
        flow.build()
        flow.solve()
        standbys = flow.standbys_within_caps()
        if standbys is not None:
            return standbys
        ways = flow.ways
    if per_task == len(group.clients) - 1:
        # every client but the active holds one: the only target. Dealt through the formulations'
        # flows, the hub units met full clients at every turn, and each turn searched every task
        # for a swap (3 clients, 2 standbys, 50,000 tasks: 25 s, a large-group audit's find)
        return {task: tuple(client for client in group.clients if client != actives[task]) for task in group.stateful}
    formulations = choice(group, per_task)
    for formulation in formulations:
        standbys = formulation.solve(group, ranking, costs, actives, per_task, ways=ways)
        if standbys is not None:
            return standbys
    raise AssertionError(f"no exact standby formulation among {formulations}")


def _standby_relaxation_pays(group: Group, ranking: Ranking, per_task: int) -> bool:
    """As for actives (``_relaxation_pays``): one standby per task, a large capped layer, most
    stateful tasks with state or a previous replica somewhere (each its own pair node in the
    capped flow), and each previous standby holder's standbys spanning several subtopologies."""
    previous = group.prev_standby_holders
    if per_task != 1 or not previous:
        return False
    pairs = {(task.subtopology, holder) for task, standby in previous.items() for holder in standby}
    if len(pairs) <= SPREAD * len({holder for _, holder in pairs}):
        return False
    keys = {task.subtopology for task in group.stateful}
    if len(keys) * len(group.clients) < RELAXED_PAIRS:
        return False
    holders = ranking.holders
    if 2 * sum(1 for task in group.stateful if holders[task] or task in previous) <= len(group.stateful):
        return False
    counts = group.stateful_counts()
    caps = _subtopology_caps(counts, group.threads, group.clients)
    _, over = _crowding(caps, group.clients, ((task.subtopology, holder) for task, standby in previous.items()
                                             for holder in standby
                                             if holder in group.threads and task.subtopology in caps))
    return over <= CROWDED_EXCESS_SHARE * len(group.stateful)


def _hub_standbys_fit(group: Group, actives: Mapping[TaskId, str], per_task: int) -> bool:
    """Whether the standbys that no client with the task's state can take (the hub's units)
    fit, subtopology by subtopology, within the caps of the clients below their standby floor:
    a max flow, keys -> those clients, before any solve. The relaxed standby flow sends its hub
    units to those clients, and its decoding (``_settle_leavers``) needs such a split; when
    even this estimate finds none, the relaxation never decoded in our sweeps, and only cost
    its own solve and decoding before the capped flow (scale-ins of 1% and 10% of 1,000 members
    at 20 and 50 subtopologies: about 0.1 s). Right on 53 of the 54 settled groups of 5-500
    subtopologies measured (the miss: a failure it did not foresee), and on 216 smaller ones
    it skipped no relaxed flow that would have decoded (tests/assignor/test_hub_standbys_fit.py)."""
    clients = group.clients
    position = {client: index for index, client in enumerate(clients)}
    counts = group.stateful_counts()
    keys = sorted(counts)
    row_of = {key: row for row, key in enumerate(keys)}
    holders, owners = group.prev_standby_holders, group.prev_active_owner
    none: frozenset[str] = frozenset()
    rows: list[int] = []
    columns: list[int] = []
    short = np.zeros(len(keys), dtype=np.int64)
    for task in group.stateful:  # the clients with the task's state that may keep a standby of it
        active, owner, row = actives[task], owners.get(task), row_of[task.subtopology]
        kept = 0
        for client in holders.get(task, none):
            if client != active:
                rows.append(row)
                columns.append(position[client])
                kept += 1
        if owner is not None and owner != active:
            rows.append(row)
            columns.append(position[owner])
            kept += 1
        if kept < per_task:
            short[row] += per_task - kept
    if not short.any():
        return True
    rows_array, columns_array = np.array(rows, dtype=np.int64), np.array(columns, dtype=np.int64)
    windows = standby_windows(group, actives, per_task)
    floors = np.array([windows[client][0] for client in clients], dtype=np.int64)
    demand = np.maximum(floors - np.bincount(columns_array, minlength=len(clients)), 0)
    wanting = np.flatnonzero(demand)
    shorts = np.flatnonzero(short)
    if not len(wanting) or len(shorts) * len(wanting) > HUB_FIT_CELLS:
        return True  # nothing to split, or the relaxed flow's own decoding decides as before
    cell_of_row = np.full(len(keys), -1, dtype=np.int64)
    cell_of_row[shorts] = np.arange(len(shorts))
    cell_of_column = np.full(len(clients), -1, dtype=np.int64)
    cell_of_column[wanting] = np.arange(len(wanting))
    inside = (cell_of_row[rows_array] >= 0) & (cell_of_column[columns_array] >= 0)
    held = np.zeros((len(shorts), len(wanting)), dtype=np.int64)
    np.add.at(held, (cell_of_row[rows_array[inside]], cell_of_column[columns_array[inside]]), 1)
    caps = _subtopology_caps({keys[row]: counts[keys[row]] * per_task for row in shorts}, group.threads, clients)
    room = np.maximum(np.stack([caps[keys[row]][wanting] for row in shorts]) - held, 0)
    cell_rows, cell_columns = np.nonzero(room)
    found = maximum_flow(len(shorts) + len(wanting), cell_rows, cell_columns + len(shorts),
                         room[cell_rows, cell_columns], np.arange(len(shorts)), short[shorts],
                         np.arange(len(shorts), len(shorts) + len(wanting)), demand[wanting])
    return found is None or found[1] >= min(int(short.sum()), int(demand.sum()))


def _deal_greedily(hub_tasks, units, group, load, ranking, chosen, actives) -> bool:
    """Deal a subtopology's hub units most-remaining-first, keeping each task off its active;
    commit and return True only if no unit had to break the flow's counts (then the dealing
    is exact and the small dealing flow is not needed; it almost always is)."""
    trial = {task: list(chosen[task]) for task, _ in hub_tasks}
    # the loads this dealing adds, not a copy of every client's: one dealing per subtopology
    # (20,000 subtopologies of one partition on 1,000 clients: 0.7 s of copies)
    added: dict[str, int] = defaultdict(int)
    dealer = _SlotDealer(units, group, added)
    dealt: list[tuple[TaskId, str]] = []
    for task, amount in hub_tasks:
        for _ in range(amount):
            excluded = (actives[task], *trial[task])
            client = dealer.take(excluded)
            if client is None:
                # Only clients this task may not use have slots left: trade with a task dealt
                # earlier from the same hub (same price, same subtopology), which keeps the flow's
                # counts and so its optimum.
                client = _trade_slot(dealer, excluded, dealt, trial, actives)
                if client is None:
                    return False
            trial[task].append(client)
            dealt.append((task, client))
    chosen.update(trial)
    for client, amount in added.items():
        load[client] += amount
    return True


def _trade_slot(dealer, excluded, dealt, trial, actives) -> str | None:
    for slot_client in dealer.clients_with_slots():
        for index, (other, client) in enumerate(dealt):
            if client in excluded or slot_client == actives[other] or slot_client in trial[other]:
                continue
            dealer.take_slot(slot_client)
            holders = trial[other]
            holders[holders.index(client)] = slot_client
            dealt[index] = (other, slot_client)
            return client
    return None


def _every_standby_arc(group, ranking, costs, actives, graph, task_nodes, hubs, position):
    """Small groups: an arc from every stateful task to every client but its active, priced in
    bulk (a cost matrix, corrected where a client reports state or held the task before)."""
    clients = group.clients
    rows, columns = len(group.stateful), len(clients)
    cost = np.empty((rows, columns), dtype=np.int64)
    allowed = np.ones((rows, columns), dtype=bool)
    for row, task in enumerate(group.stateful):
        cost[row, :] = costs.no_state_arc(ranking, task)
        allowed[row, position[actives[task]]] = False
        previous = group.prev_standby_holders.get(task, frozenset()) | {group.prev_active_owner.get(task)}
        special = [c for c in ranking.holders[task].keys() | (previous - {None}) if c in position]
        for client, price in costs.special_arcs(ranking.holders[task], ranking.absent[task], ranking.best[task], special,
                                                previous).items():
            # As in the hub formulations, a client whose state is worth less than none
            # (a lagging report on an empty changelog) is priced as having none.
            cost[row, position[client]] = min(cost[row, position[client]], price)
    keys = sorted({task.subtopology for task in group.stateful})
    key_row = {key: index for index, key in enumerate(keys)}
    heads = np.array([hubs.nodes(key) for key in keys], dtype=np.int64)
    task_key = np.array([key_row[task.subtopology] for task in group.stateful], dtype=np.int64)
    flat = np.flatnonzero(allowed.ravel())
    tails = np.asarray(task_nodes, dtype=np.int64)[flat // columns]
    arcs = graph.arcs(tails, heads[task_key[flat // columns], flat % columns], 1, cost.ravel()[flat])
    return arcs, flat


def _trade_hub_units(units_of: dict[int, dict[str, int]], hub_tasks: Mapping[int, list[TaskId]],
                     actives: Mapping[TaskId, str], picks: Iterable[tuple[TaskId, str]], caps: Mapping,
                     position: Mapping[str, int]) -> None:
    """Make the hub units of one standby per task dealable, where trading them between
    subtopologies costs nothing: in ``units_of``, in place.

    A subtopology's n hub tasks can take its hub units exactly when no client c has more
    units than the tasks whose active is not c (u_c + a_c <= n; the tasks of each active can
    take any client but it). Where c has too many, one of its units is traded for a unit that
    another subtopology's hub sends to a client e: each client then receives as many units as
    before, at the same hub prices (a task's hub price does not depend on the client), so the
    flow's cost changes only by the subtopology excess over ``caps`` (per key, in client order
    by ``position``), and a trade is made only when that does not grow. The flow then has a
    dealable decomposition at the relaxed optimum, hence the exact optimum. A settled group
    losing 1-3% of its members failed its dealing in 1 or 2 subtopologies of 200-300, each with
    two hub tasks of one active and a unit on it; without the trade, a second solve with trees
    (``_Hub``) took 0.3-0.5 s. The search for partners looks at ``TRADE_BUDGET`` cells at most,
    whatever the group.
    """
    keys = sorted(key for key in hub_tasks if key in units_of)
    by_active = {key: Counter(actives[task] for task in hub_tasks[key]) for key in keys}
    # only a client that is some hub task's active can have too many units
    crowded_keys = [key for key in keys if any(units_of[key].get(client, 0) + tasks > len(hub_tasks[key])
                                               for client, tasks in by_active[key].items())]
    if not crowded_keys:
        return
    held: dict[tuple[int, str], int] = defaultdict(int)  # standbys per (subtopology, client), all of them
    for task, client in picks:
        held[task.subtopology, client] += 1
    for key, units in units_of.items():
        for client, amount in units.items():
            if amount:
                held[key, client] += amount

    def over_cap(key: int, client: str, change: int) -> int:
        """How much the excess at (key, client) grows when its count changes by ``change``."""
        cap = int(caps[key][position[client]])
        count = held[key, client]
        return max(0, count + change - cap) - max(0, count - cap)

    def room(key: int, client: str) -> bool:  # one more unit there keeps the key dealable
        return units_of[key].get(client, 0) + 1 + by_active[key][client] <= len(hub_tasks[key])

    sending: dict[int, list[str]] = {}  # per key, the clients its hub sends units to, in order

    def partners(crowded: str) -> Iterable[tuple[int, str]]:
        for other in keys:
            if room(other, crowded):
                if other not in sending:
                    sending[other] = sorted(client for client, amount in units_of[other].items() if amount)
                for client in sending[other]:
                    yield other, client

    budget = TRADE_BUDGET
    for key in crowded_keys:
        units, size = units_of[key], len(hub_tasks[key])
        for crowded in sorted(client for client, tasks in by_active[key].items() if units.get(client, 0) + tasks > size):
            while units[crowded] + by_active[key][crowded] > size:
                trade = None
                for other, client in partners(crowded):
                    budget -= 1
                    if budget < 0:
                        return  # a crafted group cannot make the search cost more than the trees
                    if (other != key and units_of[other][client] and client != crowded and room(key, client)
                            and over_cap(key, crowded, -1) + over_cap(key, client, 1)
                            + over_cap(other, client, -1) + over_cap(other, crowded, 1) <= 0):
                        trade = other, client
                        break
                if trade is None:
                    return
                other, client = trade
                for subtopology, giver, taker in ((key, crowded, client), (other, client, crowded)):
                    units_of[subtopology][giver] -= 1
                    units_of[subtopology][taker] = units_of[subtopology].get(taker, 0) + 1
                    held[subtopology, giver] -= 1
                    held[subtopology, taker] += 1
                for subtopology, taker in ((key, client), (other, crowded)):
                    if subtopology in sending and taker not in sending[subtopology]:
                        bisect.insort(sending[subtopology], taker)


def _deal_hub_units(bucket_units: Mapping[int, int], client_units: Mapping[int, int], count: int):
    """Which active client's tasks take which hub units: a transportation problem with one
    forbidden pair per bucket (a task's standby never on its active), solved as a small flow
    over ``_AllButOneHub``. None when no such dealing exists (``_dealable``)."""
    if not _dealable(bucket_units, client_units):
        return None
    graph = FlowGraph()
    leaves = list(graph.nodes(count))
    sink = graph.node()
    for index, units in client_units.items():
        graph.arc(leaves[index], sink, units, 0)
    tree = _AllButOneHub(graph, leaves)
    for bucket, units in bucket_units.items():
        graph.supply(tree.entry(bucket), units)
    graph.supply(sink, -sum(bucket_units.values()))
    try:
        graph.solve()
    except FlowError:
        return None
    return tree.decode(graph)


def _dealable(bucket_units: Mapping[int, int], client_units: Mapping[int, int]) -> bool:
    """Whether ``_deal_hub_units`` finds a dealing, without its flow: every client but one's own
    is open to a bucket, so (Hall's condition, the tree's cuts) the units fit exactly when they
    all fit and no bucket needs more than the clients other than its own receive. A subtopology
    of one hub task whose unit went to that task's active (most of a fresh group of subtopologies
    of one partition) has none, and the tree over every client cost O(clients) to say so: 1,000
    clients, 5,000 subtopologies, 3,367 such trees, 26 s of 37 under a profiler."""
    total = sum(client_units.values())
    if sum(bucket_units.values()) > total:
        return False
    return all(units + client_units.get(bucket, 0) <= total for bucket, units in bucket_units.items())


class _AllButOneHub:
    """A hub from which flow reaches every client of a subtopology but one.

    A segment tree over the clients (in order): each entry point, one per excluded client,
    has arcs to the O(log n) tree nodes covering everyone else. A task enters at the entry
    of its active client, so the flow itself never puts its standby there, at O(log n) arcs
    per (subtopology, active client) rather than O(n). With ``rest``, every entry also
    reaches that node: the clients outside the tree, none of them excluded.
    """

    def __init__(self, graph: FlowGraph, leaves: Sequence[int], rest: int | None = None) -> None:
        self._rest = rest  # a node every entry reaches too (the clients outside the tree)
        self._count = len(leaves)
        size = 1
        while size < self._count:
            size *= 2
        self._size = size
        self._node: dict[int, int] = {size + i: leaf for i, leaf in enumerate(leaves)}
        self._child_arcs: dict[int, list[tuple[int, int]]] = {}
        for index in range(size - 1, 0, -1):
            children = [child for child in (2 * index, 2 * index + 1) if child in self._node]
            if not children:
                continue
            self._node[index] = graph.node()
            self._child_arcs[index] = [
                (child, graph.arc(self._node[index], self._node[child], BIG_CAPACITY, 0)) for child in children
            ]
        self._graph = graph
        self._entries: dict[int, tuple[int, list[tuple[int, int]]]] = {}

    def _cover(self, low: int, high: int) -> list[int]:
        """Tree nodes covering leaves [low, high)."""
        nodes = []
        low += self._size
        high += self._size
        while low < high:
            if low & 1:
                nodes.append(low)
                low += 1
            if high & 1:
                high -= 1
                nodes.append(high)
            low //= 2
            high //= 2
        return nodes

    def entry(self, excluded: int) -> int:
        """The entry point that reaches every client but the ``excluded``-th."""
        if excluded not in self._entries:
            node = self._graph.node()
            covered = self._cover(0, excluded) + self._cover(excluded + 1, self._count)
            arcs = [(tree, self._graph.arc(node, self._node[tree], BIG_CAPACITY, 0)) for tree in covered]
            if self._rest is not None:
                self._graph.arc(node, self._rest, BIG_CAPACITY, 0)
            self._entries[excluded] = (node, arcs)
        return self._entries[excluded][0]

    def decode(self, graph: FlowGraph) -> dict[int, dict[int, int]]:
        """Per entry (excluded client), the units that reached each client: a flow decomposition
        top-down the tree. Any split is valid: below the node an entry reached, every leaf is
        allowed for it."""
        pools: dict[int, list[list[int]]] = defaultdict(list)
        for excluded, (_, arcs) in sorted(self._entries.items()):
            for tree, arc in arcs:
                amount = graph.flow(arc)
                if amount:
                    pools[tree].append([excluded, amount])
        result: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for index in range(1, 2 * self._size):
            pool = pools.pop(index, None)
            if not pool:
                continue
            if index >= self._size:
                for excluded, amount in pool:
                    result[excluded][index - self._size] += amount
                continue
            needs = [graph.flow(arc) for _, arc in self._child_arcs[index]]
            for (child, _), amounts in zip(self._child_arcs[index], _split(pool, needs), strict=True):
                pools[child].extend([entry[0], amount] for entry, amount in zip(pool, amounts, strict=True) if amount)
        return result


def _split(pool: list[list[int]], needs: list[int]) -> list[list[int]]:
    """Split each entry's units over the children in proportion to the children's flows.

    Spreading every entry over both halves (rather than filling one child first) keeps one
    task's several hub standbys apart, which the dealer would otherwise have to repair.
    """
    remaining = [amount for _, amount in pool]
    shares = []
    for position, need in enumerate(needs):
        total = sum(remaining)
        if position == len(needs) - 1:
            share = list(remaining)
        else:
            share = [amount * need // total if total else 0 for amount in remaining]
            short = need - sum(share)
            for index in sorted(range(len(remaining)), key=lambda i: -(remaining[i] - share[i])):
                if short == 0:
                    break
                if share[index] < remaining[index]:
                    share[index] += 1
                    short -= 1
        remaining = [left - taken for left, taken in zip(remaining, share, strict=True)]
        shares.append(share)
    return shares


class _CaughtUpTasks:
    """Per client, the stateful tasks it is caught up on, in task order, read lazily: the
    partners ``_SlotDealer.take_by_swap`` prefers. Asking every task's rank instead cost a scan
    of the whole group per swap (a fresh group of 4 clients, 2 standbys, 500 x 100 tasks: 500
    swaps, 34 s under a profiler), though a group without state has no such partner at all."""

    def __init__(self, group: Group, ranking: Ranking) -> None:
        self._group, self._ranking = group, ranking
        self._without_state: list[TaskId] | None = None
        self._reported: dict[str, tuple[frozenset[TaskId], list[TaskId]]] = {}

    def of(self, client: str) -> Iterator[TaskId]:
        ranking = self._ranking
        if self._without_state is None:
            # caught up with no state: the whole changelog is within the acceptable lag
            self._without_state = [task for task in self._group.stateful if ranking.absent[task] == 0]
        reported = self._reported.get(client)
        if reported is None:
            holders = ranking.holders
            mine = [task for task in self._group.states[client].lags if client in holders.get(task, ())]
            reported = self._reported[client] = (
                frozenset(mine), sorted(task for task in mine if holders[task][client] == 0))
        every, caught_up = reported
        return heapq.merge((task for task in self._without_state if task not in every), caught_up)


class _SlotDealer:
    """Deals the flow's per-client hub slots to tasks, most remaining slots first.

    The flow counts slots per client but cannot see that a task may not sit twice on one
    client; dealing the largest remaining slot first almost always avoids the conflict, and
    when it cannot, the least loaded allowed client takes the replica.
    """

    def __init__(self, remaining: Mapping[str, int], group: Group, load: dict[str, int]) -> None:
        self._remaining = dict(remaining)
        self._heap = [(-left, client) for client, left in self._remaining.items() if left]
        heapq.heapify(self._heap)
        self._group = group
        self._load = load

    def take(self, excluded: Container[str]) -> str | None:
        """A slot on an allowed client, or None when only excluded clients have slots left."""
        heap = self._heap
        skipped = []
        chosen = None
        while heap:
            client = heap[0][1]
            if client in excluded:
                skipped.append(heapq.heappop(heap))
                continue
            chosen = client
            left = self._remaining[client] - 1
            self._remaining[client] = left
            if left:
                heapq.heapreplace(heap, (-left, client))
            else:
                heapq.heappop(heap)
            break
        for entry in skipped:
            heapq.heappush(heap, entry)
        if chosen is not None:
            self._load[chosen] += 1
        return chosen

    def clients_with_slots(self) -> list[str]:
        return sorted(client for client, left in self._remaining.items() if left)

    def take_slot(self, client: str) -> None:
        """Use one slot of ``client`` for a replica traded onto it."""
        self._remaining[client] -= 1
        self._load[client] += 1
        self._heap = [(-left, c) for c, left in self._remaining.items() if left]
        heapq.heapify(self._heap)

    def take_by_swap(self, task: TaskId, excluded: set[str], chosen: dict[TaskId, list[str]],
                     actives: Mapping[TaskId, str], caught_up: _CaughtUpTasks) -> str:
        """Only excluded clients have slots left: hand one of them to another task's standby.

        Another task ``other`` with a standby on an allowed client d that may sit on the
        slot's client moves there, and ``task`` takes d: loads stay as the flow decided.
        """
        while self._heap:
            _, slot_client = heapq.heappop(self._heap)
            self._remaining[slot_client] -= 1
            if self._remaining[slot_client]:
                heapq.heappush(self._heap, (-self._remaining[slot_client], slot_client))
            # Prefer a partner already caught up on the slot's client: the swap then costs
            # no extra restoration (and keeps the convergence argument of docs/assignor.md).
            for partners in (caught_up.of(slot_client), chosen):
                for other in partners:
                    holders = chosen[other]
                    if other == task or actives[other] == slot_client or slot_client in holders:
                        continue
                    for d in holders:
                        if d not in excluded:
                            holders[holders.index(d)] = slot_client
                            self._load[slot_client] += 1
                            return d
            break
        allowed = [c for c in self._group.clients if c not in excluded]
        fallback = min(allowed, key=lambda c: (Fraction(self._load[c] + 1, self._group.threads[c]), c))
        self._load[fallback] += 1
        return fallback
