"""``assignor.target._hub_standbys_fit``: the estimate that lets the standby target skip its
relaxed flow. It may miss a failure (the relaxed flow is then solved and dropped, as before), but
it must never skip a relaxed flow that would have decoded within the caps."""

import itertools

from assignor import target
from assignor.model import AssignmentConfig
from assignor.ranking import rank_clients
from assignor.target import CostModel, Group, _hub_standbys_fit, _RelaxedStandbyFlow, active_target
from bench.workloads import settled_by_assignor

# Settled groups of 40 members losing 2-10%, 400 tasks: small enough to solve in a test, and
# shaped so that the estimate finds no split on about half of them.
SHAPES = list(itertools.product((5, 10, 20), (0.02, 0.05, 0.1), (1, 2)))


def _outcomes(monkeypatch) -> list[tuple[bool, bool]]:
    monkeypatch.setattr(target, "HUB_FIT_CELLS", 10**9)  # the max flow at every size
    outcomes = []
    for subtopologies, share, seed in SHAPES:
        specs, members = settled_by_assignor(40, 400, 1, scenario="scale-in", changed_share=share,
                                             subtopologies=subtopologies, seed=seed)
        group = Group.of(specs, members)
        ranking = rank_clients(specs, members, AssignmentConfig().acceptable_recovery_lag)
        costs = CostModel(lag_aware=True)
        actives = active_target(group, ranking, costs, 1)
        relaxed = _RelaxedStandbyFlow(group, ranking, costs, actives, 1)
        relaxed.build()
        relaxed.solve()
        outcomes.append((_hub_standbys_fit(group, actives, 1), relaxed.standbys_within_caps() is not None))
    return outcomes


def test_no_relaxed_flow_that_decodes_is_skipped(monkeypatch):
    outcomes = _outcomes(monkeypatch)
    assert [shape for shape, (fit, decoded) in zip(SHAPES, outcomes, strict=True) if decoded and not fit] == []
    assert any(not fit for fit, _ in outcomes) and any(fit for fit, _ in outcomes)  # both answers drawn
