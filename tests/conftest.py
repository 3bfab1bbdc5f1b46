"""Shared fixtures: the KIP worked scenarios copied from shared/scenarios (read-only inputs)."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


def load_worked_scenarios() -> list[tuple[str, dict]]:
    return [(path.stem, json.loads(path.read_text())) for path in sorted((FIXTURES / "scenarios").glob("*.json"))]
