"""``remote-leader simulate`` and ``remote-leader analyze``: the pipeline's two commands.

Registered by the composition root (``remote_leader.cli``) through ``register(subparsers)``.
Spark is imported only when a command runs, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers) -> None:
    from pipeline import sweep

    simulate = subparsers.add_parser(
        "simulate", help="what-if sweep: simulate scaling events over a grid of groups and assignor configs",
        description="Simulate every run of a grid on Spark; write Parquet tables and report.html to --out.")
    sweep.add_arguments(simulate)
    simulate.set_defaults(func=sweep.run_from_args)

    analyze = subparsers.add_parser(
        "analyze", help="rebalance-log analytics: what the groups' rebalances cost",
        description="Read rebalance logs (files, or state/log directories incl. rotated files) on Spark; "
                    "write Parquet tables and report.html to --out.")
    analyze.add_argument("logs", nargs="+", metavar="LOGS", help="rebalance-log files or directories")
    analyze.add_argument("--out", required=True, help="output directory")
    analyze.add_argument("--master", default=None, help="Spark master (default local[2]; spark-submit's own)")
    analyze.add_argument("--bucket-s", type=int, default=None,
                         help="timeline bucket in seconds (default: a round size giving about 60 buckets over the log's span)")
    analyze.add_argument("--partitions", type=int, default=None, help="Spark partitions for the log lines")
    analyze.add_argument("--no-report", action="store_true", help="skip report.html")
    analyze.set_defaults(func=run_analyze)


def run_analyze(args: argparse.Namespace) -> int:
    from pipeline.analytics import MAX_BUCKET_S, analyze
    from pipeline.output import discard_out
    from pipeline.rebalance_log import InvalidLog, expand_paths
    from pipeline.spark import command_session
    from pipeline.sweep import argument_problem

    if args.bucket_s is not None and not 1 <= args.bucket_s <= MAX_BUCKET_S:
        print(f"analyze: --bucket-s: expected seconds in [1, {MAX_BUCKET_S}] (a year), got {args.bucket_s}",
              file=sys.stderr)
        return 2
    try:
        files = expand_paths(args.logs)
    except InvalidLog as error:
        print(f"analyze: {error}", file=sys.stderr)
        return 2
    existed = Path(args.out).exists()
    problem = argument_problem(args.out, args.partitions, args.master, command="analyze")
    if problem:
        print(f"analyze: {problem}", file=sys.stderr)
        return 2
    print(f"analyze: {len(files)} log files", file=sys.stderr)
    with command_session("analyze", args.master, "remote-leader analyze", args.out, existed) as spark:
        if spark is None:
            return 2
        try:
            data = analyze(spark, files, args.out, bucket_s=args.bucket_s, report=not args.no_report,
                           partitions=args.partitions)
        except InvalidLog as error:  # no line was a valid record: bad input, not an empty report
            print(f"analyze: {error}", file=sys.stderr)
            discard_out(args.out, existed)
            return 2
    print(json.dumps({"out": str(args.out), **data["counts"]}))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``spark-submit pipeline/cli.py simulate|analyze ...`` (or ``python -m pipeline.cli``)."""
    parser = argparse.ArgumentParser(prog="pipeline", description="remote-leader's Spark pipeline")
    register(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
