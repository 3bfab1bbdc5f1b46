"""The sidecar's pieces without a process: its lag source and the topology file."""

from __future__ import annotations

import asyncio

import pytest

from assignor.cluster import MemberAssignment
from assignor.lag import Lag
from assignor.model import LATEST, UNKNOWN, InvalidInput, StateStore, TaskId
from assignor.topology import Subtopology, Topology
from client.assignment import EMPTY_ASSIGNMENT, diff
from client.lags import LagInfo
from client.sidecar import SidecarLagSource, SidecarServicer, lag_report_from_proto, parse_member_document
from client.state import StateDirectory
from remote_leader.sidecar.v1 import sidecar_pb2 as spb
from remote_leader.v1 import assignment_pb2 as apb

TOPOLOGY = Topology.of("app", (Subtopology.of(0, ("orders",), 2, (StateStore("counts"),)),))


def test_with_a_state_dir_the_sidecar_computes_lags_from_checkpoints(tmp_path):
    state = StateDirectory(tmp_path)
    state.write_checkpoint(TaskId(0, 0), {("app-counts-changelog", 0): 900})
    state.write_checkpoint(TaskId(0, 1), {("app-counts-changelog", 1): 10})
    source = SidecarLagSource(TOPOLOGY, state)
    assert source.task_lags() == {TaskId(0, 0): UNKNOWN, TaskId(0, 1): UNKNOWN}  # no end offsets yet
    source.update({}, {}, {("app-counts-changelog", 0): 1000, ("app-counts-changelog", 1): 50}, frozenset({TaskId(0, 1)}))
    assert source.task_lags() == {TaskId(0, 0): Lag.behind(100), TaskId(0, 1): LATEST}
    assert source.store_partition_lags() == {"counts": {0: LagInfo(900, 1000), 1: LagInfo(50, 50)}}


def test_reported_task_lags_win(tmp_path):
    state = StateDirectory(tmp_path)
    state.write_checkpoint(TaskId(0, 0), {("app-counts-changelog", 0): 900})
    source = SidecarLagSource(TOPOLOGY, state)
    source.update({TaskId(0, 0): 7}, {}, {("app-counts-changelog", 0): 1000}, frozenset())
    assert source.task_lags() == {TaskId(0, 0): Lag.behind(7)}


def test_without_a_state_dir_only_reports_count():
    source = SidecarLagSource(TOPOLOGY)
    assert source.task_lags() == {}
    source.update({TaskId(0, 1): 3}, {}, {}, frozenset())
    assert source.task_lags() == {TaskId(0, 1): Lag.behind(3)}


def test_member_document_with_config():
    topology, config = parse_member_document({
        "application_id": "app",
        "subtopologies": [{"id": 0, "source_topics": ["t"], "partitions": 3,
                           "stores": ["a", {"name": "b", "logged": False}, {"name": "c", "changelog_topic": "c-log"}]}],
        "config": {"num_standby_replicas": 2},
    })
    assert [s.logged for s in topology.subtopologies[0].state_stores] == [True, False, True]
    assert topology.changelog_topic(topology.subtopologies[0].state_stores[2]) == "c-log"
    assert config.num_standby_replicas == 2


def _sub(**fields) -> dict:
    return {"application_id": "a", "subtopologies": [{"id": 0, "source_topics": ["t"], "partitions": 1, **fields}]}


@pytest.mark.parametrize(("document", "field"), [
    pytest.param(_sub(id=5_000_000_000), "subtopologies[0].id", id="id-beyond-int32"),
    pytest.param(_sub(partitions=5_000_000_000), "subtopologies[0].partitions", id="partitions-beyond-int32"),
    pytest.param(_sub(stores="counts"), "subtopologies[0].stores", id="stores-a-string"),
    pytest.param(_sub(stores=[{"name": "s", "logged": "false"}]), "subtopologies[0].stores[0].logged",
                 id="logged-a-string"),
    pytest.param(_sub(partitons=5), "subtopologies[0].partitons", id="unknown-subtopology-key"),
])
def test_sloppy_member_documents_are_refused_naming_the_field(document, field):
    with pytest.raises(InvalidInput) as error:
        parse_member_document(document)
    assert error.value.field == field


@pytest.mark.parametrize(("document", "field"), [
    pytest.param([], "(topology)", id="not-an-object"),
    pytest.param({"application_id": "a", "subtopologies": [], "extra": 1}, "extra", id="unknown-key"),
    pytest.param({"application_id": "a"}, "subtopologies", id="no-subtopologies"),
    pytest.param({"application_id": "a", "subtopologies": [{"id": 0, "partitions": 1}]}, "subtopologies[0].source_topics",
                 id="no-source-topics"),
    pytest.param({"application_id": "a", "subtopologies": [{"id": 0, "source_topics": ["t"], "partitions": 1,
                                                            "stores": [{"nme": "x"}]}]}, "subtopologies[0].stores[0].nme",
                 id="misspelt-store-key"),
    pytest.param({"application_id": "a", "subtopologies": [{"id": 0, "source_topics": ["t"], "partitions": 1,
                                                            "stores": [7]}]}, "subtopologies[0].stores[0]",
                 id="store-not-a-name"),
    pytest.param({"application_id": "a", "subtopologies": [{"id": 0, "source_topics": ["t"], "partitions": 1,
                                                            "stores": [{"name": "x", "changelog_topic": 7}]}]},
                 "subtopologies[0].stores[0].changelog_topic", id="changelog-topic-not-a-name"),
    # a worker audit's find: passed the local checks, then the sidecar exited 1 at the server
    pytest.param({"application_id": "a", "subtopologies": []}, "subtopologies", id="empty-subtopologies"),
    pytest.param({"application_id": "a", "subtopologies": [{"id": 0, "source_topics": ["t"], "partitions": 1}],
                  "config": {"num_standbys": 1}}, "config.num_standbys", id="unknown-config-key"),
    pytest.param({"application_id": "a", "subtopologies": [{"id": 0, "source_topics": ["t"], "partitions": 1}],
                  "config": {"num_standby_replicas": -1}}, "config.num_standby_replicas", id="bad-config-value"),
])
def test_bad_member_documents_name_the_field(document, field):
    with pytest.raises(InvalidInput) as error:
        parse_member_document(document)
    assert error.value.field == field


def test_a_store_listed_twice_in_one_subtopology_is_said_so():
    """A worker audit's find: it was said to appear in two subtopologies."""
    document = {"application_id": "a", "subtopologies": [{"id": 0, "source_topics": ["t"], "partitions": 1,
                                                          "stores": ["x", "x"]}]}
    with pytest.raises(InvalidInput, match="store 'x' listed twice"):
        parse_member_document(document)


@pytest.mark.parametrize(("topics", "message"), [
    ([["orders"], ["orders"]], "topic 'orders' is read by two subtopologies"),
    ([["orders", "orders"]], "topic 'orders' listed twice"),
])
def test_a_topic_is_read_by_one_subtopology(topics, message):
    """Kafka Streams refuses a second source of a topic: a helper's audit found two
    subtopologies reading one topic accepted, and queries routed to the wrong hosts (the
    routing maps a topic to its subtopology)."""
    document = {"application_id": "a", "subtopologies": [
        {"id": index, "source_topics": names, "partitions": 3} for index, names in enumerate(topics)]}
    with pytest.raises(InvalidInput, match=message) as error:
        parse_member_document(document)
    assert error.value.field == f"topology.subtopologies[{len(topics) - 1}].source_topics"


_COUNTS = Topology.of("a", [Subtopology.of(0, ["orders"], 4, stores=(StateStore("counts"),))])


def _lag(subtopology: int, partition: int, lag: int = 0) -> apb.TaskLag:
    return apb.TaskLag(task=apb.TaskId(subtopology=subtopology, partition=partition), lag=lag)


@pytest.mark.parametrize(("request_", "field"), [
    pytest.param(spb.ReportLagsRequest(task_lags=[_lag(0, -1)]), "task_lags[0].task", id="negative-partition"),
    pytest.param(spb.ReportLagsRequest(task_lags=[_lag(-3, 0)]), "task_lags[0].task", id="negative-subtopology"),
    pytest.param(spb.ReportLagsRequest(task_lags=[apb.TaskLag(lag=5)]), "task_lags[0].task", id="no-task"),
    pytest.param(spb.ReportLagsRequest(task_lags=[_lag(0, 1), _lag(0, 1, 3)]), "task_lags[1].task", id="duplicate-task"),
    pytest.param(spb.ReportLagsRequest(task_lags=[_lag(0, 1, -7)]), "task_lags[0].lag", id="bad-lag"),
    pytest.param(spb.ReportLagsRequest(store_lags=[spb.StorePartitionLag(store="nope", partition=0)]), "store_lags[0].store",
                 id="unknown-store"),
    pytest.param(spb.ReportLagsRequest(store_lags=[spb.StorePartitionLag(store="counts", partition=-1)]), "store_lags[0].partition",
                 id="negative-store-partition"),
    pytest.param(spb.ReportLagsRequest(store_lags=[spb.StorePartitionLag(store="counts", partition=0, current_offset_position=-5)]),
                 "store_lags[0].current_offset_position", id="negative-position"),
    pytest.param(spb.ReportLagsRequest(store_lags=[spb.StorePartitionLag(store="counts", partition=0),
                                                   spb.StorePartitionLag(store="counts", partition=0)]),
                 "store_lags[1].partition", id="duplicate-store-partition"),
    pytest.param(spb.ReportLagsRequest(running_actives=[apb.TaskId(subtopology=0, partition=-1)]), "running_actives[0]",
                 id="negative-running-active"),
])
def test_a_bad_lag_report_names_the_field(request_, field):
    """A helper's audit: a task 0_-1 was accepted here, refused by the leader at the next
    JoinGroup, and the sidecar exited 1; other bad fields were taken silently."""
    with pytest.raises(InvalidInput) as error:
        lag_report_from_proto(request_, _COUNTS)
    assert error.value.field == field


def test_a_good_lag_report_becomes_domain_values():
    request_ = spb.ReportLagsRequest(
        task_lags=[_lag(0, 1, 40), _lag(0, 2, -2)],
        store_lags=[spb.StorePartitionLag(store="counts", partition=1, current_offset_position=60, end_offset_position=100)],
        running_actives=[apb.TaskId(subtopology=0, partition=3)])
    task_lags, store_lags, end_offsets, running = lag_report_from_proto(request_, _COUNTS)
    assert task_lags == {TaskId(0, 1): Lag.behind(40), TaskId(0, 2): UNKNOWN}
    assert store_lags == {"counts": {1: LagInfo(60, 100)}}
    assert end_offsets == {} and running == {TaskId(0, 3)}


# ---- acknowledgements: the lock waits for each acknowledging watcher (docs/sidecar.md) ----------


def _servicer(apply_timeout_s: float = 5.0) -> SidecarServicer:
    return SidecarServicer(None, SidecarLagSource(_COUNTS), apply_timeout_s=apply_timeout_s)  # type: ignore[arg-type]


def _assignment(generation: int):
    return diff(EMPTY_ASSIGNMENT, MemberAssignment(generation, active=(TaskId(0, 0),)))


async def _applied(servicer: SidecarServicer, generation: int) -> asyncio.Task:
    applying = asyncio.create_task(servicer.on_assignment(_assignment(generation)))
    await asyncio.sleep(0)
    return applying


async def test_each_named_watcher_acknowledges_for_itself():
    """A helper's audit: a watcher acknowledging twice settled another watcher's acknowledgement
    too, and the lock was released before that one applied anything."""
    servicer = _servicer()
    servicer.acks.join(("named", "a"))
    servicer.acks.join(("named", "b"))
    applying = await _applied(servicer, 4)
    assert servicer.acks.settle(4, "a") is True
    assert servicer.acks.settle(4, "a") is False  # a owes nothing more
    await asyncio.sleep(0.05)
    assert not applying.done()  # still waiting for b
    assert servicer.acks.settle(4, "b") is True
    await asyncio.wait_for(applying, 1)


async def test_a_named_watcher_that_reconnects_mid_apply_still_owes_its_acknowledgement():
    """Its stream closed while it applied (a reconnect): the lock was released at once, and its
    acknowledgement on the new stream was refused."""
    servicer = _servicer()
    servicer.acks.join(("named", "a"))
    applying = await _applied(servicer, 4)
    servicer.acks.leave(("named", "a"))
    await asyncio.sleep(0.05)
    assert not applying.done()
    servicer.acks.join(("named", "a"))
    assert servicer.acks.settle(4, "a") is True
    await asyncio.wait_for(applying, 1)


async def test_an_unnamed_watcher_that_leaves_owes_nothing():
    servicer = _servicer()
    watcher = object()
    servicer.acks.join(watcher)
    applying = await _applied(servicer, 4)
    servicer.acks.leave(watcher)
    await asyncio.wait_for(applying, 1)
    assert servicer.acks.settle(4, "") is False


async def test_an_acknowledgement_after_the_apply_timeout_is_refused():
    """Past ``--apply-timeout-ms`` the lock is released; a late acknowledgement of that
    generation answered accepted=true although nothing awaited it any more."""
    servicer = _servicer(apply_timeout_s=0.05)
    servicer.acks.join(object())
    await asyncio.wait_for(await _applied(servicer, 4), 1)
    assert servicer.acks.settle(4, "") is False
