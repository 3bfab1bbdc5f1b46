"""Option values every console command shares (the server's and the worker side's)."""

from __future__ import annotations

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def check_log_level(level: str) -> None:
    """``--log-level`` as one line naming the flag, before logging is configured with it."""
    if str(level).lower() not in LOG_LEVELS:
        raise ValueError(f"--log-level: expected one of {', '.join(LOG_LEVELS)}, got {level!r}")
