"""`sharp-dagster`: the project's command line. One module of this package per group of sub-commands; the demo's
group is registered when the demo is installed (`sharp_dagster/demo/` may be deleted).

Every error reaches the user as one line on stderr and a non-zero exit status: argument errors (exit 2) from
argparse with the types of `cli/args.py`, refusals (`CliError`, exit 2) from the commands, and anything else (exit
1) from the one handler in `main`. `--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from typing import NoReturn

# Modules that contribute sub-commands through `register(subparsers)`.
COMMAND_MODULES = [
    "sharp_dagster.cli.log",
    "sharp_dagster.cli.lineage",
    "sharp_dagster.cli.dqc",
    "sharp_dagster.cli.cdc",
    "sharp_dagster.cli.tables",
    "sharp_dagster.cli.ods",
]
# The sample shop is a user of the product, not a part of it: its commands are there only when it is.
DEMO_COMMANDS = "sharp_dagster.demo.cli"
# A message longer than this is cut: one line must stay readable in a terminal and a CI log.
MAX_MESSAGE = 2000


def command_modules() -> list[str]:
    demo = [DEMO_COMMANDS] if importlib.util.find_spec("sharp_dagster.demo") is not None else []
    return demo + COMMAND_MODULES


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


class CliParser(argparse.ArgumentParser):
    """argparse, with its errors on one line (argparse prints the usage first): `prog: error: ... (see --help)`.

    Sub-command parsers are of the same class (argparse creates them with `type(parent)`)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def one_line(text: str) -> str:
    """The message's lines joined into one, secrets masked (`sharp_dagster.redact`), cut at MAX_MESSAGE."""
    from sharp_dagster.redact import scrub_text

    line = "; ".join(part.strip() for part in str(text).splitlines() if part.strip())
    line = scrub_text(line) or ""
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 3] + "..."


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="sharp-dagster", description=__doc__)
    parser.add_argument(
        "--debug", action="store_true", help="show the full traceback of an error (before the command)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in command_modules():
        importlib.import_module(name).register(sub)
    return parser


def _unexpected(exc: BaseException) -> str:
    """One line for an error no command turned into a CliError: its kind and its first words, never a trace."""
    from sharp_dagster.db import BadDatabaseUrl, DatabaseUnavailable

    if isinstance(exc, BadDatabaseUrl | DatabaseUnavailable):
        return str(exc)
    java = getattr(exc, "java_exception", None)
    if java is not None:  # a Py4J error: the Java exception's own message, not Py4J's call description
        lines = str(java.getMessage() or java.getClass().getName()).strip().splitlines()
        # Spark's message ends at its SQLSTATE; the plan it prints after that is no help on one line.
        end = next((i for i, line in enumerate(lines) if "SQLSTATE:" in line), len(lines) - 1)
        return " ".join(lines[: end + 1])
    module = type(exc).__module__
    if module.startswith("sqlalchemy"):
        # SQLAlchemy appends the statement and a link to its docs: the driver's own message is the first line.
        return f"database error: {str(getattr(exc, 'orig', None) or exc).splitlines()[0]}"
    return f"{type(exc).__name__}: {exc}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a refused argument (2, already printed on one line)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        result = args.func(args)
    except CliError as exc:
        if args.debug:
            raise
        print(f"sharp-dagster: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - the one place that turns any failure into one line
        if args.debug:
            raise
        print(f"sharp-dagster: error: {one_line(_unexpected(exc))} (--debug shows more)", file=sys.stderr)
        return 1
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
