"""The floors of the house (docs/architecture.md): every module imports only from its own floor or the floors
below, engines import no Dagster, and nothing but the command line's guarded hook names the demo."""

from __future__ import annotations

import ast
from pathlib import Path

import sharp_dagster

PACKAGE = Path(sharp_dagster.__file__).resolve().parent

# Top-level parts of the package, by floor (0 = the ground).
FLOORS = {
    0: {
        "__init__",
        "settings",
        "db",
        "periods",
        "naming",
        "redact",
        "jvm",
        "failpoints",
        "dagster_home",
        "servers",
    },
    1: {"joblog", "dqc", "cdc", "lineage", "spark", "alerts"},
    2: {"warehouse"},
    3: {"logdriven", "partitions", "resources", "publish"},  # the Dagster glue the assets stand on
    4: {"assets", "sensors"},  # declarations and thin compute functions
    5: {"definitions"},
    6: {"cli"},
}
FLOOR_OF = {part: floor for floor, parts in FLOORS.items() for part in parts}
BESIDE = {"demo"}  # a user of the product: may import anything, imported by nothing
DAGSTER_FROM = 3  # the lowest floor that may import Dagster


def _part(module: str) -> str | None:
    pieces = module.split(".")
    if pieces[0] != "sharp_dagster":
        return None
    return pieces[1] if len(pieces) > 1 else "__init__"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a module file, relative imports resolved."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            found.append((node.lineno, base))
    return found


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        if "node_modules" in path.parts:
            continue
        part = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        yield path, part


def test_every_part_of_the_package_has_a_floor():
    parts = {part for _, part in _modules()}
    assert parts - set(FLOOR_OF) - BESIDE == set(), (
        "a new top-level module: give it a floor here and in the docs"
    )


def test_no_import_runs_back_up():
    offenders = []
    for path, part in _modules():
        if part in BESIDE:
            continue
        floor = FLOOR_OF[part]
        for line, module in _imports(path):
            where = f"{path.relative_to(PACKAGE.parent)}:{line}: {module}"
            target = _part(module)
            if target in BESIDE:
                offenders.append(f"{where} (the demo)")
            elif target is not None and FLOOR_OF[target] > floor:
                offenders.append(f"{where} (floor {floor} -> {FLOOR_OF[target]})")
            elif module.split(".")[0] == "dagster" and floor < DAGSTER_FROM:
                offenders.append(f"{where} (Dagster below the glue)")
    assert offenders == []


def test_the_scan_sees_an_upward_import(tmp_path):
    module = tmp_path / "sharp_dagster" / "joblog" / "bad.py"
    module.parent.mkdir(parents=True)
    module.write_text("from ..warehouse import layout\nimport dagster\nfrom sharp_dagster.cli import main\n")
    global PACKAGE
    saved, PACKAGE = PACKAGE, tmp_path / "sharp_dagster"
    try:
        assert [m for _, m in _imports(module)] == ["sharp_dagster.warehouse", "dagster", "sharp_dagster.cli"]
    finally:
        PACKAGE = saved


def test_no_file_is_over_600_lines():
    long = {
        str(p.relative_to(PACKAGE.parent)): n
        for p, _ in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600
    }
    assert long == {}
