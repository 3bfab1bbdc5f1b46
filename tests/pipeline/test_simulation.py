"""The simulator in plain Python: KIP-441 scaling scenarios with hand-derived outcomes."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import pytest

from assignor.model import TaskId
from pipeline.grid import expand_grid
from pipeline.simulation import (
    GroupShape,
    InvalidSpec,
    Rates,
    RunSpec,
    ScalingEvent,
    SimConfig,
    Timing,
    run_rows,
    run_seed,
)
from tests.pipeline.records import client, record, scale_out_story

# 6 clients on 3 racks, 12 stateful tasks, standbys in sync and a changelog that does not grow,
# so every number below can be worked out by hand.
QUIET = GroupShape(clients=6, racks=3, subtopologies=1, partitions=12, standbys=2, lag="in_sync",
                   restore_rate=10_000, append_rate=0, changelog_offsets=1_000_000)


def run(event: str, shape: GroupShape = QUIET, **config) -> tuple[dict, list[dict]]:
    return run_rows(RunSpec("r", 7, ScalingEvent.parse(event), SimConfig(**config), shape=shape))


def test_lost_rack_costs_exactly_the_session_timeout_when_standbys_are_caught_up():
    # Rack r0 holds c0000 and c0003, 2 actives each; with 2 standbys per task a caught-up
    # replica survives, so each of the 4 tasks is down from the crash to the expiry (45 s).
    row, steps = run("lose_rack")
    assert row["downtime_task_s"] == pytest.approx(4 * 45.0)
    assert steps[0]["trigger"] == "session_expired" and steps[0]["time_s"] == 45.0
    assert row["clients_after"] == 4 and row["settled"] and row["balanced"]


def test_scale_out_moves_work_only_after_warm_up_with_no_downtime():
    # KIP-441 "Scaling Out": new instances warm up first; the interval probe (600 s) comes long
    # after restoration (1M offsets at 10k/s = 100 s), so nothing restores as active.
    row, steps = run("scale_out:3", early_probe=False, max_warmup_replicas=2)
    assert row["downtime_task_s"] == 0.0
    assert row["settled"] and row["balanced"] and row["rebalances"] >= 2
    assert row["peak_warmups"] <= 2
    assert [s["time_s"] for s in steps] == [600.0 * i for i in range(len(steps))]
    assert row["settle_time_s"] == 600.0 * (len(steps) - 1)


def test_early_probe_settles_sooner_but_never_before_the_minimum_interval():
    interval, early = run("scale_out:3", early_probe=False)[0], run("scale_out:3", min_probe_interval_s=60)
    row, steps = early
    assert row["settle_time_s"] < interval["settle_time_s"]
    probes = [s for s in steps if s["trigger"] == "early_probe"]
    assert probes
    for before, after in zip(steps, steps[1:], strict=False):
        # the simulator's clock is integer milliseconds; compare there, not in float seconds
        # (286.092 - 226.092 is 59.99999999999997 in binary floating point)
        assert round(after["time_s"] * 1000) - round(before["time_s"] * 1000) >= 60_000


def test_sticky_moves_at_once_and_pays_in_downtime():
    row, steps = run("scale_out:3", assignor="sticky")
    assert row["rebalances"] == 1 and steps[0]["moved"] == row["tasks_moved"] > 0
    # each moved active restores its whole changelog (0.5-1.5 x 1M offsets at 10k offsets/s)
    assert 50.0 * row["tasks_moved"] <= row["downtime_task_s"] <= 150.0 * row["tasks_moved"]


def test_rolling_restart_leaves_and_rejoins_every_member_once():
    row, steps = run("rolling_restart")
    triggers = [s["trigger"] for s in steps]
    assert triggers.count("member_left") == 6 and triggers.count("member_rejoined") == 6
    assert row["clients_after"] == row["clients_before"] == 6 and row["settled"]


def test_same_spec_same_rows_and_seeds_do_not_depend_on_hash_salt():
    lagging = replace(QUIET, lag="uniform:0:50000")
    assert run("scale_in:2", lagging) == run("scale_in:2", lagging)
    code = "from pipeline.simulation import run_seed; print(run_seed('a', 1, ('x', 2)))"
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": os.getcwd()}
    other = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert int(other.stdout) == run_seed("a", 1, ("x", 2))


def test_a_logged_group_is_a_starting_point():
    start = {key: scale_out_story()[-1][key] for key in ("input", "output")}
    rates = Rates(restore_rate=1000, append_rate=0)
    row, _ = run_rows(RunSpec("r", 1, ScalingEvent("scale_out", 1), SimConfig(), start=start, rates=rates))
    assert row["error"] is None and row["clients_before"] == 1 and row["clients_after"] == 2 and row["settled"]
    failed, steps = run_rows(RunSpec("r", 1, ScalingEvent("scale_in", 1), SimConfig(), start=start, rates=rates))
    assert failed["error"].startswith("events:") and steps == []


def _unsized_start(lags_of_a: dict) -> dict:
    """Two members, a (0_0, 0_1) and b (0_2, 0_3), no standbys, and tasks without
    ``changelog_offsets``, as the server logs them; a scale-in removes b."""
    latest = {"0_0": "latest", "0_1": "latest"}
    logged = record("orders", 7, 0, "member_joined",
                    [client("a", "r1", active=["0_0", "0_1"], lags={**latest, **lags_of_a}),
                     client("b", "r1", active=["0_2", "0_3"], lags={"0_2": "latest", "0_3": "latest"})],
                    {"a": {"active": ["0_0", "0_1"]}, "b": {"active": ["0_2", "0_3"]}}, probing=False)
    for task in logged["input"]["tasks"]:
        del task["changelog_offsets"]
    return {"input": logged["input"], "output": logged["output"]}


@pytest.mark.parametrize(
    ("lags_of_a", "restored"),
    [
        pytest.param({}, 2 * 1_000_000, id="no-state"),  # group.changelog_offsets' default, each
        pytest.param({"0_2": "unknown", "0_3": "unknown"}, 2 * 1_000_000, id="unknown"),
        pytest.param({"0_2": 500, "0_3": 3_000_000}, 500 + 3_000_000, id="numeric"),  # 0_3: longer than assumed
    ],
)
def test_a_logged_start_without_changelog_sizes_never_restores_for_free(lags_of_a, restored):
    """The server logs no changelog_offsets: a fresh or "unknown" replica restores the grid's
    group.changelog_offsets, at least the largest lag reported for the task, never 0."""
    rates = Rates(restore_rate=10_000, append_rate=0)
    row, _ = run_rows(RunSpec("r", 1, ScalingEvent("scale_in", 1), SimConfig(), start=_unsized_start(lags_of_a),
                              rates=rates))
    assert row["error"] is None and row["settled"]
    assert row["offsets_restored"] == pytest.approx(restored)
    assert row["downtime_task_s"] == pytest.approx(restored / 10_000)
    assert row["g_changelog_offsets"] == 1_000_000


def test_a_run_that_settles_on_its_last_allowed_rebalance_is_settled():
    shape = GroupShape(clients=3, racks=1, subtopologies=1, partitions=3, standbys=0, changelog_offsets=100_000)
    one = Timing(max_rebalances=1)
    row, _ = run_rows(RunSpec("r", 7, ScalingEvent("scale_in", 1), SimConfig(), one, shape=shape))
    assert row["rebalances"] == 1 and row["settled"] and row["settle_time_s"] is not None
    needs_more, _ = run_rows(RunSpec("r", 7, ScalingEvent("scale_out", 3), SimConfig(early_probe=False), one,
                                     shape=QUIET))
    assert needs_more["rebalances"] == 1 and not needs_more["settled"]


def test_a_run_still_restoring_at_max_simulated_s_is_not_settled():
    """1e9 offsets at 1,000/s is 11 days of restoring: past a 60 s bound, not "settled at 1e6 s"."""
    shape = GroupShape(clients=3, racks=1, subtopologies=1, partitions=3, standbys=0,
                       changelog_offsets=1_000_000_000, restore_rate=1000, append_rate=1)
    row, _ = run_rows(RunSpec("r", 7, ScalingEvent("scale_in", 1), SimConfig(), Timing(max_simulated_s=60),
                              shape=shape))
    assert not row["settled"] and row["settle_time_s"] is None
    assert row["simulated_s"] == 60.0


# 4 clients on 2 racks, standbys lagging: a scale-in's first rebalance leaves 3 actives restoring
# and needs a probing rebalance (no early probe: at 600 s); every restoration ends before 300 s.
LAGGING = GroupShape(clients=4, racks=2, subtopologies=2, partitions=6, standbys=1, lag="uniform:50000:200000")


def _lagging_scale_in(timing: Timing) -> tuple[dict, list[dict]]:
    return run_rows(RunSpec("r", run_seed(4, "scale_in:1"), ScalingEvent("scale_in", 1), SimConfig(early_probe=False),
                            timing, shape=LAGGING))


def test_a_run_given_up_at_max_simulated_s_is_simulated_up_to_the_bound():
    """Unsettled at 300 s (the probe is due at 600 s), the run still restores and counts its
    downtime until 300 s: the same task·s and offsets as the unbounded run, whose restoration
    ends before then; the clock stopped at the last rebalance (t=0) counted none."""
    full, _ = _lagging_scale_in(Timing())
    row, steps = _lagging_scale_in(Timing(max_simulated_s=300))
    assert steps[0]["tasks_down"] > 0 and full["settled"] and full["downtime_task_s"] > 0
    assert not row["settled"] and row["settle_time_s"] is None and row["simulated_s"] == 300.0
    assert row["downtime_task_s"] == pytest.approx(full["downtime_task_s"])
    assert row["offsets_restored"] == pytest.approx(full["offsets_restored"])


def test_a_run_out_of_rebalances_is_simulated_up_to_the_rebalance_it_would_need():
    """max_rebalances=1: the run stops where its second rebalance (the probing rebalance at
    600 s) would be, having restored and counted downtime until then."""
    full, _ = _lagging_scale_in(Timing())
    row, _ = _lagging_scale_in(Timing(max_rebalances=1))
    assert row["rebalances"] == 1 and not row["settled"] and row["simulated_s"] == 600.0
    assert row["downtime_task_s"] == pytest.approx(full["downtime_task_s"])
    assert row["offsets_restored"] == pytest.approx(full["offsets_restored"])


@pytest.mark.parametrize("lag", ["in_sync", "uniform:50000:200000"])
def test_every_active_moved_by_a_probe_was_warming_up_at_the_rebalance_before(lag):
    """KIP-441: an active moves only to a replica that warmed up for it. With lagging standbys
    the assignor warms a standby up as the warm-up of its move (standby_as_warmup), outside the
    max_warmup_replicas budget: those count as warm-ups too (they once counted 0 while 3
    actives moved)."""
    shape = GroupShape(clients=6, racks=3, subtopologies=1, partitions=12, standbys=1, lag=lag)
    row, steps = run_rows(RunSpec("r", run_seed(6, lag), ScalingEvent("scale_out", 3),
                                  SimConfig(max_warmup_replicas=1, early_probe=False), shape=shape))
    assert row["settled"] and row["downtime_task_s"] == 0.0 and row["tasks_moved"] > 0
    for before, probe in zip(steps, steps[1:], strict=False):
        assert probe["trigger"] == "probing_rebalance"
        assert probe["moved"] <= before["warmups"], (before, probe)
    assert row["peak_warmups"] == max(s["warmups"] for s in steps) > 0


@pytest.mark.parametrize(
    ("change", "field", "value"),
    [
        pytest.param({"group": {"clients": [6, 6]}}, "group.clients", "6", id="group-axis"),
        pytest.param({"group": {"restore_rate": [10_000, 10_000.0]}}, "group.restore_rate", "10000.0", id="equal-numbers"),
        pytest.param({"events": ["scale_out:1", "scale_out:1"]}, "events", "'scale_out:1'", id="event"),
        pytest.param({"events": ["scale_out:1", "scale_out:01"]}, "events", "'scale_out:1'", id="same-event-spelled-apart"),
        pytest.param({"configs": {"max_warmup_replicas": [1, 2, 1]}}, "configs.max_warmup_replicas", "1", id="config-axis"),
    ],
)
def test_a_value_given_twice_on_an_axis_is_refused_naming_it(change, field, value):
    """A repeated value is the same runs twice with the same seeds and run_ids: joins on run_id
    would multiply rows and aggregates count them twice."""
    with pytest.raises(InvalidSpec) as raised:
        expand_grid({**GOOD, **change})
    assert raised.value.field == field and raised.value.message.startswith(f"{value} is given twice")


def test_a_grid_with_nothing_runnable_says_why():
    """Every combination skipped: the refusal names each reason, with the field at fault."""
    plan = expand_grid({"group": {"clients": 3, "racks": 1}, "events": ["lose_rack", "scale_in:3"]})
    assert plan.runs == ()
    assert plan.nothing_runnable() == ("lose_rack needs group.racks >= 2, got 1; "
                                       "scale_in:3 would remove every client of group.clients 3")
    assert plan.skipped[0] == "generated clients=3,racks=1 lose_rack: lose_rack needs group.racks >= 2, got 1"


def test_restarting_the_only_client_leaves_every_task_down_until_it_is_back():
    """No member, no rebalance: the 4 tasks are down for the 30 s restart, then run again from
    the state the client kept (the changelog did not grow)."""
    shape = GroupShape(clients=1, racks=1, subtopologies=1, partitions=4, standbys=0, append_rate=0)
    row, steps = run_rows(RunSpec("r", 7, ScalingEvent("rolling_restart"), SimConfig(), shape=shape))
    assert row["error"] is None and row["settled"] and row["settle_time_s"] == 30.0
    assert row["downtime_task_s"] == pytest.approx(4 * 30.0) and row["offsets_restored"] == 0
    assert [s["trigger"] for s in steps] == ["member_rejoined"]


GOOD = {"group": {"clients": 4}, "events": ["scale_out:1"], "configs": {"max_warmup_replicas": [1, 2]}}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param({"colour": 1}, "colour", id="unknown-key"),
        pytest.param({"group": {"clients": 0}}, "group.clients", id="no-clients"),
        pytest.param({"group": {"flavour": [1]}}, "group.flavour", id="unknown-axis"),
        pytest.param({"group": {"lag": "normal:3"}}, "group.lag", id="bad-lag"),
        pytest.param({"group": {"restore_rate": 10, "append_rate": 10}}, "group.restore_rate", id="never-catches-up"),
        pytest.param({"configs": {"max_warmup_replicas": 0}}, "configs.max_warmup_replicas", id="kip441-min-warmups"),
        pytest.param({"configs": {"probing_interval_s": 30}}, "configs.probing_interval_s", id="kip441-min-interval"),
        pytest.param({"configs": {"rack_strategy": "nearest"}}, "configs.rack_strategy", id="bad-strategy"),
        pytest.param({"events": ["explode"]}, "events", id="bad-event"),
        pytest.param({"repetitions": 0}, "repetitions", id="no-repetitions"),
        # an audit's finds: TypeError tracebacks, or a section's characters read as keys
        pytest.param({"timing": 5}, "timing", id="timing-scalar"),
        pytest.param({"timing": "abc"}, "timing", id="timing-string"),
        pytest.param({"timing": [1]}, "timing", id="timing-list"),
        pytest.param({"configs": "abc"}, "configs", id="configs-string"),
        pytest.param({1: 2, "foo": 3}, "1", id="mixed-top-level-keys"),
        pytest.param({"timing": {1: 2, "foo": 3}}, "timing.1", id="mixed-timing-keys"),
        pytest.param({"group": {1: 2, "clients": 3}}, "group.1", id="mixed-axis-keys"),
    ],
)
def test_bad_grids_name_the_field(change, field):
    with pytest.raises(InvalidSpec) as raised:
        expand_grid({**GOOD, **change})
    assert raised.value.field == field


def test_the_probing_interval_is_refused_in_its_own_unit():
    """The grid gives seconds: the message must not quote the assignor's milliseconds."""
    with pytest.raises(InvalidSpec) as raised:
        expand_grid({**GOOD, "configs": {"probing_interval_s": 5}})
    assert raised.value.field == "configs.probing_interval_s"
    assert ">= 60" in raised.value.message and "got 5" in raised.value.message and "60000" not in raised.value.message


def test_grid_expansion_crosses_axes_and_shares_seeds_across_configs():
    plan = expand_grid({**GOOD, "group": {"clients": [4, 1], "racks": 1}, "events": ["scale_in:1", "lose_rack"],
                        "repetitions": 2})
    # clients=1 cannot scale in by 1; racks=1 cannot lose a rack: 1 group x 1 event x 2 reps x 2 configs
    assert len(plan.runs) == 4 and len(plan.skipped) == 3
    assert len({r.run_id for r in plan.runs}) == 4
    by_rep = {}
    for spec in plan.runs:
        by_rep.setdefault(spec.point["rep"], set()).add(spec.seed)
    assert all(len(seeds) == 1 for seeds in by_rep.values()) and len(by_rep) == 2


def test_commands_reject_bad_input_with_the_field_named_before_spark_starts(tmp_path, capsys):
    from pipeline.cli import main

    grid = tmp_path / "grid.yaml"
    grid.write_text("events: [scale_out:1]\nconfigs:\n  max_warmup_replicas: [0]\n")
    assert main(["simulate", "--grid", str(grid), "--out", str(tmp_path / "out")]) == 2
    assert "configs.max_warmup_replicas" in capsys.readouterr().err
    grid.write_text("events: [scale_out:1\n")
    assert main(["simulate", "--grid", str(grid), "--out", str(tmp_path / "out")]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    assert main(["analyze", str(tmp_path / "missing"), "--out", str(tmp_path / "out")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_warm_up_reaches_the_acceptable_lag_exactly_when_the_simulator_probes():
    """Restoring 990,000 offsets at a net 9,900 offsets/s takes exactly 100 s: at that instant
    the replica reports 10,000 (never 10,001 from a rounding error), so the probe finds it
    caught up; a millisecond earlier it still reports more. Odd rates stay exact too."""
    from pipeline.simulation import _Clock, _warming_lags_ready, _World

    task = TaskId(0, 0)
    for restore, append in ((10_000.0, 100.0), (10_000.3, 99.9), (7.0, 3.0)):
        clock = _Clock.of(Rates(restore, append))
        world = _World((), {}, {}, {}, {}, {"b": {task: clock.units(1_000_000)}}, {}, clock, 1)
        wait, lags = _warming_lags_ready(world, [("b", task)], 10_000)
        assert lags["b"][task].within(10_000) and lags["b"][task].offsets >= 9_999, (restore, append)
        earlier = clock.units(1_000_000) - (clock.restore - clock.append) * (wait - 1)
        assert not clock.reported(earlier).within(10_000), (restore, append)

