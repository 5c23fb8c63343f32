"""`sharp-dagster`: the project's command line. One module of this package per group of sub-commands; the demo's
group is registered when the demo is installed (`sharp_dagster/demo/` may be deleted)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

# Modules that contribute sub-commands through `register(subparsers)`.
COMMAND_MODULES = [
    "sharp_dagster.cli.log",
    "sharp_dagster.cli.lineage",
    "sharp_dagster.cli.dqc",
    "sharp_dagster.cli.cdc",
    "sharp_dagster.cli.tables",
]
# The sample shop is a user of the product, not a part of it: its commands are there only when it is.
DEMO_COMMANDS = "sharp_dagster.demo.cli"


def command_modules() -> list[str]:
    demo = [DEMO_COMMANDS] if importlib.util.find_spec("sharp_dagster.demo") is not None else []
    return demo + COMMAND_MODULES


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sharp-dagster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in command_modules():
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except CliError as exc:
        print(f"sharp-dagster: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
