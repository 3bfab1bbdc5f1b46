"""Hostile and sloppy input: huge grids, overflowing log lines, bad flags (fuzzC report).

All but the last tests (on the shared session) run without Spark: bad flags and grids must be
refused before a session starts.
"""

from __future__ import annotations

import json
import time

import pytest

from pipeline.grid import MAX_REPETITIONS, MAX_RUNS, expand_grid, load_grid
from pipeline.rebalance_log import line_metrics
from pipeline.simulation import MAX_CLIENTS, MAX_TASKS, GroupShape, InvalidSpec
from tests.pipeline.records import lines, scale_out_story

GOOD = {"group": {"clients": 4}, "events": ["scale_out:1"], "configs": {"max_warmup_replicas": [1, 2]}}
HUGE = 10**9
MAX_BUCKET_S = 365 * 86_400  # docs/pipeline.md, "Bounds": --bucket-s at most a year


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param({"repetitions": HUGE}, "repetitions", id="repetitions"),
        pytest.param({"repetitions": MAX_REPETITIONS + 1}, "repetitions", id="repetitions-just-over"),
        pytest.param({"group": {"clients": HUGE}}, "group.clients", id="clients"),
        pytest.param({"group": {"clients": [4, HUGE]}}, "group.clients", id="clients-list"),
        pytest.param({"group": {"clients": MAX_CLIENTS + 1}}, "group.clients", id="clients-just-over"),
        pytest.param({"group": {"threads": HUGE}}, "group.threads", id="threads"),
        pytest.param({"group": {"racks": HUGE}}, "group.racks", id="racks"),
        pytest.param({"group": {"partitions": HUGE}}, "group.partitions", id="partitions"),
        pytest.param({"group": {"subtopologies": HUGE}}, "group.subtopologies", id="subtopologies"),
        pytest.param({"group": {"subtopologies": 2, "partitions": MAX_TASKS // 2 + 1}}, "group.partitions",
                     id="tasks-product"),
        pytest.param({"group": {"standbys": HUGE}}, "group.standbys", id="standbys"),
        pytest.param({"group": {"changelog_offsets": 10**30}}, "group.changelog_offsets", id="changelog"),
        pytest.param({"group": {"lag": "uniform:0:1e400"}}, "group.lag", id="lag-inf"),
        pytest.param({"group": {"restore_rate": float("inf")}}, "group.restore_rate", id="restore-inf"),
        pytest.param({"group": {"restore_rate": float("nan")}}, "group.restore_rate", id="restore-nan"),
        pytest.param({"group": {"append_rate": 10**30}}, "group.append_rate", id="append-huge"),
        pytest.param({"events": [f"scale_out:{HUGE}"]}, "events.count", id="scale-out"),
        pytest.param({"events": [f"rolling_restart:{HUGE}"]}, "events.count", id="rolling-restart"),
        pytest.param({"group": {"clients": MAX_CLIENTS}}, "events", id="clients-after-scale-out"),
        pytest.param({"configs": {"acceptable_recovery_lag": 10**16}}, "configs.acceptable_recovery_lag",
                     id="arl"),
        pytest.param({"configs": {"max_warmup_replicas": HUGE}}, "configs.max_warmup_replicas", id="warmups"),
        pytest.param({"configs": {"probing_interval_s": float("inf")}}, "configs.probing_interval_s",
                     id="probing-inf"),
        pytest.param({"configs": {"min_probe_interval_s": 1e30}}, "configs.min_probe_interval_s", id="min-probe"),
        pytest.param({"timing": {"max_simulated_s": float("inf")}}, "timing.max_simulated_s", id="max-simulated"),
        pytest.param({"timing": {"session_timeout_s": 1e30}}, "timing.session_timeout_s", id="session"),
        pytest.param({"timing": {"max_rebalances": HUGE}}, "timing.max_rebalances", id="max-rebalances"),
        pytest.param({"repetitions": 1000, "configs": {"max_warmup_replicas": list(range(1, 201))}}, "(grid)",
                     id="runs-product"),
        pytest.param({"repetitions": 5000, "timing": {"max_rebalances": 5000}}, "timing.max_rebalances",
                     id="rebalances-product"),
    ],
)
def test_huge_grids_are_refused_with_the_field_named(change, field):
    started = time.monotonic()
    with pytest.raises(InvalidSpec) as raised:
        expand_grid({**GOOD, **change})
    assert raised.value.field == field, str(raised.value)
    assert time.monotonic() - started < 5  # refused before any expansion


def test_the_run_bound_is_checked_before_the_cross_product_is_built():
    axes = {name: list(range(1, 101)) for name in ("clients", "threads", "racks", "standbys")}
    started = time.monotonic()
    with pytest.raises(InvalidSpec) as raised:
        expand_grid({**GOOD, "group": axes})
    assert raised.value.field == "(grid)" and str(MAX_RUNS) in str(raised.value)
    assert time.monotonic() - started < 5


def test_the_largest_allowed_values_still_expand():
    plan = expand_grid({**GOOD, "repetitions": 2, "group": {"clients": 4, "subtopologies": 1,
                                                             "partitions": MAX_TASKS}})
    assert len(plan.runs) == 4


@pytest.fixture
def log_file(tmp_path):
    path = tmp_path / "rebalances.jsonl"
    path.write_text(lines(scale_out_story()))
    return path


def test_from_log_uses_the_default_rates(log_file):
    plan = expand_grid({**GOOD, "from_log": [str(log_file)]})
    logged = [run for run in plan.runs if run.start is not None]
    defaults = GroupShape()
    assert logged and {(r.rates.restore_rate, r.rates.append_rate) for r in logged} == {
        (defaults.restore_rate, defaults.append_rate)}


@pytest.mark.parametrize("content", [None, b"\xff\xfe\x00garbage\x80" * 50], ids=["missing", "binary"])
def test_a_missing_or_binary_from_log_names_the_field(tmp_path, content):
    path = tmp_path / "log.jsonl"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InvalidSpec) as raised:
        expand_grid({**GOOD, "from_log": [str(path)]})
    assert raised.value.field == "from_log"


def test_a_binary_grid_file_names_the_flag(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x80" * 20)
    with pytest.raises(InvalidSpec) as raised:
        load_grid(grid)
    assert raised.value.field == "--grid"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--out", "{file}"], "--out: ", id="out-is-a-file"),
        pytest.param(["--out", "{dir}", "--partitions", "-3"], "--partitions: ", id="negative-partitions"),
        pytest.param(["--out", "{dir}", "--partitions", "0"], "--partitions: ", id="zero-partitions"),
        # an audit's find: a Java stack and a Python traceback
        pytest.param(["--out", "{dir}", "--master", "bogus://x"], "--master: ", id="master-not-a-url"),
        pytest.param(["--out", "{dir}", "--master", "local[two]"], "--master: ", id="master-local-not-a-count"),
        # an audit's find: local[0] passed the check, then a Java stack
        pytest.param(["--out", "{dir}", "--master", "local[0]"], "--master: ", id="master-local-zero"),
        pytest.param(["--out", "{dir}", "--master", "local[2,0]"], "--master: ", id="master-local-zero-failures"),
        pytest.param(["--out", "{dir}", "--master", "local-cluster[0,1,1024]"], "--master: ",
                     id="master-local-cluster-zero"),
    ],
)
@pytest.mark.parametrize("command", ["simulate", "analyze"])
def test_bad_out_and_partitions_fail_in_one_line_before_spark_starts(tmp_path, capsys, spark_never_starts, log_file,
                                                                      command, args, message):
    from pipeline.cli import main

    existing = tmp_path / "existing"
    existing.write_text("keep me\n")
    args = [a.format(file=existing, dir=tmp_path / "out") for a in args]
    grid = tmp_path / "grid.yaml"
    grid.write_text("events: [scale_out:1]\ngroup:\n  clients: 4\n")
    source = ["--grid", str(grid)] if command == "simulate" else [str(log_file)]
    assert main([command, *source, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{command}: ") and message in err and err.count("\n") == 1, err
    assert existing.read_text() == "keep me\n"


@pytest.mark.parametrize("bucket_s", [0, -5, MAX_BUCKET_S + 1, 10**30])
def test_bucket_s_out_of_range_fails_in_one_line_before_spark_starts(tmp_path, capsys, spark_never_starts, log_file,
                                                                      bucket_s):
    from pipeline.cli import main

    assert main(["analyze", str(log_file), "--out", str(tmp_path / "out"), "--bucket-s", str(bucket_s)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("analyze: --bucket-s: ") and str(MAX_BUCKET_S) in err and err.count("\n") == 1, err
    with pytest.raises(AssertionError, match="Spark started"):  # the bound itself is allowed
        main(["analyze", str(log_file), "--out", str(tmp_path / "out"), "--bucket-s", str(MAX_BUCKET_S)])


def _story_line(**change) -> str:
    return json.dumps({**scale_out_story()[0], **change})


@pytest.mark.parametrize(
    ("line", "field"),
    [
        pytest.param(_story_line(time_ms=10**30), "time_ms", id="time-overflow"),
        pytest.param(_story_line(time_ms=-1), "time_ms", id="time-negative"),
        pytest.param(_story_line(time_ms=1e300), "time_ms", id="time-float-overflow"),
        pytest.param(_story_line(generation=10**20), "generation", id="generation-overflow"),
        pytest.param("[" * 100_000, "(line)", id="deeply-nested"),
        pytest.param('{"a": ' * 100_000, "(line)", id="deeply-nested-object"),
        pytest.param(_story_line(compute_ms=float("nan")), "(line)", id="nan"),
        pytest.param(_story_line(compute_ms=float("inf")), "(line)", id="infinity"),
        pytest.param(_story_line(compute_ms=float("-inf")), "(line)", id="minus-infinity"),
        pytest.param(_story_line(compute_ms=1).replace('"compute_ms": 1', '"compute_ms": 1e999'), "(line)",
                     id="float-literal-overflow"),
        pytest.param(_story_line(compute_ms=1).replace('"compute_ms": 1', '"compute_ms": ' + "9" * 5000),
                     "(line)", id="integer-too-long"),
        pytest.param(_story_line(compute_ms=10**400), "(record)", id="compute-ms-overflow"),
    ],
)
def test_overflowing_and_non_finite_lines_are_error_rows(line, field):
    row = line_metrics(line, "f")
    assert row is not None and row["error"] is not None and row["error"].startswith(field), row


def test_analyze_counts_overflowing_lines_and_keeps_the_rest(spark, tmp_path):
    from pipeline.analytics import analyze

    story = scale_out_story()
    bad = [_story_line(time_ms=10**30), _story_line(generation=10**20), "[" * 100_000,
           _story_line(compute_ms=float("nan"))]
    log = tmp_path / "rebalances.jsonl"
    log.write_text(lines(story) + "\n".join(bad) + "\n")
    data = analyze(spark, [str(log)], tmp_path / "out", bucket_s=3600, report=False, show_progress=False)
    assert data["counts"]["records"] == len(story) and data["counts"]["bad_lines"] == len(bad)
    problems = {row["error"].split(":")[0] for row in data["bad"]}
    assert problems == {"time_ms", "generation", "(line)"}


class _SharedSession:
    """The test session handed to the CLI: its ``stop()`` leaves it running for the other tests."""

    def __init__(self, spark):
        self._spark = spark

    def __getattr__(self, name):
        return getattr(self._spark, name)

    def stop(self):
        pass


@pytest.fixture
def analyze_cli(spark, monkeypatch, capsys):
    """``remote-leader analyze`` on the shared Spark session: (exit code, stdout, stderr)."""
    import pipeline.spark
    from pipeline.cli import main

    monkeypatch.setattr(pipeline.spark, "spark_session", lambda *_args, **_kwargs: _SharedSession(spark))

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(["analyze", *argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


NOT_A_REBALANCE_LOG = {
    "all-lines-bad": ("{torn line\n" * 2 + _story_line(time_ms=-1) + "\n[1, 2]\n", 4,
                      "most common problem (2 lines): (line): not valid JSON"),
    "text": ("hello\n\nthis is not a rebalance log\n", 2, "most common problem (2 lines): (line): not valid JSON"),
    "other-json": ("".join(json.dumps({"event": "server.started", "level": "info", "port": p}) + "\n"
                           for p in (1, 2, 3)), 3, "most common problem (3 lines): schema: unsupported schema None"),
    "empty": ("\n", 0, ""),
}


@pytest.mark.parametrize(("content", "count", "problem"), list(NOT_A_REBALANCE_LOG.values()),
                         ids=list(NOT_A_REBALANCE_LOG))
def test_analyze_with_no_valid_line_fails_in_one_line(analyze_cli, tmp_path, content, count, problem):
    log = tmp_path / "rebalances.jsonl"
    log.write_text(content)
    out = tmp_path / "out"
    code, stdout, err = analyze_cli(str(log), "--out", str(out), "--bucket-s", "60")
    assert code == 2 and stdout == "", (code, stdout, err)
    message = err.strip().splitlines()[-1]  # after the "analyze: 1 log files" line
    assert message.startswith(f"analyze: LOGS: none of the {count} lines read from 1 file is a valid "
                              "rebalance-log record"), err
    assert problem in message, message
    assert not out.exists()  # nothing left behind: no report, no scratch copy, no --out it created


def test_analyze_with_some_valid_lines_still_reports(analyze_cli, tmp_path):
    log = tmp_path / "rebalances.jsonl"
    log.write_text("{torn line\n" * 3 + lines(scale_out_story()[:1]))
    code, stdout, err = analyze_cli(str(log), "--out", str(tmp_path / "out"), "--no-report")
    assert code == 0, err
    counts = json.loads(stdout)
    assert (counts["records"], counts["bad_lines"]) == (1, 3)


def test_a_truncated_gz_fails_in_one_line_naming_it(analyze_cli, tmp_path):
    """An audit's find: a truncated gzip rotation ended in 500 lines of Java and Python naming
    an internal staged file, and left an empty --out."""
    import gzip

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rebalances.jsonl").write_text(lines(scale_out_story()))
    whole = gzip.compress(lines(scale_out_story() * 20).encode())
    (logs / "rebalances.jsonl.1.gz").write_bytes(whole[: len(whole) // 2])
    out = tmp_path / "out"
    code, stdout, err = analyze_cli(str(logs), "--out", str(out))
    assert code == 2 and stdout == "", (code, stdout, err)
    assert err.splitlines()[-1] == (f"analyze: LOGS: {logs / 'rebalances.jsonl.1.gz'}: could not be read "
                                    "(EOFException: Unexpected end of input stream)"), err
    assert not out.exists()


@pytest.mark.parametrize("command", ["simulate", "analyze"])
def test_a_spark_that_does_not_start_fails_in_one_line(tmp_path, capsys, monkeypatch, log_file, command):
    """A Spark that fails to start ended in pages of Java and a Python traceback: one line naming
    --master and the cause, exit 2, no --out left."""
    from pipeline.cli import main

    class Builder:  # what SparkSession.builder does with an unreachable master, without the 70 s
        def __getattr__(self, _name):
            return lambda *_args, **_kwargs: self

        def getOrCreate(self):  # noqa: N802 - Spark's name
            raise RuntimeError("[JAVA_GATEWAY_EXITED] Java gateway process exited\nbefore sending its port number.")

    from pyspark.sql import SparkSession

    monkeypatch.setattr(SparkSession, "builder", Builder())
    grid = tmp_path / "grid.yaml"
    grid.write_text("events: [scale_out:1]\ngroup:\n  clients: 4\n")
    source = ["--grid", str(grid)] if command == "simulate" else [str(log_file)]
    out = tmp_path / "out"
    assert main([command, *source, "--out", str(out), "--master", "yarn"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (f"{command}: --master yarn: Spark did not start (RuntimeError: "
                   "[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number.)"), err
    assert not out.exists()


@pytest.mark.parametrize("command", ["simulate", "analyze"])
def test_an_unreachable_master_fails_at_once_naming_the_cause(tmp_path, capsys, log_file, command):
    """The audit's spark://127.0.0.1:1 took 65 s (Spark retries for a fixed minute) and its one
    line, cut at 200 characters, named no cause: "connection refused" now, in well under that."""
    import socket

    from pipeline.cli import main

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "out"
    started = time.monotonic()
    assert main([command, *_source(tmp_path, command, log_file), "--out", str(out),
                 "--master", f"spark://127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (f"{command}: --master spark://127.0.0.1:{port}: Spark did not start "
                   f"(cannot reach 127.0.0.1:{port}: Connection refused)"), err
    assert time.monotonic() - started < 10 and not out.exists()


def _source(tmp_path, command: str, log_file) -> list[str]:
    """What ``command`` reads: a one-event grid, or the log file."""
    if command == "analyze":
        return [str(log_file)]
    grid = tmp_path / "grid.yaml"
    grid.write_text("events: [scale_out:1]\ngroup:\n  clients: 4\n")
    return ["--grid", str(grid)]


def _tree(folder) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() if p.is_file() else "/" for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("command", ["simulate", "analyze"])
def test_an_out_holding_other_files_is_refused_and_left_as_it_was(tmp_path, capsys, spark_never_starts, log_file,
                                                                   command):
    """An audit's find: folders of the tables' names (groups/, timeline/...) and a report.html in
    --out were replaced without a word, whoever they belonged to."""
    from pipeline.cli import main

    out = tmp_path / "mine"
    for name in ("groups/precious.txt", "timeline/keep.csv", "runs/notes.txt", "report.html"):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(f"my {name}\n")
    before = _tree(out)
    assert main([command, *_source(tmp_path, command, log_file), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (f"{command}: --out: {out} is not empty and is not an earlier remote-leader {command} output; "
                   "name a new or empty directory (nothing in it was changed)\n"), err
    assert _tree(out) == before


@pytest.mark.parametrize(("command", "other"), [("simulate", "analyze"), ("analyze", "simulate")])
def test_an_output_of_the_other_command_is_refused(tmp_path, capsys, spark_never_starts, log_file, command, other):
    """analyze into a simulate output left runs/ and steps/ beside its own tables."""
    from pipeline.cli import main
    from pipeline.output import claim_out

    out = tmp_path / "out"
    claim_out(out, other)
    (out / "report.html").write_text(f"the {other} report")
    assert main([command, *_source(tmp_path, command, log_file), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{command}: --out: {out} holds the output of remote-leader {other}") and \
        err.count("\n") == 1, err
    assert (out / "report.html").read_text() == f"the {other} report"


@pytest.mark.parametrize("command", ["simulate", "analyze"])
def test_an_earlier_output_of_the_same_command_is_taken(tmp_path, spark_never_starts, log_file, command):
    from pipeline.cli import main
    from pipeline.output import claim_out

    out = tmp_path / "out"
    claim_out(out, command)
    (out / "report.html").write_text("an earlier report")
    with pytest.raises(AssertionError, match="Spark started"):
        main([command, *_source(tmp_path, command, log_file), "--out", str(out)])


@pytest.fixture
def make_immutable():
    """``chattr +i`` a folder (even root cannot change it), undone after the test."""
    import shutil
    import subprocess

    chattr = shutil.which("chattr")
    done = []

    def immutable(folder):
        if chattr is None or subprocess.run([chattr, "+i", str(folder)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not available here")
        done.append(folder)

    yield immutable
    for folder in done:
        subprocess.run([chattr, "-i", str(folder)], check=True)


@pytest.mark.parametrize(("command", "table"), [("simulate", "runs"), ("analyze", "records")])
def test_an_earlier_table_that_cannot_be_replaced_fails_before_spark_starts(tmp_path, capsys, spark_never_starts,
                                                                           log_file, make_immutable, command, table):
    """An audit's find: an earlier table folder that could not be deleted ended in a Java stack."""
    from pipeline.cli import main
    from pipeline.output import claim_out

    out = tmp_path / "out"
    claim_out(out, command)
    (out / table).mkdir()
    (out / table / "part-0").write_text("x")
    make_immutable(out / table)
    assert main([command, *_source(tmp_path, command, log_file), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{command}: --out: cannot replace {out / table} (an earlier {command} output): ") and \
        err.count("\n") == 1, err


@pytest.fixture
def spark_never_starts(monkeypatch):
    """The checks under test come before Spark: were it started, the test fails."""
    import pipeline.spark

    def no_spark(*_args, **_kwargs):
        raise AssertionError("Spark started")

    monkeypatch.setattr(pipeline.spark, "spark_session", no_spark)


@pytest.fixture
def immutable_dir(tmp_path):
    """A directory even root cannot write in (mode bits do not stop root; ``chattr +i`` does)."""
    import shutil
    import subprocess

    folder = tmp_path / "read-only"
    folder.mkdir()
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    yield folder
    subprocess.run([chattr, "-i", str(folder)], check=True)


@pytest.mark.parametrize("command", ["simulate", "analyze"])
def test_an_out_that_cannot_be_written_fails_in_one_line_before_spark_starts(tmp_path, capsys, spark_never_starts,
                                                                             log_file, immutable_dir, command):
    """An audit's find: an existing but read-only --out passed the check, then pages of Java."""
    from pipeline.cli import main

    grid = tmp_path / "grid.yaml"
    grid.write_text("events: [scale_out:1]\ngroup:\n  clients: 4\n")
    source = ["--grid", str(grid)] if command == "simulate" else [str(log_file)]
    assert main([command, *source, "--out", str(immutable_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{command}: --out: cannot write in {immutable_dir}") and err.count("\n") == 1, err
    assert list(immutable_dir.iterdir()) == []


def test_a_grid_with_no_runnable_run_leaves_no_out_behind(tmp_path, capsys, spark_never_starts):
    from pipeline.cli import main

    grid = tmp_path / "grid.yaml"
    grid.write_text("events: [lose_rack]\ngroup: {clients: 2, racks: 1}\n")
    out = tmp_path / "out"
    assert main(["simulate", "--grid", str(grid), "--out", str(out)]) == 2
    assert capsys.readouterr().err == ("simulate: the grid expands to no runnable runs: "
                                       "lose_rack needs group.racks >= 2, got 1\n")
    assert not out.exists()
