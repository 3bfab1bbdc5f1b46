"""The default lag source: checkpoints against changelog end offsets (KIP-441 lag rules)."""

from __future__ import annotations

import pytest

from assignor.lag import Lag
from assignor.model import LATEST, UNKNOWN, InvalidInput, StateStore, TaskId
from assignor.topology import Subtopology, Topology
from client.lags import MAX_LAGS_AGE_MS, CheckpointLagSource, LagInfo, StaticLagSource, lags_age_ms
from client.state import StateDirectory, parse_checkpoint, render_checkpoint

TOPOLOGY = Topology.of("app", (
    Subtopology.of(0, ("orders",), 3, (StateStore("counts"), StateStore("totals", changelog_topic="totals-log"))),
    Subtopology.of(1, ("clicks",), 2, (StateStore("cache", logged=False),)),
    Subtopology.of(2, ("mixed",), 1, (StateStore("logged"), StateStore("scratch", logged=False))),
    Subtopology.of(3, ("raw",), 2),  # stateless
))
END_OFFSETS = {
    ("app-counts-changelog", 0): 1000, ("totals-log", 0): 500,
    ("app-counts-changelog", 1): 1000, ("totals-log", 1): 500,
    ("app-counts-changelog", 2): 1000,  # totals-log 2 unknown to the worker
    ("app-logged-changelog", 0): 300,
}


@pytest.fixture
def directory(tmp_path):
    return StateDirectory(tmp_path / "state")


def source(directory, running=()):
    return CheckpointLagSource(TOPOLOGY, directory, END_OFFSETS, running_actives=lambda: running)


def test_lag_is_summed_over_logged_stores(directory):
    directory.write_checkpoint(TaskId(0, 0), {("app-counts-changelog", 0): 900, ("totals-log", 0): 450})
    assert source(directory).task_lags() == {TaskId(0, 0): Lag.behind((1000 - 900) + (500 - 450))}


def test_a_store_missing_from_the_checkpoint_counts_from_zero(directory):
    directory.write_checkpoint(TaskId(0, 1), {("app-counts-changelog", 1): 1000})
    assert source(directory).task_lags() == {TaskId(0, 1): Lag.behind(500)}


def test_a_checkpoint_beyond_the_changelog_end_counts_the_whole_changelog(directory):
    """A worker audit's find: a checkpoint past the end (the changelog deleted and recreated)
    was read as caught up, lag 0, and KIP-535 routed queries to that store. Its state is
    rebuilt from scratch: the whole changelog behind (as the server counts offset sums)."""
    directory.write_checkpoint(TaskId(0, 0), {("app-counts-changelog", 0): 5_000, ("totals-log", 0): 450})
    lags = source(directory)
    assert lags.task_lags() == {TaskId(0, 0): Lag.behind(1000 + (500 - 450))}
    assert lags.store_partition_lags()["counts"] == {0: LagInfo(0, 1000)}


def test_running_active_reports_latest(directory):
    directory.write_checkpoint(TaskId(0, 0), {("app-counts-changelog", 0): 10, ("totals-log", 0): 10})
    assert source(directory, running=[TaskId(0, 0)]).task_lags() == {TaskId(0, 0): LATEST}


def test_non_logged_stores_contribute_zero(directory):
    # KIP-441 revision, "State with logging disabled"
    directory.create(TaskId(1, 0))
    directory.write_checkpoint(TaskId(2, 0), {("app-logged-changelog", 0): 100})
    assert source(directory).task_lags() == {TaskId(1, 0): Lag.behind(0), TaskId(2, 0): Lag.behind(200)}


@pytest.mark.parametrize(("task", "setup"), [
    pytest.param(TaskId(0, 0), lambda d: d.create(TaskId(0, 0)), id="no-checkpoint-yet"),
    pytest.param(TaskId(0, 2), lambda d: d.write_checkpoint(TaskId(0, 2), {("app-counts-changelog", 2): 5}),
                 id="end-offset-unknown"),
])
def test_state_without_a_readable_position_is_unknown(directory, task, setup):
    setup(directory)
    assert source(directory).task_lags() == {task: UNKNOWN}


def test_tasks_without_state_or_outside_the_topology_are_absent(directory):
    directory.create(TaskId(3, 0))  # stateless subtopology
    directory.create(TaskId(9, 0))  # not in the topology
    directory.create(TaskId(0, 7))  # beyond the partition count
    (directory.root / "not-a-task").mkdir()
    assert source(directory).task_lags() == {}


def test_end_offsets_callable_is_asked_only_for_local_changelogs(directory):
    asked = []

    def end_offsets(wanted):
        asked.append(wanted)
        return {cp: END_OFFSETS[cp] for cp in wanted if cp in END_OFFSETS}

    directory.write_checkpoint(TaskId(2, 0), {("app-logged-changelog", 0): 300})
    assert CheckpointLagSource(TOPOLOGY, directory, end_offsets).task_lags() == {TaskId(2, 0): Lag.behind(0)}
    assert asked == [frozenset({("app-logged-changelog", 0)})]


def test_store_partition_lags_for_kip535(directory):
    directory.write_checkpoint(TaskId(0, 0), {("app-counts-changelog", 0): 900, ("totals-log", 0): 450})
    directory.write_checkpoint(TaskId(0, 1), {("app-counts-changelog", 1): 1, ("totals-log", 1): 2})
    lags = source(directory, running=[TaskId(0, 1)]).store_partition_lags()
    assert lags == {
        "counts": {0: LagInfo(900, 1000), 1: LagInfo(1000, 1000)},
        "totals": {0: LagInfo(450, 500), 1: LagInfo(500, 500)},
    }
    assert lags["counts"][0].offset_lag == 100


def test_checkpoint_file_round_trips_in_kafka_format(directory):
    offsets = {("t", 1): 7, ("a", 0): 3}
    assert render_checkpoint(offsets) == "0\n2\na 0 3\nt 1 7\n"
    assert parse_checkpoint(render_checkpoint(offsets)) == offsets


@pytest.mark.parametrize("text", ["", "1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt x 1\n", "0\nn\n"])
def test_corrupt_checkpoint_names_the_file(text):
    with pytest.raises(InvalidInput) as error:
        parse_checkpoint(text, "/s/0_0/.checkpoint")
    assert error.value.field.startswith("/s/0_0/.checkpoint")


@pytest.mark.parametrize(("subtopologies", "field"), [
    pytest.param((Subtopology.of(0, ("t",), 0),), "topology.subtopologies[0].partitions", id="zero-partitions"),
    pytest.param((Subtopology.of(0, ("t",), 1), Subtopology.of(0, ("u",), 1)), "topology.subtopologies[1].id",
                 id="duplicate-subtopology"),
    pytest.param((Subtopology.of(0, (), 1),), "topology.subtopologies[0].source_topics", id="no-source-topic"),
    pytest.param((Subtopology.of(0, ("t",), 1, (StateStore("s"),)), Subtopology.of(1, ("u",), 1, (StateStore("s"),))),
                 "topology.subtopologies[1].stores", id="store-in-two-subtopologies"),
])
def test_topology_validation_names_the_field(subtopologies, field):
    with pytest.raises(InvalidInput) as error:
        Topology.of("app", subtopologies)
    assert error.value.field == field


def test_a_corrupt_checkpoint_reports_unknown_not_an_error(directory):
    directory.create(TaskId(2, 0))
    (directory.task_dir(TaskId(2, 0)) / ".checkpoint").write_text("7\ngarbage\n")
    assert source(directory).task_lags() == {TaskId(2, 0): UNKNOWN}


class _AgedSource:
    def __init__(self, age) -> None:
        self.age = age

    def lags_age_ms(self):
        return self.age


@pytest.mark.parametrize("age, sent", [
    pytest.param(1_234.7, 1_234, id="whole-milliseconds"),
    pytest.param(-5, 0, id="negative-is-now"),
    pytest.param(2**63, MAX_LAGS_AGE_MS, id="beyond-int64-clamped"),  # an audit's find: it stopped the member
])
def test_a_lag_source_s_age_is_sent_within_the_wire_s_range(age, sent):
    assert lags_age_ms(_AgedSource(age)) == sent
    assert lags_age_ms(StaticLagSource()) == 0  # a source that measures when asked


def test_an_age_that_is_not_a_number_is_an_error_for_the_member_to_contain():
    with pytest.raises(ValueError):
        lags_age_ms(_AgedSource(float("nan")))


@pytest.mark.parametrize("offset", [-4, -9_223_372_036_854_775_808])
def test_a_negative_checkpoint_offset_is_no_position(directory, offset):
    """Kafka writes -4 for an offset it does not know, and no offset is below 0: such an entry
    is no position (restored from the start, as Kafka Streams sums it). An audit's find: -4 was
    read as a position, 104 behind an end of 100, and the smallest long made a lag beyond an
    int64 that stopped the member."""
    directory.write_checkpoint(TaskId(0, 1), {("app-counts-changelog", 1): offset, ("totals-log", 1): 500})
    assert source(directory).task_lags() == {TaskId(0, 1): Lag.behind(1000)}
    assert source(directory).store_partition_lags()["counts"] == {1: LagInfo(0, 1000)}
