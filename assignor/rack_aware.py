"""KIP-925 rack-aware placement and KIP-708 tag-aware standbys (issue 3 fills this in).

Until then rack awareness stands down and says why, so a configured strategy is visible
as not applied rather than silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping

from assignor.model import AssignmentConfig, RackAwareReport, RackAwareStrategy, TaskId
from assignor.target import Group


def optimize_actives(
    group: Group, actives: Mapping[TaskId, str], config: AssignmentConfig
) -> tuple[dict[TaskId, str], RackAwareReport]:
    """Reshape the balanced active target to cut cross-rack traffic, keeping each client's count."""
    if config.rack_aware_strategy == RackAwareStrategy.NONE:
        return dict(actives), RackAwareReport(strategy=RackAwareStrategy.NONE, disabled_reason="strategy is none")
    return dict(actives), RackAwareReport(strategy=config.rack_aware_strategy, disabled_reason="not implemented yet")


def optimize_standbys(
    group: Group,
    actives: Mapping[TaskId, str],
    standbys: Mapping[TaskId, tuple[str, ...]],
    config: AssignmentConfig,
) -> dict[TaskId, tuple[str, ...]]:
    """Spread standbys over racks and tags, then trade them for less traffic (KIP-925 C, KIP-708)."""
    return dict(standbys)
