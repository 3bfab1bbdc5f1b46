"""The KIP worked examples (shared/scenarios) through ``python -m assignor``'s code path."""

from __future__ import annotations

import pytest

from assignor import solve
from assignor.scenario import parse_problem, result_to_document
from tests.assignor.expectations import unmet_expectations
from tests.conftest import load_worked_scenarios

SCENARIOS = load_worked_scenarios()


@pytest.mark.parametrize(
    "document",
    [
        pytest.param(doc, id=name.replace("_", "-"))
        for name, doc in SCENARIOS
    ],
)
def test_worked_scenario_meets_its_expectations(document):
    scenario = document["scenario"]
    output = result_to_document(solve(parse_problem(scenario)))
    assert unmet_expectations(scenario, document["expect"], output) == []


def test_every_worked_scenario_is_covered():
    assert len(SCENARIOS) >= 7
