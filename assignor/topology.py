"""The processing topology, as the worker declares it and the leader keeps it.

One shape for both sides: a worker builds it from its configuration (``Topology.of``, validated,
every error naming its field) and sends it in JoinGroup; the leader builds it from the wire and
forms the group's tasks from it (``task_specs``). A task is one partition of one subtopology
(Kafka Streams forms one per partition of the widest source topic). Pure values, no wire types:
``server.edge`` and ``client.codec`` convert.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from assignor.model import InvalidInput, StateStore, TaskId, TaskSpec, TopicPartition

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class SourceTopic:
    """``partition_count`` 0 means unknown (INCOMPLETE_SOURCE_TOPIC_METADATA); ``partition_racks``
    are the racks holding a replica of each partition (KIP-925), where known."""

    name: str
    partition_count: int
    partition_racks: tuple[tuple[int, frozenset[str]], ...] = ()
    # An index of partition_racks, so that building a group's tasks is linear in partitions.
    _racks_by_partition: Mapping[int, frozenset[str]] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_racks_by_partition", dict(self.partition_racks))

    def racks(self, partition: int) -> frozenset[str]:
        return self._racks_by_partition.get(partition, frozenset())


@dataclass(frozen=True, slots=True)
class Subtopology:
    """One subtopology: its tasks are ``id_0 … id_{partition_count-1}``."""

    id: int
    source_topics: tuple[SourceTopic, ...]
    state_stores: tuple[StateStore, ...] = ()

    @classmethod
    def of(cls, subtopology_id: int, topics: Iterable[str], partitions: int,
           stores: Iterable[StateStore] = ()) -> Subtopology:
        """A worker's declaration: source topics by name, all with ``partitions`` partitions."""
        return cls(subtopology_id, tuple(SourceTopic(name, partitions) for name in topics), tuple(stores))

    @property
    def stateful(self) -> bool:
        return bool(self.state_stores)

    @property
    def logged(self) -> bool:
        return any(store.logged for store in self.state_stores)

    @property
    def partition_count(self) -> int:
        """Kafka Streams forms one task per partition of the widest source topic."""
        return max((topic.partition_count for topic in self.source_topics), default=0)

    @property
    def metadata_complete(self) -> bool:
        return bool(self.source_topics) and all(topic.partition_count > 0 for topic in self.source_topics)

    def task_ids(self) -> tuple[TaskId, ...]:
        return tuple(TaskId(self.id, p) for p in range(self.partition_count))


@dataclass(frozen=True, slots=True)
class Topology:
    """The application's subtopologies. Every member of a group must agree on its structure (ids,
    source topics, stores and their logging), not on its partition counts.

    ``application_id`` is the worker's Kafka Streams ``application.id``, which names changelog
    topics (``changelog_topic``); the wire does not carry it, so the leader's topologies have "".
    """

    subtopologies: tuple[Subtopology, ...]
    application_id: str = ""

    @classmethod
    def of(cls, application_id: str, subtopologies: Iterable[Subtopology]) -> Topology:
        """A worker's topology, sorted by subtopology id and validated: every error names its field."""
        if not isinstance(application_id, str) or not application_id:
            raise InvalidInput("topology.application_id", "expected a non-empty string")
        subs = tuple(subtopologies)
        seen_ids: set[int] = set()
        seen_stores: dict[str, int] = {}  # store -> the subtopology listing it
        seen_topics: dict[str, int] = {}  # source topic -> the subtopology reading it
        for index, sub in enumerate(subs):
            where = f"topology.subtopologies[{index}]"
            if isinstance(sub.id, bool) or not isinstance(sub.id, int) or sub.id < 0:
                raise InvalidInput(f"{where}.id", f"expected a non-negative integer, got {sub.id!r}")
            if sub.id in seen_ids:
                raise InvalidInput(f"{where}.id", f"duplicate subtopology {sub.id}")
            seen_ids.add(sub.id)
            for topic in sub.source_topics:
                count = topic.partition_count
                if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                    raise InvalidInput(f"{where}.partitions", f"expected an integer >= 1, got {count!r}")
            if not sub.source_topics or not all(isinstance(t.name, str) and t.name for t in sub.source_topics):
                raise InvalidInput(f"{where}.source_topics", "expected at least one topic name")
            for topic in sub.source_topics:
                # Kafka Streams reads a topic in one subtopology (a second source of it is a
                # TopologyException): a partition's records and its task's store go together,
                # which the query routing of KIP-535 relies on (topic -> subtopology).
                if topic.name in seen_topics:
                    raise InvalidInput(f"{where}.source_topics", f"topic {topic.name!r} listed twice"
                                       if seen_topics[topic.name] == index else
                                       f"topic {topic.name!r} is read by two subtopologies")
                seen_topics[topic.name] = index
            for store in sub.state_stores:
                if not isinstance(store.name, str) or not store.name:
                    raise InvalidInput(f"{where}.stores", "a store needs a non-empty name")
                if store.name in seen_stores:
                    raise InvalidInput(f"{where}.stores", f"store {store.name!r} listed twice"
                                       if seen_stores[store.name] == index else
                                       f"store {store.name!r} appears in two subtopologies")
                seen_stores[store.name] = index
        return cls(tuple(sorted(subs, key=lambda s: s.id)), application_id)

    # ---- queries -------------------------------------------------------------------------------

    @property
    def metadata_complete(self) -> bool:
        return all(sub.metadata_complete for sub in self.subtopologies)

    def task_ids(self) -> tuple[TaskId, ...]:
        return tuple(task for sub in self.subtopologies for task in sub.task_ids())

    @property
    def task_count(self) -> int:
        return sum(sub.partition_count for sub in self.subtopologies)

    def its_tasks(self, by_task: Mapping[TaskId, V]) -> dict[TaskId, V]:
        """The entries of ``by_task`` whose task this topology forms (a member's lags: those of
        other tasks mean nothing to the assignment)."""
        counts = {sub.id: sub.partition_count for sub in self.subtopologies}
        return {task: value for task, value in by_task.items() if task.partition < counts.get(task.subtopology, 0)}

    def subtopology(self, subtopology_id: int) -> Subtopology | None:
        for sub in self.subtopologies:
            if sub.id == subtopology_id:
                return sub
        return None

    def store_subtopology(self, store: str) -> Subtopology | None:
        """The subtopology that owns the store ``store``, if any."""
        for sub in self.subtopologies:
            if any(s.name == store for s in sub.state_stores):
                return sub
        return None

    def store(self, name: str, field_name: str = "store") -> tuple[Subtopology, StateStore]:
        """The subtopology that owns ``name``, and the store; InvalidInput if no such store."""
        sub = self.store_subtopology(name)
        if sub is None:
            known = ", ".join(sorted(s.name for sub in self.subtopologies for s in sub.state_stores)) or "none"
            raise InvalidInput(field_name, f"unknown store {name!r}; the topology has: {known}")
        return sub, next(s for s in sub.state_stores if s.name == name)

    def changelog_topic(self, store: StateStore) -> str | None:
        """The changelog of a logged store: ``store.changelog_topic`` if given, else Kafka Streams'
        naming ``<application id>-<store>-changelog``; None if unlogged."""
        if not store.logged:
            return None
        return store.changelog_topic or f"{self.application_id}-{store.name}-changelog"

    def task_partitions(self, task: TaskId) -> tuple[TopicPartition, ...]:
        """The input partitions of ``task``, with their racks (KIP-925)."""
        sub = self.subtopology(task.subtopology)
        if sub is None:
            return ()
        return tuple(
            TopicPartition(t.name, task.partition, t.racks(task.partition))
            for t in sub.source_topics
            if t.partition_count > task.partition
        )

    def task_specs(self, end_offsets: Mapping[TaskId, int]) -> tuple[TaskSpec, ...]:
        """The assignor's tasks. A task is stateful for the assignor when it has a logged store:
        a standby replicates a store by reading its changelog, so a task whose stores all have
        logging disabled has nothing a standby could hold (one would answer interactive
        queries, KIP-535, from an empty store), and every client is equally caught up on it
        (KIP-441 revision, "State with logging disabled"): it is placed as a stateless task,
        as Kafka Streams does (its ``ChangelogTopics.statefulTaskIds``). A stateful task's
        changelog size is the largest end offset any member reported, else unbounded."""
        specs = []
        for sub in self.subtopologies:
            stateful = sub.logged
            for p in range(sub.partition_count):
                task = TaskId(sub.id, p)
                specs.append(TaskSpec(task, stateful, end_offsets.get(task) if stateful else None,
                                      self.task_partitions(task)))
        return tuple(specs)

    # ---- the group's agreement on one topology (the leader's rules) ----------------------------

    def structure(self) -> tuple:
        return tuple(
            (sub.id, tuple(t.name for t in sub.source_topics), tuple((s.name, s.logged) for s in sub.state_stores))
            for sub in self.subtopologies
        )

    def structure_difference(self, other: Topology) -> str | None:
        """The first structural difference, worded for an INCONSISTENT_GROUP_PROTOCOL message."""
        mine = {sub.id: sub for sub in self.subtopologies}
        theirs = {sub.id: sub for sub in other.subtopologies}
        if sorted(mine) != sorted(theirs):
            return f"subtopology ids {sorted(theirs)} differ from the group's {sorted(mine)}"
        for sub_id in sorted(mine):
            a, b = mine[sub_id], theirs[sub_id]
            if [t.name for t in a.source_topics] != [t.name for t in b.source_topics]:
                return f"subtopology {sub_id}: source topics {[t.name for t in b.source_topics]} differ from the group's {[t.name for t in a.source_topics]}"
            if a.state_stores != b.state_stores:
                return f"subtopology {sub_id}: state stores differ from the group's"
        return None

    def grown_to(self, counts: Mapping[str, int]) -> Topology:
        """This topology with each source topic at least as wide as ``counts`` says (the group's
        counts a member's assignment carries, for KIP-535 key partitioning); itself when none
        grows."""
        if not any(counts.get(t.name, 0) > t.partition_count for sub in self.subtopologies for t in sub.source_topics):
            return self
        subs = tuple(Subtopology(sub.id, tuple(replace(t, partition_count=max(t.partition_count, counts.get(t.name, 0)))
                                             for t in sub.source_topics), sub.state_stores)
                     for sub in self.subtopologies)
        return Topology(subs, self.application_id)

    def merged(self, other: Topology) -> Topology:
        """Same structure, the larger partition count of each topic (partitions are only added),
        and per partition every rack either report names. Both are order-free, so a group's
        topology, and its assignment, do not depend on which member's report came last (taking
        the newer report's racks did: two members whose metadata differed got other actives
        when they joined the other way round, and a report listing fewer partitions dropped the
        others' racks). Racks only accumulate while the group lives, like partitions: a rack
        that no longer holds a replica counts until the group next starts empty."""
        theirs = {(sub.id, t.name): t for sub in other.subtopologies for t in sub.source_topics}
        subs = []
        for sub in self.subtopologies:
            topics = []
            for topic in sub.source_topics:
                new = theirs.get((sub.id, topic.name), topic)
                racks = dict(topic.partition_racks)
                for partition, named in new.partition_racks:
                    racks[partition] = racks.get(partition, frozenset()) | named
                topics.append(
                    SourceTopic(topic.name, max(topic.partition_count, new.partition_count), tuple(sorted(racks.items())))
                )
            subs.append(Subtopology(sub.id, tuple(topics), sub.state_stores))
        return Topology(tuple(subs), self.application_id)
