"""What a worker declares about its processing topology: subtopologies, partitions, state stores.

The member sends it in JoinGroup (the server builds the group's tasks from it), the lag source
uses it to find each task's logged stores and their changelog partitions, and the KIP-535
metadata uses it to map a store and a key to a task. Pure values, no wire types: the member's
codec converts them to protobuf.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from assignor.model import InvalidInput, StateStore, TaskId


@dataclass(frozen=True, slots=True)
class Subtopology:
    """One subtopology: its tasks are ``id_0 … id_{partitions-1}``, one per input partition."""

    id: int
    source_topics: tuple[str, ...]
    partitions: int
    stores: tuple[StateStore, ...] = ()

    @property
    def stateful(self) -> bool:
        return bool(self.stores)

    def tasks(self) -> tuple[TaskId, ...]:
        return tuple(TaskId(self.id, p) for p in range(self.partitions))


@dataclass(frozen=True, slots=True)
class Topology:
    """A worker's topology. Validated on construction: every error names its field."""

    application_id: str
    subtopologies: tuple[Subtopology, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.application_id, str) or not self.application_id:
            raise InvalidInput("topology.application_id", "expected a non-empty string")
        object.__setattr__(self, "subtopologies", tuple(sorted(self.subtopologies, key=lambda s: s.id)))
        seen_ids: set[int] = set()
        seen_stores: set[str] = set()
        for index, sub in enumerate(self.subtopologies):
            where = f"topology.subtopologies[{index}]"
            if isinstance(sub.id, bool) or not isinstance(sub.id, int) or sub.id < 0:
                raise InvalidInput(f"{where}.id", f"expected a non-negative integer, got {sub.id!r}")
            if sub.id in seen_ids:
                raise InvalidInput(f"{where}.id", f"duplicate subtopology {sub.id}")
            seen_ids.add(sub.id)
            if isinstance(sub.partitions, bool) or not isinstance(sub.partitions, int) or sub.partitions < 1:
                raise InvalidInput(f"{where}.partitions", f"expected an integer >= 1, got {sub.partitions!r}")
            if not sub.source_topics or not all(isinstance(t, str) and t for t in sub.source_topics):
                raise InvalidInput(f"{where}.source_topics", "expected at least one topic name")
            for store in sub.stores:
                if not isinstance(store.name, str) or not store.name:
                    raise InvalidInput(f"{where}.stores", "a store needs a non-empty name")
                if store.name in seen_stores:
                    raise InvalidInput(f"{where}.stores", f"store {store.name!r} appears in two subtopologies")
                seen_stores.add(store.name)

    @classmethod
    def of(cls, application_id: str, subtopologies: Iterable[Subtopology]) -> Topology:
        return cls(application_id, tuple(subtopologies))

    def tasks(self) -> tuple[TaskId, ...]:
        return tuple(task for sub in self.subtopologies for task in sub.tasks())

    def subtopology(self, subtopology_id: int) -> Subtopology | None:
        return next((s for s in self.subtopologies if s.id == subtopology_id), None)

    def store(self, name: str, field_name: str = "store") -> tuple[Subtopology, StateStore]:
        """The subtopology that owns ``name``, and the store; InvalidInput if no such store."""
        for sub in self.subtopologies:
            for store in sub.stores:
                if store.name == name:
                    return sub, store
        known = ", ".join(sorted(s.name for sub in self.subtopologies for s in sub.stores)) or "none"
        raise InvalidInput(field_name, f"unknown store {name!r}; the topology has: {known}")

    def changelog_topic(self, store: StateStore) -> str | None:
        """The changelog of a logged store: ``store.changelog_topic`` if given, else Kafka Streams'
        naming ``<application id>-<store>-changelog``; None if unlogged."""
        if not store.logged:
            return None
        return store.changelog_topic or f"{self.application_id}-{store.name}-changelog"
