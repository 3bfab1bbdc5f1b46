"""``python -m assignor FILE|-``: assign one scenario (docs/scenario-format.md) and print it.

Exit 0 with the assignment on standard output; exit 2 with one line naming the offending
field on standard error for invalid input. Fields the format does not define are no error
(scenario.md: "Fields may be added"), but each is named once on standard error, since a
misspelt one would silently take its default. ``--explain`` adds the assignor's reasons.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from assignor import solve
from assignor.model import InvalidInput
from assignor.scenario import (
    SCENARIO_VERSION,
    parse_problem,
    read_document,
    result_to_document,
    unknown_fields,
)

# Spaces per level of --indent: a readable page needs a few; 10^8 wrote 9 GB of spaces
MAX_INDENT = 16


def _indent(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to {MAX_INDENT}, got {text!r}") from None
    if not 0 <= value <= MAX_INDENT:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to {MAX_INDENT}, got {value}")
    return value


def main(argv: list[str] | None = None, prog: str = "python -m assignor") -> int:
    # One BLAS thread: the assignor does no linear algebra, and scipy (loaded for a warm start)
    # would otherwise start a thread per core that spins: 0.13 s more CPU per run, measured.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0],
                                     epilog="The scenario and result formats: docs/scenario-format.md.")
    parser.add_argument("scenario", help="scenario JSON file, or - for standard input")
    parser.add_argument("--explain", action="store_true", help="add the assignor's reason for every placement and the rack-awareness report")
    parser.add_argument("--indent", type=_indent, default=None,
                        help=f"pretty-print the JSON with this many spaces per level, 0 to {MAX_INDENT} (default: one line)")
    args = parser.parse_args(argv)
    try:
        if args.scenario == "-":
            stdin = getattr(sys.stdin, "buffer", None)  # a caller's text stream has no bytes to check
            text = stdin.read().decode("utf-8") if stdin is not None else sys.stdin.read()  # strictly, as a file
        else:
            with open(args.scenario, encoding="utf-8") as handle:
                text = handle.read()
    except OSError as error:
        print(f"error: scenario: cannot read {args.scenario}: {error.strerror}", file=sys.stderr)
        return 2
    except UnicodeDecodeError:
        print("error: scenario: not UTF-8 text", file=sys.stderr)
        return 2
    try:
        document = read_document(text)
        problem = parse_problem(document)
    except InvalidInput as error:
        print(f"error: {error.field}: {error.message}", file=sys.stderr)
        return 2
    for field in unknown_fields(document):
        print(f"warning: {field}: not a field of scenario format v{SCENARIO_VERSION}; ignored", file=sys.stderr)
    result = solve(problem)
    try:
        json.dump(result_to_document(result, explain=args.explain), sys.stdout, indent=args.indent)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left early (`| head`): stop quietly, as Python's docs advise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
