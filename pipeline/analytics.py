"""Rebalance-log analytics on Spark: what the group's rebalances actually cost.

Reads one or many servers' rebalance logs (docs/interfaces.md, JSON lines, rotated files
included); each line is measured in the executors by ``pipeline.rebalance_log.line_metrics``
against the input the members reported, then aggregated per group and over time with
DataFrame operations. Only small aggregates reach the driver, for the report.

Tables under ``OUT/``: ``records`` (one row per rebalance), ``groups`` (per group),
``episodes`` (membership change to settled), ``timeline`` (per group and time bucket),
``lags`` (reported-lag histogram per group), ``bad_lines``, and ``report.html``.

"Settled" is the first rebalance whose assignment needs no probing rebalance (KIP-441
"Probing Rebalances": once balanced, the leader stops probing). An episode starts at the first
membership change (a member trigger, or a member set different from the group's previous
record) after the group last settled, and ends when it settles again.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from pipeline.rebalance_log import LAG_BUCKETS, InvalidLog, expand_paths, is_url, line_metrics
from pipeline.spark import hadoop_literal, read_table, root_cause

RECORD_COLUMNS: list[tuple[str, str]] = [
    ("group_id", "string"), ("generation", "long"), ("time_ms", "long"), ("compute_ms", "double"),
    ("trigger", "string"), ("membership_trigger", "boolean"), ("members", "long"), ("member_set", "string"),
    ("threads", "long"), ("tasks", "long"), ("stateful_tasks", "long"), ("actives_moved", "long"),
    ("unreported_actives", "array<string>"), ("active_owners", "map<string,string>"),
    ("replicas_added", "long"), ("warmups", "long"),
    ("actives_restoring", "long"), ("probing", "boolean"), ("cross_rack_partitions", "long"),
    ("cross_rack_reported", "long"), ("imbalance", "double"), ("balanced", "boolean"), ("lag_reports", "long"),
    ("lag_latest", "long"), ("lag_unknown", "long"), ("lag_p50", "double"), ("lag_p95", "double"),
    ("lag_max", "long"), ("lag_hist", "array<long>"), ("source", "string"), ("error", "string"),
]


#: Columns of the ``records`` table: as measured, with the moves judged against the group's
#: previous record (``with_moves``) in place of what that judgement needs.
_JUDGED = {"unreported_actives": ["actives_orphaned", "actives_new", "tasks_moved"], "active_owners": []}
TABLE_COLUMNS = [name for column, _ in RECORD_COLUMNS if column != "error" for name in _JUDGED.get(column, [column])]


def parse_partition(rows: Any) -> Any:
    """Executor side: one (line, file) row to one metrics row (or an error row)."""
    names = [name for name, _ in RECORD_COLUMNS]
    for row in rows:
        metrics = line_metrics(row[0], row[1])
        if metrics is not None:
            yield tuple(metrics.get(name) for name in names)


#: A file suffix kept when staging, so Hadoop still picks the codec by name (``.gz``, ``.bz2``).
_SUFFIX = re.compile(r"^\.[A-Za-z0-9]{1,10}$")


def stage_files(files: list[str], folder: Path) -> tuple[list[str], dict[str, str]]:
    """The paths to hand Spark, and each staged name's original path.

    Hadoop reads a path as a glob, skips any file whose name starts with ``_`` or ``.``, and
    cannot open names with a colon; so every local file is read through a hard link under a
    plain name (``f000000.jsonl``) in ``folder`` (inside ``--out``, which the executors share):
    the file as it was when the run started, which a log rotation removing it meanwhile does
    not take away. Where a hard link cannot be made (another file system), a symlink.
    A cluster URL is passed as it is, its glob characters escaped.
    """
    shutil.rmtree(folder, ignore_errors=True)  # what an interrupted run left
    folder.mkdir(parents=True)
    paths, names = [], {}
    for index, original in enumerate(files):
        if is_url(original):
            paths.append(hadoop_literal(original))
            continue
        suffix = Path(original).suffix
        name = f"f{index:06d}{suffix if _SUFFIX.match(suffix) else ''}"
        try:
            os.link(original, folder / name)
        except FileNotFoundError:
            raise InvalidLog(f"LOGS: {original}: removed since the run started (a log rotation?)") from None
        except OSError:
            (folder / name).symlink_to(Path(original).resolve())
        names[name] = original
        paths.append("file://" + hadoop_literal(str((folder / name).absolute())))
    return paths, names


def read_records(spark: Any, files: list[str], partitions: int | None = None, *, staging: Path) -> Any:
    """Every log line measured: a DataFrame of RECORD_COLUMNS (bad lines have ``error`` set).
    Each of ``files`` is read exactly, whatever its name (``stage_files``, under ``staging``);
    ``source`` is the path as given."""
    from pyspark.sql import functions as F

    paths, names = stage_files(files, staging)
    read = F.col("_metadata.file_path")
    source = read
    if names:
        original = F.create_map(*[F.lit(x) for pair in sorted(names.items()) for x in pair])
        source = F.coalesce(F.element_at(original, F.element_at(F.split(read, "/"), -1)), read)
    from pyspark.errors import AnalysisException

    try:
        lines = spark.read.text(paths).select("value", source.alias("source"))
    except AnalysisException as error:  # a cluster URL that is not there: one line, not a traceback
        raise InvalidLog(f"LOGS: {_as_given(str(error).splitlines()[0], files)}") from None
    if partitions:
        lines = lines.repartition(partitions)
    schema = ", ".join(f"`{name}` {kind}" for name, kind in RECORD_COLUMNS)
    return spark.createDataFrame(lines.rdd.mapPartitions(parse_partition), schema=schema)


#: A staged file's path in a Spark message (``stage_files``): the index of the file as given.
_STAGED = re.compile(r"(?:file:)?/*[^\s]*/_staged_logs/f(\d{6})(?:\.[A-Za-z0-9]{1,10})?")


def _as_given(text: str, files: list[str]) -> str:
    """``text`` with each staged file's path replaced by the path the user gave."""
    return _STAGED.sub(lambda match: files[int(match.group(1))], text)


def unreadable_log(error: Exception, files: list[str]) -> InvalidLog | None:
    """A log file Spark could not read to its end (a truncated ``.gz``, a file removed meanwhile)
    as one line naming it as given; None when ``error`` names none of ``files``."""
    text = str(error)
    found = _STAGED.search(text)
    if found is not None:
        name = files[int(found.group(1))]
    else:
        name = next((f for f in files if is_url(f) and (f in text or hadoop_literal(f) in text)), None)
        if name is None:
            return None
    return InvalidLog(f"LOGS: {name}: could not be read ({_as_given(root_cause(error), files)})")


def with_moves(records: Any) -> Any:
    """The ``records`` table's moves, judged against each group's previous record.

    A task moved when it runs on another member than its previous owner: the member that
    reported running it (``actives_moved``, from the record alone) or, when no member did, the
    member the group's previous record placed it on, one that has left included
    (``actives_orphaned``). A task the previous record did not place (the group's first
    assignment, a new task, or a previous record not among the logs read) had no owner: it is
    placed, not moved (``actives_new``). ``tasks_moved`` is the sum of the two kinds of moves.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ordered = Window.partitionBy("group_id").orderBy("time_ms", "generation")
    marked = records.withColumn("_before", F.lag("active_owners").over(ordered))

    def before(task: Any) -> Any:
        return F.try_element_at(F.col("_before"), task)

    def moved(task: Any) -> Any:
        return before(task).isNotNull() & (before(task) != F.try_element_at(F.col("active_owners"), task))

    return (
        marked.withColumn("actives_orphaned", F.size(F.filter("unreported_actives", moved)).cast("long"))
        .withColumn("actives_new", F.size(F.filter("unreported_actives", lambda t: before(t).isNull())).cast("long"))
        .withColumn("tasks_moved", F.col("actives_moved") + F.col("actives_orphaned"))
        .select(*TABLE_COLUMNS)
    )


def episodes_of(records: Any) -> Any:
    """Membership change -> settled, per group, with window functions only.

    A *segment* is the run of records after the group last settled up to and including the
    next settling record; its episode starts at the segment's first membership change.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ordered = Window.partitionBy("group_id").orderBy("time_ms", "generation")
    marked = (
        records.withColumn("prev_set", F.lag("member_set").over(ordered))
        .withColumn("changed", F.col("membership_trigger")
                    | (F.col("prev_set").isNotNull() & (F.col("prev_set") != F.col("member_set"))))
        .withColumn("settles", ~F.col("probing"))
        .withColumn("segment", F.coalesce(
            F.sum(F.col("settles").cast("long")).over(ordered.rowsBetween(Window.unboundedPreceding, -1)),
            F.lit(0)))
    )
    start = (marked.where("changed").groupBy("group_id", "segment")
             .agg(F.min(F.struct("time_ms", "generation", "trigger")).alias("s")))
    close = (marked.where("settles").groupBy("group_id", "segment")
             .agg(F.min(F.struct("time_ms", "generation")).alias("e")))
    counted = marked.join(start, ["group_id", "segment"]).where(
        F.struct("time_ms", "generation") >= F.struct("s.time_ms", "s.generation"))
    sizes = counted.groupBy("group_id", "segment").agg(F.count("*").alias("rebalances"))
    return (
        start.join(close, ["group_id", "segment"], "left").join(sizes, ["group_id", "segment"])
        .select(
            "group_id",
            F.col("s.generation").alias("start_generation"),
            F.col("s.time_ms").alias("start_ms"),
            F.col("s.trigger").alias("start_trigger"),
            F.col("e.generation").alias("end_generation"),
            F.col("e.time_ms").alias("end_ms"),
            "rebalances",
            F.col("e").isNotNull().alias("settled"),
            ((F.col("e.time_ms") - F.col("s.time_ms")) / 1000.0).alias("settle_s"),
        )
    )


#: Timeline bucket sizes to choose from, seconds: the smallest that keeps a log's span within
#: ``TIMELINE_BUCKETS`` buckets (a 5-minute log in 5-second buckets, a week in hours).
NICE_BUCKETS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 604800)
TIMELINE_BUCKETS = 60
#: ``--bucket-s`` at most: a year, the grid's bound on any duration (pipeline.simulation.MAX_SECONDS);
#: a larger bucket puts any real log in one point.
MAX_BUCKET_S = 365 * 86_400


def bucket_for_span(span_s: float, buckets: int = TIMELINE_BUCKETS) -> int:
    """The timeline's bucket: about ``buckets`` of them over the log's span, on a round size."""
    return next((b for b in NICE_BUCKETS_S if span_s / b <= buckets), NICE_BUCKETS_S[-1])


def analyze(spark: Any, paths: list[str], out: str | Path, *, bucket_s: int | None = None, report: bool = True,
            partitions: int | None = None, show_progress: bool = True) -> dict[str, Any]:
    """Measure every record of the logs at ``paths`` and write the tables under ``out``."""
    from pipeline.output import claim_out

    files = expand_paths(paths)
    out = claim_out(out, "analyze")
    scratch = [out / "_staged_logs", out / "_parsed"]
    try:
        return _analyze(spark, files, out, bucket_s=bucket_s, report=report, partitions=partitions,
                        show_progress=show_progress)
    finally:  # success or refusal, no scratch copy of the lines is left behind
        for folder in scratch:
            shutil.rmtree(folder, ignore_errors=True)


def _analyze(spark: Any, files: list[str], out: Path, *, bucket_s: int | None, report: bool,
             partitions: int | None, show_progress: bool) -> dict[str, Any]:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from pipeline.spark import progress
    from pipeline.sweep import write_report

    with progress(spark, f"measure rebalance log ({len(files)} files)", enabled=show_progress):
        parsed = read_records(spark, files, partitions, staging=out / "_staged_logs")
        try:
            parsed.write.mode("overwrite").parquet(str(out / "_parsed"))
        except Exception as error:
            if (unreadable := unreadable_log(error, files)) is not None:
                raise unreadable from None
            raise
    parsed = read_table(spark, out, "_parsed")
    bad = parsed.where(F.col("error").isNotNull())
    good = parsed.where(F.col("error").isNull())
    _require_records(parsed, bad, len(files))
    records = with_moves(good.dropDuplicates(["group_id", "generation", "time_ms"]).drop("error"))
    records.orderBy("group_id", "time_ms", "generation").write.mode("overwrite").parquet(str(out / "records"))
    records = read_table(spark, out, "records")

    episodes = episodes_of(records)
    episodes.orderBy("group_id", "start_ms").write.mode("overwrite").parquet(str(out / "episodes"))
    episodes = read_table(spark, out, "episodes")

    ordered = Window.partitionBy("group_id").orderBy("time_ms", "generation")
    latest = Window.partitionBy("group_id").orderBy(F.desc("time_ms"), F.desc("generation"))
    with_gaps = (records.withColumn("gap_s", (F.col("time_ms") - F.lag("time_ms").over(ordered)) / 1000.0)
                 .withColumn("recency", F.row_number().over(latest)))
    groups = with_gaps.groupBy("group_id").agg(
        F.count("*").alias("rebalances"),
        F.min("time_ms").alias("first_ms"),
        F.max("time_ms").alias("last_ms"),
        F.avg("gap_s").alias("mean_interval_s"),
        F.avg("tasks_moved").alias("tasks_moved_mean"),
        F.max("tasks_moved").alias("tasks_moved_max"),
        F.sum("tasks_moved").alias("tasks_moved_total"),
        F.max("warmups").alias("warmups_max"),
        F.avg("compute_ms").alias("compute_ms_mean"),
        F.max("lag_p95").alias("lag_p95_max"),
        F.max(F.when(F.col("recency") == 1, F.col("members"))).alias("members_last"),
        F.max(F.when(F.col("recency") == 1, F.col("cross_rack_partitions"))).alias("cross_rack_last"),
        F.max(F.when(F.col("recency") == 1, F.col("imbalance"))).alias("imbalance_last"),
        F.sum(F.col("probing").cast("long")).alias("probing_rebalances"),
    ).withColumn(
        "per_hour",
        F.when(F.col("last_ms") > F.col("first_ms"),
               F.col("rebalances") / ((F.col("last_ms") - F.col("first_ms")) / 3_600_000.0)),
    )
    settle = episodes.groupBy("group_id").agg(
        F.count("*").alias("episodes"),
        F.sum(F.col("settled").cast("long")).alias("episodes_settled"),
        F.percentile("settle_s", 0.5).alias("settle_p50_s"),
        F.max("settle_s").alias("settle_max_s"),
    )
    groups = groups.join(settle, "group_id", "left").fillna({"episodes": 0, "episodes_settled": 0})
    groups.orderBy("group_id").write.mode("overwrite").parquet(str(out / "groups"))

    if bucket_s is None:
        span = records.agg(F.min("time_ms").alias("first"), F.max("time_ms").alias("last")).first()
        bucket_s = bucket_for_span(((span["last"] or 0) - (span["first"] or 0)) / 1000.0)
    bucket_ms = int(bucket_s) * 1000
    timeline = (
        records.withColumn("bucket_ms", F.floor(F.col("time_ms") / bucket_ms) * bucket_ms)
        .groupBy("group_id", "bucket_ms").agg(
            F.count("*").alias("rebalances"),
            F.sum("tasks_moved").alias("tasks_moved"),
            F.max("warmups").alias("warmups_max"),
            F.avg("warmups").alias("warmups_mean"),
            F.avg("imbalance").alias("imbalance_mean"),
            F.avg("cross_rack_partitions").alias("cross_rack_mean"),
            F.max("lag_p95").alias("lag_p95_max"),
        )
    )
    timeline.orderBy("group_id", "bucket_ms").write.mode("overwrite").parquet(str(out / "timeline"))
    lags = (records.select("group_id", F.posexplode("lag_hist").alias("bucket", "count"))
            .groupBy("group_id", "bucket").agg(F.sum("count").alias("count")))
    labels = F.element_at(F.array(*[F.lit(b) for b in LAG_BUCKETS]), F.col("bucket") + 1)
    lags = lags.withColumn("label", labels)
    lags.orderBy("group_id", "bucket").write.mode("overwrite").parquet(str(out / "lags"))
    bad_summary = bad.groupBy("error").agg(F.count("*").alias("count"), F.min("source").alias("example_file"))
    bad_summary.orderBy(F.desc("count")).write.mode("overwrite").parquet(str(out / "bad_lines"))

    data = _report_data(spark, out, files, parsed_count=good.count())
    data["bucket_s"] = int(bucket_s)
    if report:
        from pipeline.report import analytics_report

        write_report(out, analytics_report(data))
    else:
        write_report(out, None)
    return data


def _require_records(parsed: Any, bad: Any, files: int) -> None:
    """Raise ``InvalidLog`` when no line is a valid record: an input that is all bad lines, or no
    rebalance log at all, would otherwise give an empty report and look like a quiet log."""
    from pyspark.sql import functions as F

    counts = parsed.agg(F.count("*").alias("lines"), F.count("error").alias("bad")).first()
    lines = counts["lines"]
    if lines > counts["bad"]:
        return
    problem = ""
    if lines:
        top = bad.groupBy("error").count().orderBy(F.desc("count"), "error").first()
        problem = f"; most common problem ({_plural(top['count'], 'line')}): {' '.join(top['error'].split())}"
    raise InvalidLog(f"LOGS: none of the {_plural(lines, 'line')} read from {_plural(files, 'file')} "
                     f"is a valid rebalance-log record{problem}")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


#: Episodes listed in the report (the ``episodes`` table has them all, and the report says how many).
REPORT_ROWS = 50
#: Groups in the episodes' box plot: those with the most settled episodes, each from all of them.
BOX_GROUPS = 16
#: Groups in the timelines: those with the most buckets, each drawn whole; a group with more
#: than ``TIMELINE_POINTS`` buckets is left out (the report says so; a larger ``--bucket-s`` helps).
TIMELINE_GROUPS = 8
TIMELINE_POINTS = 5_000


def _report_data(spark: Any, out: Path, files: list[str], parsed_count: int) -> dict[str, Any]:
    """Small aggregates for the report, read back from the tables just written: what the report
    draws or lists is bounded, each count of what it leaves out is computed in Spark."""
    from pyspark.sql import functions as F

    def read(name: str) -> Any:
        return read_table(spark, out, name)

    records = read("records")
    record_count = records.count()
    lag_rows: dict[str, list[int]] = {}
    for row in read("lags").collect():
        lag_rows.setdefault(row["group_id"], [0] * len(LAG_BUCKETS))[row["bucket"]] = row["count"]
    bad = [r.asDict() for r in read("bad_lines").collect()]
    episodes = read("episodes")
    boxes = (episodes.where("settled").groupBy("group_id")
             .agg(F.count("*").alias("episodes"), F.min("settle_s").alias("min"), F.max("settle_s").alias("max"),
                  F.percentile("settle_s", [0.25, 0.5, 0.75]).alias("quartiles")))
    timeline = read("timeline")
    # one row per group, counted once: what is drawn and what is left out both read it
    buckets = {row.group_id: row.buckets for row in timeline.groupBy("group_id").agg(F.count("*").alias("buckets")).collect()}
    drawn = sorted((group for group, count in buckets.items() if count <= TIMELINE_POINTS),
                   key=lambda group: (-buckets[group], group))[:TIMELINE_GROUPS]
    return {
        "counts": {
            "files": len(files),
            "records": record_count,
            "groups": read("groups").count(),
            "bad_lines": sum(r["count"] for r in bad),
            "duplicates": parsed_count - record_count,
        },
        "groups": [r.asDict() for r in read("groups").orderBy("group_id").collect()],
        "episodes": [r.asDict() for r in episodes.orderBy("group_id", "start_ms").limit(REPORT_ROWS).collect()],
        "episodes_total": episodes.count(),
        "episode_boxes": [r.asDict() for r in boxes.orderBy(F.desc("episodes"), "group_id").limit(BOX_GROUPS).collect()],
        "episode_groups": boxes.count(),
        "timeline": [r.asDict() for r in timeline.where(F.col("group_id").isin(drawn))
                     .orderBy("group_id", "bucket_ms").collect()],
        "timeline_groups": len(buckets),
        "timeline_too_long": sum(count > TIMELINE_POINTS for count in buckets.values()),
        "timeline_points": TIMELINE_POINTS,
        "moved_hist": [r.asDict() for r in records.groupBy("tasks_moved").count().orderBy("tasks_moved").collect()],
        "lag_hist": [{"group_id": g, "hist": h} for g, h in sorted(lag_rows.items())],
        "lag_buckets": list(LAG_BUCKETS),
        "bad": bad,
        "triggers": [r.asDict() for r in records.groupBy("group_id", "trigger").agg(F.count("*").alias("count"))
                     .orderBy("group_id", "trigger").collect()],
    }
