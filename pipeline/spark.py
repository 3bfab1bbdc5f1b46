"""The Spark edge of the pipeline: the session, shipping our code to executors, progress.

Local mode (``local[2]``) is the embedded default; ``--master`` or ``spark-submit`` point the
same jobs at a cluster. Executors run the simulator and the log parser, which import
``assignor`` and ``pipeline``: ``ship_code`` zips exactly the code the driver runs and adds it
to every executor's path, so an installed copy of another version can never answer instead.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

DEFAULT_MASTER = "local[2]"
_PACKAGES = ("assignor", "pipeline")
#: The master URLs Spark knows (local[N], local[N,F], local-cluster[...], spark://, yarn, k8s://,
#: mesos://): anything else ended in a Java stack and a Python traceback.
_MASTER = re.compile(r"(local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|yarn|spark://[^\s/]+|k8s://\S+|mesos://\S+)")
#: How long ``spark_session`` tries to reach a standalone master (``spark://``) before Spark
#: starts: Spark itself retries for a fixed minute and then names no cause.
MASTER_CONNECT_TIMEOUT_S = 10.0
#: Spark's own log (log4j2) during the commands: off, so that a failure is one line of ours;
#: ``SPARK_SUBMIT_OPTS=-Dlog4j2.configurationFile=...`` brings it back. The gateway's logger is
#: named as well: unset, it sets the shell level WARN and says so on stderr.
_QUIET_LOG4J2 = """rootLogger.level = off
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = off
"""


class SparkStartError(RuntimeError):
    """Spark did not start with the master given (``--master``): one line for people."""


def hadoop_literal(path: str) -> str:
    """``path`` as a Hadoop path that matches only itself: Hadoop expands ``* ? [ ] { } ^ \\``
    as a glob even in a path named in full (``run[12]`` would read ``run1``)."""
    return re.sub(r"([\\*?\[\]{}^])", r"\\\1", path)


def read_table(spark: Any, out: Path, name: str) -> Any:
    """A table this run wrote under ``--out``, read back by its literal path (``hadoop_literal``)."""
    return spark.read.parquet(hadoop_literal(str(out / name)))


def master_problem(master: str | None) -> str | None:
    """``--master`` checked before Spark starts: the problem, or None."""
    if master is not None and not _MASTER.fullmatch(master):
        return (f"--master: {master!r} is not a Spark master URL "
                "(local[N], spark://host:port, yarn, k8s://https://host:port, mesos://host:port)")
    if master is not None and master.startswith("local") and 0 in map(int, re.findall(r"\d+", master)):
        return f"--master: {master!r}: every count in local[N], local[N,F] or local-cluster[N,C,M] must be at least 1"
    return None


def _unreachable_master(master: str) -> str | None:
    """Why none of a standalone master's ``host:port`` accepts a connection, or None."""
    problem = None
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=MASTER_CONNECT_TIMEOUT_S):
                return None
        except ValueError:
            problem = f"{address}: not host:port"
        except OSError as error:
            problem = f"cannot reach {address}: {error.strerror or type(error).__name__}"
    return problem


def root_cause(error: BaseException) -> str:
    """The innermost cause of a Spark error as one line (a Java exception's last ``getCause()``)."""
    cause = getattr(error, "java_exception", None)
    text = f"{type(error).__name__}: {error}"
    try:
        while cause is not None:
            text = f"{cause.getClass().getSimpleName()}: {cause.getMessage()}"
            cause = cause.getCause()
    except Exception:  # noqa: BLE001 - the gateway may be gone with the JVM; keep what we have
        pass
    return " ".join(text.split())


def under_spark_submit() -> bool:
    """spark-submit starts the driver with a gateway already running; it owns the master."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(master: str | None = None, app_name: str = "remote-leader-pipeline", **conf: str) -> Any:
    """A SparkSession with the project's Python on the executors and our code shipped."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if not under_spark_submit():
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master and master.startswith("spark://") and (problem := _unreachable_master(master)):
        raise SparkStartError(f"--master {master}: Spark did not start ({problem})")
    quiet = _quiet_spark_log()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master or not under_spark_submit():
        builder = builder.master(master or DEFAULT_MASTER)
    settings = {
        "spark.ui.enabled": "false",  # no port to collide with on shared machines
        "spark.ui.showConsoleProgress": "false",  # our own progress line instead
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.session.timeZone": "UTC",
        "spark.python.worker.reuse": "true",
        **conf,
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as error:  # Spark's own message is pages of Java: its root cause only
        raise SparkStartError(f"--master {master or DEFAULT_MASTER}: Spark did not start ({root_cause(error)})") from None
    if not quiet:
        spark.sparkContext.setLogLevel("ERROR")
    ship_code(spark)
    return spark


def ship_code(spark: Any) -> str:
    """Zip ``assignor/`` and ``pipeline/`` as the driver sees them and add them to the executors."""
    root = Path(__file__).resolve().parent.parent
    handle, path = tempfile.mkstemp(prefix="remote-leader-code-", suffix=".zip", dir=_session_dir())
    os.close(handle)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in _PACKAGES:
            for file in sorted((root / package).rglob("*.py")):
                archive.write(file, file.relative_to(root).as_posix())
    spark.sparkContext.addPyFile(path)
    return path


def _quiet_spark_log() -> bool:
    """Turn Spark's own log off for the JVM about to start (``_QUIET_LOG4J2``), unless spark-submit
    started it or someone chose a log4j2 configuration already."""
    if under_spark_submit():
        return False
    config = _session_dir() / "log4j2.properties"
    options = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if "log4j2.configurationFile" in options:
        return str(config) in options
    config.write_text(_QUIET_LOG4J2, encoding="utf-8")
    os.environ["SPARK_SUBMIT_OPTS"] = f"-Dlog4j2.configurationFile={config} {options}".strip()
    return True


_SESSION_DIR: list[Path] = []


def _session_dir() -> Path:
    """This process's scratch folder in ``$TMPDIR`` (the code zip, the log config), removed at exit:
    executors fetch the zip while the session runs, so it must outlive every job."""
    if not _SESSION_DIR:
        _SESSION_DIR.append(Path(tempfile.mkdtemp(prefix="remote-leader-spark-")))
        atexit.register(shutil.rmtree, _SESSION_DIR[0], ignore_errors=True)
    return _SESSION_DIR[0]


@contextmanager
def command_session(command: str, master: str | None, app_name: str, out: str | Path,
                    existed: bool) -> Iterator[Any | None]:
    """A command's Spark session, stopped when the block ends; None after one line saying why
    Spark did not start (``--out`` left as found, ``pipeline.output.discard_out``).

    Ctrl-C or SIGTERM meanwhile end the command at once: one line, this process's scratch folder
    removed, and the exit status of that signal (130, 143). Left to Python, Ctrl-C raised inside
    a py4j call and py4j logged a 99-line traceback, and SIGTERM skipped ``atexit``, so the
    scratch folder stayed in ``$TMPDIR`` (a new user's finds). The JVM exits by itself once its
    Python parent is gone (its standard input closes)."""
    from pipeline.output import discard_out

    def stop(signum: int, _frame: Any) -> None:
        print(f"{command}: stopped by {signal.Signals(signum).name}; what {out} holds is incomplete",
              file=sys.stderr, flush=True)
        for folder in _SESSION_DIR:
            shutil.rmtree(folder, ignore_errors=True)
        os._exit(128 + signum)

    def arm() -> None:
        for signum in previous:
            signal.signal(signum, stop)

    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    arm()
    try:
        try:
            spark = spark_session(master, app_name=app_name)
        except SparkStartError as error:
            print(f"{command}: {error}", file=sys.stderr)
            discard_out(out, existed)
            yield None
            return
        arm()  # again: the SparkContext installed a SIGINT handler of its own
        try:
            yield spark
        finally:
            spark.stop()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def progress(spark: Any, label: str, *, enabled: bool = True, interval_s: float = 0.5) -> Iterator[None]:
    """Show the tasks done of the Spark jobs started inside the block, on one updating line."""
    sc = spark.sparkContext
    if not enabled:
        yield
        return
    stream = sys.stderr
    group = f"rl-{label}-{time.monotonic_ns()}"
    sc.setJobGroup(group, label)
    done = threading.Event()
    started = time.monotonic()

    def line() -> str:
        tracker = sc.statusTracker()
        finished = total = 0
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            for stage_id in (job.stageIds if job else ()):
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    finished += stage.numCompletedTasks
                    total += stage.numTasks
        return f"\r{label}: {finished}/{total} Spark tasks, {time.monotonic() - started:5.1f} s"

    tty = stream.isatty()

    def poll() -> None:
        ticks = 0
        while not done.wait(interval_s):
            ticks += 1
            if tty or ticks % 20 == 0:  # redraw in a terminal, a line every ~10 s in a log
                stream.write(line() if tty else line().lstrip("\r") + "\n")
                stream.flush()

    watcher = threading.Thread(target=poll, name="spark-progress", daemon=True)
    watcher.start()
    ending = " stopped"  # the block failed: its error follows
    try:
        yield
        ending = " done"
    finally:
        done.set()
        watcher.join()
        stream.write((line() if tty else line().lstrip("\r")) + ending + "\n")
        stream.flush()
        sc.setLocalProperty("spark.jobGroup.id", None)
