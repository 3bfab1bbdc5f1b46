"""``python -m assignor``: the scenario contract (docs/scenario-format.md), end to end."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assignor.model import InvalidInput
from assignor.scenario import parse_problem
from tests.conftest import load_worked_scenarios

VALID = {
    "version": 1,
    "config": {"num_standby_replicas": 1},
    "tasks": [
        {"id": "0_0", "stateful": True, "changelog_offsets": 50000},
        {"id": "0_1", "stateful": True, "changelog_offsets": 50000},
        {"id": "1_0", "stateful": False},
    ],
    "clients": [
        {"id": "a", "threads": 2, "prev_active": ["0_0"], "lags": {"0_0": "latest", "0_1": 12000}},
        {"id": "b", "threads": 1, "prev_standby": ["0_0"], "lags": {"0_0": 12000, "0_1": "unknown"}},
    ],
}


def run_cli(document, *args: str) -> subprocess.CompletedProcess:
    text = document if isinstance(document, str) else json.dumps(document)
    return subprocess.run(
        [sys.executable, "-m", "assignor", "-", *args], input=text, capture_output=True, text=True, timeout=60
    )


def test_valid_scenario_prints_one_assignment_document():
    completed = run_cli(VALID)
    assert completed.returncode == 0, completed.stderr
    output = json.loads(completed.stdout)
    assert output["version"] == 1
    assert set(output["clients"]) == {"a", "b"}
    for roles in output["clients"].values():
        assert set(roles) == {"active", "standby", "warmup"}
    actives = sorted(t for roles in output["clients"].values() for t in roles["active"])
    assert actives == ["0_0", "0_1", "1_0"]
    assert isinstance(output["probing_rebalance_needed"], bool)


def test_a_null_config_value_is_its_default_as_if_left_out():
    """An assignor audit's find: "rack_aware_strategy": null exited 2 ("unknown strategy None")
    while every other null took its default (scenario.md: a null cost is the strategy's own)."""
    plain = run_cli({**VALID, "config": {}})
    nulls = run_cli({**VALID, "config": dict.fromkeys((
        "assignor", "num_standby_replicas", "acceptable_recovery_lag", "rack_aware_strategy",
        "rack_aware_assignment_tags", "rack_aware_traffic_cost", "rack_aware_non_overlap_cost"))})
    assert nulls.returncode == 0, nulls.stderr
    assert nulls.stdout == plain.stdout


def test_reads_a_file_argument_and_explains(tmp_path):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(load_worked_scenarios()[0][1]["scenario"]))
    completed = subprocess.run(
        [sys.executable, "-m", "assignor", str(path), "--explain"], capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    output = json.loads(completed.stdout)
    assert {"reasons", "rack_awareness"} <= set(output)
    assert any(reason["code"] == "warming_up" for reason in output["reasons"])


def _with(path: str, value):
    document = copy.deepcopy(VALID)
    target = document
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    last = keys[-1]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return document


INVALID = [
    pytest.param("not json", "(document)", id="not-json"),
    pytest.param("[]", "(document)", id="not-an-object"),
    pytest.param(_with("version", 2), "version", id="wrong-version"),
    pytest.param(_with("config.assignor", "greedy"), "config.assignor", id="unknown-assignor"),
    pytest.param(_with("config.rack_aware_strategy", "closest"), "config.rack_aware_strategy", id="unknown-strategy"),
    pytest.param(_with("config.acceptable_recovery_lag", -1), "config.acceptable_recovery_lag", id="negative-arl"),
    pytest.param(_with("config.max_warmup_replicas", 0), "config.max_warmup_replicas", id="no-warmups"),
    pytest.param(_with("config.probing_rebalance_interval_ms", 1000), "config.probing_rebalance_interval_ms",
                 id="probing-too-often"),
    pytest.param(_with("config.balance_factor", 0), "config.balance_factor", id="balance-factor-0"),
    pytest.param(_with("config.surprise", 1), "config.surprise", id="unknown-config-key"),
    pytest.param(_with("tasks.1.id", "0_0"), "tasks[1].id", id="duplicate-task"),
    pytest.param(_with("tasks.0.id", "0-0"), "tasks[0].id", id="malformed-task-id"),
    pytest.param(_with("tasks.0.changelog_offsets", -5), "tasks[0].changelog_offsets", id="negative-changelog"),
    pytest.param(_with("clients.1.id", "a"), "clients[1].id", id="duplicate-client"),
    pytest.param(_with("clients.0.threads", 0), "clients[0].threads", id="no-threads"),
    pytest.param(_with("clients.0.lags", {"9_9": 1}), "clients[0].lags.9_9", id="unknown-task-in-lags"),
    pytest.param(_with("clients.0.lags", {"0_0": -3}), "clients[0].lags.0_0", id="negative-lag"),
    pytest.param(_with("clients.0.lags", {"0_0": 1.5}), "clients[0].lags.0_0", id="fractional-lag"),
    pytest.param(_with("clients.1.prev_standby", ["7_0"]), "clients[1].prev_standby[0]", id="unknown-prev-task"),
    pytest.param(_with("clients.1.prev_active", ["0_0"]), "clients[1].prev_active", id="two-prev-actives"),
    # found by fuzzing an unseen input space: each was a traceback, a silent default or a wrong answer
    pytest.param('{"version": 1, "tasks": [' * 100_000, "(document)", id="nested-too-deeply"),
    pytest.param('{"version": 1, "tasks": [], "clients": [], "x": ' + "7" * 4301 + "}", "(document)",
                 id="number-of-4301-digits"),
    pytest.param(_with("tasks.0.id", "0_" + "1" * 4301), "tasks[0].id", id="task-id-of-4301-digits"),
    pytest.param(_with("tasks.0.id", "0_2147483648"), "tasks[0].id", id="partition-beyond-int"),
    pytest.param(_with("tasks.2", {"id": "1_0"}), "tasks[2].stateful", id="stateful-missing"),
    pytest.param(_with("tasks.0.partitions", [{"topic": "t", "partition": 0, "racks": [["r1"]]}]),
                 "tasks[0].partitions[0].racks", id="rack-not-a-name"),
    pytest.param(_with("tasks.0.changelog_offsets", 2**63), "tasks[0].changelog_offsets", id="changelog-beyond-long"),
    pytest.param(_with("clients.0.threads", 2**63), "clients[0].threads", id="threads-beyond-int"),
    pytest.param(_with("clients.0.lags", {"0_0": 2**63}), "clients[0].lags.0_0", id="lag-beyond-long"),
    pytest.param(_with("clients.0.lags", {"0_0": "latest", "00_0": 5}), "clients[0].lags.00_0", id="one-task-two-spellings"),
    pytest.param(_with("config.rack_aware_traffic_cost", 2**49), "config.rack_aware_traffic_cost",
                 id="traffic-cost-beyond-int"),
    # an audit's unseen inputs: accepted silently
    pytest.param(_with("version", 1.0), "version", id="version-not-an-integer"),
    pytest.param(_with("clients.1.tags", False), "clients[1].tags", id="tags-false"),
    pytest.param(_with("clients.1.tags", ""), "clients[1].tags", id="tags-empty-string"),
    pytest.param(_with("clients.1.tags", 0), "clients[1].tags", id="tags-zero"),
    pytest.param(_with("clients.0.prev_active", ["0_0", "0_0"]), "clients[0].prev_active[1]", id="duplicate-prev-task"),
    pytest.param(_with("config.num_standby_replicas", 2**31), "config.num_standby_replicas", id="standbys-beyond-int"),
]


@pytest.mark.parametrize(("document", "field"), INVALID)
def test_invalid_input_exits_2_with_one_line_naming_the_field(document, field):
    completed = run_cli(document)
    assert completed.returncode == 2
    assert completed.stdout == ""
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith(f"error: {field}:"), lines[0]


@pytest.mark.parametrize("indent", ["-5", "17", "100000000", "two"])
def test_an_indent_beyond_a_page_exits_2_naming_the_flag(indent):
    """``--indent 100000000`` wrote 9 GB of spaces; a negative one was taken as none."""
    completed = run_cli(VALID, "--indent", indent)
    assert completed.returncode == 2
    assert completed.stdout == ""
    assert "--indent" in completed.stderr and "0 to 16" in completed.stderr


def test_a_reader_that_leaves_early_gets_no_traceback():
    """``python -m assignor big.json | head``: the output outgrows the pipe and the reader
    closes it; the assignor stops quietly instead of printing BrokenPipeError."""
    document = {"version": 1, "tasks": [{"id": f"0_{p}", "stateful": False} for p in range(5_000)],
                "clients": [{"id": f"c{i}"} for i in range(50)]}
    process = subprocess.Popen([sys.executable, "-m", "assignor", "-", "--indent", "16"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdin.write(json.dumps(document).encode())
    process.stdin.close()
    process.stdout.read(10)
    process.stdout.close()
    stderr = process.stderr.read().decode()
    process.wait(timeout=60)
    assert "Traceback" not in stderr, stderr


@pytest.mark.parametrize(("text", "field"), [
    (json.dumps(VALID).replace('"0_1": 12000}', '"0_1": 12000, "0_0": 900000}', 1), "clients[0].lags.0_0"),
    (json.dumps(VALID).replace('{"id": "b",', '{"id": "b", "id": "c",', 1), "clients[1].id"),
    (json.dumps(VALID)[:-1] + ', "clients": []}', "clients"),
])
def test_a_key_given_twice_exits_2_naming_it(text, field):
    """A fuzzing audit's find: JSON keeps the last of two equal keys silently, so the two lags a
    client gave for one task, swapped, changed the assignment. Refused, naming the key."""
    completed = run_cli(text)
    assert completed.returncode == 2, completed.stdout
    assert completed.stderr.strip().splitlines() == [
        f"error: {field}: a key given twice in one object (which one counts would be a guess)"]


@pytest.mark.parametrize(("tail", "message"), [
    ('"x": [1, }', "not valid JSON: Expecting value at line 1"),
    ('"x": ' + "9" * 5_000 + "}", "not valid JSON: a number too long to read"),
    ('"x": ' + "[" * 100_000 + "]" * 100_000 + "}", "not valid JSON: nested too deeply"),
])
def test_a_key_given_twice_in_a_document_that_is_no_json_further_on(tail, message):
    """An attack on the duplicate-key check: naming the key reads the document again, which
    raised a traceback where the document also broke further on. It is refused as no JSON."""
    completed = run_cli('{"config": {"a": 1, "a": 2}, ' + tail)
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [f"error: (document): {message}"]


def test_a_caller_s_text_stream_as_standard_input(monkeypatch, capsys):
    """``main`` called in-process with ``sys.stdin`` a text stream (no bytes under it) reads it."""
    import io

    from assignor.__main__ import main

    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(VALID)))
    assert main(["-"]) == 0
    assert json.loads(capsys.readouterr().out)["clients"]["a"]["active"]


def test_remote_leader_assign_names_itself_in_its_errors(tmp_path):
    """``remote-leader assign`` runs this CLI: its usage errors name the command the user typed."""
    (tmp_path / "valid.json").write_text(json.dumps(VALID))
    completed = subprocess.run([sys.executable, "-m", "remote_leader.cli", "assign", str(tmp_path / "valid.json"),
                                "--indent", "100"], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 2
    assert completed.stderr.splitlines()[-1].startswith("remote-leader assign: error: argument --indent")


def test_leading_zeros_spell_a_task_id_not_a_larger_one():
    """A fuzzing audit's find: ``00000000002_0`` (task 2_0) was refused as beyond 2^31 - 1."""
    document = copy.deepcopy(VALID)
    document["tasks"][2]["id"] = "00000000001_00000000000"
    completed = run_cli(document)
    assert completed.returncode == 0, completed.stderr
    assert "1_0" in json.dumps(json.loads(completed.stdout))


def test_bytes_that_are_not_utf_8_are_named_so_from_standard_input_as_from_a_file(tmp_path):
    (tmp_path / "bad.json").write_bytes(b"\xff\xfe{}")
    for args, stdin in (([str(tmp_path / "bad.json")], b""), (["-"], b"\xff\xfe{}")):
        completed = subprocess.run([sys.executable, "-m", "assignor", *args], input=stdin, capture_output=True,
                                   timeout=60)
        assert completed.returncode == 2
        assert completed.stderr.decode().strip() == "error: scenario: not UTF-8 text"


def test_unreadable_file_exits_2(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "assignor", str(tmp_path / "missing.json")], capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 2
    assert len(completed.stderr.strip().splitlines()) == 1


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.sampled_from(["0_0", "x", "latest"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(
        ["version", "config", "tasks", "clients", "id", "lags", "threads", "stateful", "prev_active", "partitions",
         "racks", "topic", "partition", "assignor", "changelog_offsets", "tags", "rack"]), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(document=JSON, base=st.booleans())
def test_any_json_is_either_a_problem_or_a_named_error(document, base):
    """Never a traceback: whatever JSON arrives, the parser builds a problem or names a field."""
    if base and isinstance(document, dict):
        document = {**VALID, **document}
    try:
        parse_problem(document)
    except InvalidInput as error:
        assert error.field


def test_fields_the_format_does_not_define_are_named_once_on_standard_error_and_ignored():
    """scenario.md: "Fields may be added", so an unknown field is no error; but ``"thread": 3``
    (for ``threads``) silently ran the client on one thread, so each unknown name is told, once,
    where it first appears, and the assignment is the one without it."""
    document = copy.deepcopy(VALID)
    document["comment"] = "from a test"
    document["tasks"][1]["changelog_offset"] = 5
    document["tasks"][2]["changelog_offset"] = 5
    document["tasks"][2]["partitions"] = [{"topic": "t", "partition": 0, "rack": ["r1"]}]
    document["clients"][0]["thread"] = 3
    document["clients"][1]["thread"] = 3
    completed = run_cli(document)
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr.splitlines() == [
        f"warning: {field}: not a field of scenario format v1; ignored"
        for field in ("comment", "tasks[1].changelog_offset", "tasks[2].partitions[0].rack", "clients[0].thread")]
    assert json.loads(completed.stdout) == json.loads(run_cli(VALID).stdout)


def test_a_document_of_known_fields_only_writes_nothing_on_standard_error():
    completed = run_cli(VALID)
    assert completed.returncode == 0
    assert completed.stderr == ""
