"""Imports sit at the top of a module, so the import graph is what the file's head says (a static scan, no imports).

The command line is the exception by design: it imports the engines (Spark, Dagster, SQLAlchemy...) inside the
command that needs them, so `sharp-dagster --help` and the quick commands start fast (`test_cli_startup.py`).
Elsewhere an import stays inside a function only when moving it would load a heavy client where it is not needed;
each such import carries a comment saying so, and its module is on the list below.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sharp_dagster"

# Whole parts where in-function imports are the rule: the command line and what it imports before dispatch.
COMMAND_LINE = ("cli/", "demo/cli.py")
# Modules allowed in-function imports, each for start-up time (the reason is the comment on the import itself).
ALLOWED = {
    "assets/cdc_assets.py",  # the landing loads the Kafka client: only a run needs it
    "cdc/landing/land.py",  # Spark's Arrow types load pyarrow: only a landing needs it
    "cdc/landing/parser.py",  # pyarrow: only a landing needs it, the code location imports this module
    "warehouse/layout.py",  # the done markers load pyspark: `log status` imports the layout without Spark
    "sensors/cdc.py",  # the Kafka client loads when the sensor ticks, not when the code location starts
    "lineage/openlineage.py",  # Spark's version is optional: the lineage commands run without Spark
    "redact.py",  # SQLAlchemy: the command line imports redact before dispatch
    "demo/run.py",  # the definitions load after the demo resets its state: `sharp-dagster demo`'s own timing
}


def in_function_imports(path: Path) -> list[int]:
    """Line numbers of the import statements inside any function of `path`."""
    lines = set()
    for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            lines |= {n.lineno for n in ast.walk(fn) if isinstance(n, ast.Import | ast.ImportFrom)}
    return sorted(lines)


def _found() -> dict[str, list[int]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "node_modules" in path.parts:
            continue
        rel = path.relative_to(PACKAGE).as_posix()
        lines = in_function_imports(path)
        if lines and not rel.startswith(COMMAND_LINE):
            found[rel] = lines
    return found


def test_no_import_inside_a_function_outside_the_allow_list():
    found = _found()
    outside = {rel: lines for rel, lines in found.items() if rel not in ALLOWED}
    assert not outside, f"imports inside functions (move them to the top, or justify and list): {outside}"
    assert set(found) == ALLOWED, f"on the allow-list without an in-function import: {ALLOWED - set(found)}"


def test_the_scan_sees_an_import_inside_a_function(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\n\n\ndef f():\n    import sys\n\n    return sys, os\n", encoding="utf-8")
    assert in_function_imports(module) == [5]
