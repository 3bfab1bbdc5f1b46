"""``--out`` of ``simulate`` and ``analyze``: a directory holding one command's output, never
anyone else's files replaced.

A run marks its ``--out`` with ``MARKER`` (the command's name). An existing ``--out`` is taken
only when it is empty or an earlier output of the same command; a rerun then replaces only the
entries that command writes (``OUTPUTS``) and leaves anything else there as it is. All of it is
checked before Spark starts (``out_problem``), that what will be replaced can be included.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

MARKER = ".remote-leader-output"
#: What each command writes under ``--out`` (and so may replace): its tables, the report, scratch.
OUTPUTS = {
    "analyze": ("records", "episodes", "groups", "timeline", "lags", "bad_lines", "report.html",
                "_staged_logs", "_parsed"),
    "simulate": ("runs", "steps", "configs", "config_ranking", "report.html"),
}


class OutputError(ValueError):
    """An ``--out`` this command must not write in: one line naming it."""


def marked_by(path: Path) -> str | None:
    """The command whose output ``path`` holds, from its marker; None for any other directory."""
    try:
        command = json.loads((path / MARKER).read_text(encoding="utf-8")).get("command")
    except (OSError, ValueError, AttributeError):
        return None
    return command if command in OUTPUTS else None


def out_problem(out: str | Path, command: str) -> str | None:
    """``--out`` checked before Spark starts (and created): the problem, or None."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        return f"--out: {out} exists and is not a directory"
    if path.is_dir():
        try:
            entries = list(path.iterdir())
        except OSError as error:
            return f"--out: cannot list {out}: {error.strerror}"
        owner = marked_by(path)
        if entries and owner != command:
            if owner is not None:
                return (f"--out: {out} holds the output of remote-leader {owner}; name a new or empty "
                        f"directory, or an earlier {command} output")
            return (f"--out: {out} is not empty and is not an earlier remote-leader {command} output; "
                    "name a new or empty directory (nothing in it was changed)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return f"--out: cannot create {out}: {error.strerror}"
    if problem := _unwritable(path):
        return f"--out: cannot write in {out}: {problem}"
    for name in (*OUTPUTS[command], MARKER):
        if problem := _cannot_replace(path / name):
            return f"--out: cannot replace {path / name} (an earlier {command} output): {problem}"
    return None


def _cannot_replace(target: Path) -> str | None:
    """Why ``target`` (an earlier run's table folder or file) could not be replaced, if so: tried
    in every folder of it, as for ``--out`` itself."""
    if target.is_symlink() or not target.exists():
        return None
    if not target.is_dir():
        try:
            with open(target, "ab"):
                pass
        except OSError as error:
            return error.strerror
        return None
    return next(filter(None, (_unwritable(Path(folder)) for folder, _, _ in os.walk(target))), None)


def _unwritable(folder: Path) -> str | None:
    """Why nothing can be written in ``folder``, if so: tried, since the mode bits say too little
    (root ignores them, ACLs, read-only mounts)."""
    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".remote-leader-write-check-"):
            pass
    except OSError as error:
        return error.strerror or type(error).__name__
    return None


def claim_out(out: str | Path, command: str) -> Path:
    """``--out`` as an absolute path, checked and marked as ``command``'s output; ``OutputError``
    when it may not be written (``out_problem``)."""
    if problem := out_problem(out, command):
        raise OutputError(problem)
    path = Path(out).absolute()  # a relative name with a colon would be a URL scheme to Hadoop
    (path / MARKER).write_text(json.dumps({"command": command}) + "\n", encoding="utf-8")
    return path


def discard_out(out: str | Path, existed: bool) -> None:
    """A refused command leaves nothing behind in ``--out``: no marker in a folder holding nothing
    else, and no folder it created."""
    path = Path(out)
    with contextlib.suppress(OSError):
        if [entry.name for entry in path.iterdir()] == [MARKER]:
            (path / MARKER).unlink()
        if not existed:
            path.rmdir()
