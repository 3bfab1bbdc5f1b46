"""The Spark edge of the pipeline: the session, shipping our code to executors, progress.

Local mode (``local[2]``) is the embedded default; ``--master`` or ``spark-submit`` point the
same jobs at a cluster. Executors run the simulator and the log parser, which import
``assignor`` and ``pipeline``: ``ship_code`` zips exactly the code the driver runs and adds it
to every executor's path, so an installed copy of another version can never answer instead.
"""

from __future__ import annotations

import os
import re
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
    return None


def under_spark_submit() -> bool:
    """spark-submit starts the driver with a gateway already running; it owns the master."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(master: str | None = None, app_name: str = "remote-leader-pipeline", **conf: str) -> Any:
    """A SparkSession with the project's Python on the executors and our code shipped."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if not under_spark_submit():
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
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
    except Exception as error:  # a master that cannot be reached: Spark's own message is pages of Java
        raise SparkStartError(f"--master {master or DEFAULT_MASTER}: Spark did not start "
                              f"({type(error).__name__}: {' '.join(str(error).split())[:200]})") from None
    spark.sparkContext.setLogLevel("ERROR")
    ship_code(spark)
    return spark


def ship_code(spark: Any) -> str:
    """Zip ``assignor/`` and ``pipeline/`` as the driver sees them and add them to the executors."""
    root = Path(__file__).resolve().parent.parent
    handle, path = tempfile.mkstemp(prefix="remote-leader-code-", suffix=".zip")
    os.close(handle)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in _PACKAGES:
            for file in sorted((root / package).rglob("*.py")):
                archive.write(file, file.relative_to(root).as_posix())
    spark.sparkContext.addPyFile(path)
    return path


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
    try:
        yield
    finally:
        done.set()
        watcher.join()
        stream.write((line() if tty else line().lstrip("\r")) + " done\n")
        stream.flush()
        sc.setLocalProperty("spark.jobGroup.id", None)
