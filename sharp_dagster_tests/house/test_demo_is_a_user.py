"""The demo is a user of the product, not a part of it: the package without `sharp_dagster/demo/` still loads the
same code location and runs its command line, and no production module imports the demo."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import sharp_dagster

PACKAGE = Path(sharp_dagster.__file__).resolve().parent
DEMO = "sharp_dagster.demo"
CLI = Path(sys.executable).with_name("sharp-dagster")

_LOAD = textwrap.dedent(
    """
    import importlib.util, json, sys, warnings
    warnings.simplefilter("ignore")
    import sharp_dagster
    from dagster import Definitions
    from sharp_dagster.definitions import defs
    assert isinstance(defs, Definitions)
    defs.resolve_job_def("warehouse_daily"), defs.resolve_job_def("binlog_hourly")
    keys = sorted(k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys())
    print(json.dumps({
        "package": sharp_dagster.__file__,
        "keys": keys,
        "demo_found": importlib.util.find_spec("sharp_dagster.demo") is not None,
        "demo_imported": [m for m in sys.modules if m.startswith("sharp_dagster.demo")],
    }))
    """
)


def _isolated(root: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """Run Python with only `root` and the site-packages on its path: `-S` skips the `.pth` files, so the editable
    install's finder (which would find the main checkout's `sharp_dagster`) is not there either."""
    site = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SHARP_WAREHOUSE_SQL_DIR")}
    env["PYTHONPATH"] = os.pathsep.join([str(root), *sorted(site)])
    return subprocess.run(
        [sys.executable, "-S", *argv], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )


def _load(root: Path) -> dict:
    proc = _isolated(root, ["-c", _LOAD])
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert Path(result["package"]).resolve().parent == (root / "sharp_dagster").resolve()
    return result


def _commands(root: Path) -> set[str]:
    proc = _isolated(root, [str(CLI), "--help"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    # argparse lists each sub-command on a line of its own, indented by four spaces.
    return set(re.findall(r"^ {4}([a-z][a-z-]*)(?: {2,}|$)", proc.stdout, re.MULTILINE))


def test_the_package_without_the_demo_loads_the_same_definitions_and_cli(tmp_path):
    copy = tmp_path / "sharp_dagster"
    shutil.copytree(
        PACKAGE, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "node_modules")
    )
    shutil.rmtree(copy / "demo")

    full = _load(PACKAGE.parent)
    assert full["demo_found"] and full["keys"]
    without = _load(tmp_path)
    assert not without["demo_found"] and without["demo_imported"] == []
    assert without["keys"] == full["keys"]
    assert full["demo_imported"] == [], "loading the code location imported the demo"

    full_commands = _commands(PACKAGE.parent)
    assert {"demo", "generate", "log", "cdc", "lineage"} <= full_commands
    assert _commands(tmp_path) == full_commands - {"demo", "generate"}


def _demo_imports(path: Path) -> list[str]:
    """The demo modules `path` imports (`import`, `from ... import`, relative imports), and module-path strings
    naming the demo (for `importlib`)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if re.fullmatch(r"sharp_dagster\.demo(\.\w+)*", node.value) else []
        found += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {n}" for n in names if _is_demo(n)]
    return found


def _is_demo(name: str) -> bool:
    return name == DEMO or name.startswith(DEMO + ".")


def test_no_production_module_imports_the_demo():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if (PACKAGE / "demo") in path.parents or "node_modules" in path.parts:
            continue
        offenders += _demo_imports(path)
    # The one allowed mention: the CLI registers the demo's commands when the demo is there (find_spec).
    allowed = {"sharp_dagster/cli/main.py"}
    assert [o for o in offenders if o.split(":")[0] not in allowed] == []
    assert any(o.startswith("sharp_dagster/cli/main.py") for o in offenders), (
        "the scan no longer sees the CLI's hook"
    )


def test_the_scan_sees_every_form_of_import(tmp_path, monkeypatch):
    fake = tmp_path / "sharp_dagster"
    (fake / "assets").mkdir(parents=True)
    for i, line in enumerate(
        [
            "import sharp_dagster.demo.shop",
            "from sharp_dagster.demo import shop",
            "from sharp_dagster import demo",
            "from ..demo.shop import TABLES",
            "import importlib; importlib.import_module('sharp_dagster.demo.run')",
        ]
    ):
        module = fake / "assets" / f"m{i}.py"
        module.write_text(line + "\n")
        monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
        assert _demo_imports(module), line
    clean = fake / "assets" / "clean.py"
    clean.write_text("from sharp_dagster import demography\nimport sharp_dagster.demos\n")
    assert _demo_imports(clean) == []
