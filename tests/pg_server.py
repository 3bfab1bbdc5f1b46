"""A throwaway PostgreSQL server on 127.0.0.1 for the store tests, the chaos test and bench/.

``initdb`` and ``pg_ctl`` refuse to run as root, so as root they run as the ``postgres`` user
(``runuser``); the data directory is created for that user. Binaries come from the Debian
package (scripts/install_postgres.sh installs it when missing). Starting takes about 2 s.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from remote_leader.net import free_port


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server can be started on this machine (no binaries, no user to run them)."""


def _bin_dir() -> Path:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if candidates:
        return Path(candidates[0]).parent
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise PostgresUnavailable("no initdb: run scripts/install_postgres.sh (installs the 'postgresql' package)")



class ThrowawayPostgres:
    """``start()`` a fresh cluster, ``dsn`` to connect, ``stop()`` removes everything."""

    def __init__(self, *, durable: bool = False) -> None:
        self.durable = durable  # fsync on (benchmarks); tests run without it for speed
        self.bin = _bin_dir()
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="remote-leader-pg-"))
        self.data = self.root / "data"
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                raise PostgresUnavailable("running as root without runuser: cannot start PostgreSQL as 'postgres'")
            try:
                import pwd

                pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresUnavailable("running as root and there is no 'postgres' user to run PostgreSQL") from None
            self._as_user = ["runuser", "-u", "postgres", "--"]

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        completed = subprocess.run([*self._as_user, *args], capture_output=True, text=True, timeout=60)
        if completed.returncode != 0:
            raise PostgresUnavailable(f"{Path(args[0]).name} failed: {completed.stderr.strip() or completed.stdout.strip()}")

    def start(self) -> ThrowawayPostgres:
        self.root.chmod(0o755)
        self.data.mkdir()
        if self._as_user:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.data, "postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c max_connections=200"
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off"
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.data / "log"), "-w", "start")
        return self

    def stop(self) -> None:
        with contextlib.suppress(PostgresUnavailable, subprocess.TimeoutExpired):
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def throwaway_postgres(*, durable: bool = False) -> Iterator[ThrowawayPostgres]:
    server = ThrowawayPostgres(durable=durable)
    try:
        yield server.start()
    finally:
        server.stop()
