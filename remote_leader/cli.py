"""``remote-leader``: one console command for every part of the product.

Each subcommand is registered by the package that owns it (``server.cli``, ``client.cli``,
``pipeline.cli``, and ``assign`` here), imported lazily so that ``remote-leader assign``
never loads gRPC or Spark. This module is the composition root: the only code that may
import every package.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module that provides register(subparsers) and whose parser sets func
_COMMANDS = {
    "serve": "server.cli",
    "describe": "server.cli",
    "groups": "server.cli",
    "demo": "client.cli",
    "sidecar": "client.cli",
    "simulate": "pipeline.cli",
    "analyze": "pipeline.cli",
}


def _register_assign(subparsers) -> None:
    parser = subparsers.add_parser("assign", help="assign one scenario file (same as python -m assignor)",
                                   epilog="The scenario and result formats: docs/scenario-format.md.")
    parser.add_argument("scenario", help="scenario JSON file (docs/scenario-format.md), or - for standard input")
    parser.add_argument("--explain", action="store_true",
                        help="add the assignor's reason for every placement and the rack-awareness report")
    parser.add_argument("--indent", type=int, default=None,
                        help="pretty-print the JSON with this many spaces per level (default: one line)")

    def run(args: argparse.Namespace) -> int:
        from assignor.__main__ import main as assign_main

        argv = [args.scenario] + (["--explain"] if args.explain else [])
        if args.indent is not None:
            argv += ["--indent", str(args.indent)]
        return assign_main(argv, prog="remote-leader assign")

    parser.set_defaults(func=run)


def build_parser(wanted: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="remote-leader", description="A remote group leader for stream workers.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _register_assign(subparsers)
    modules = sorted(set(_COMMANDS.values())) if wanted not in _COMMANDS else [_COMMANDS[wanted]]
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            if wanted in _COMMANDS:
                raise SystemExit(f"remote-leader {wanted}: unavailable ({error}); is the package installed with its extras?") from None
            continue
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    wanted = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(wanted)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
