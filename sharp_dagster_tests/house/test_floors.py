"""The floors of the house (docs/architecture.md): every module imports only from its own floor or the floors
below, no modules import each other in a circle, engines import no Dagster, nothing but the command line's guarded
hook names the demo, and no file or function is too long to read (functions over 80 lines only on the commented
allow-list below)."""

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
        "servers",  # tooling on the ground, not the product: see TOOLING
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
# Test, benchmark and demo tooling (local servers: broker, MariaDB, HDFS, Spark cluster, dagster dev, SeaweedFS,
# and how their processes start and stop). It lives in the package so the demo can start a broker, sits on the
# ground (imports only the ground floor), and no part of the product imports it: only the demo, tests and bench.
TOOLING = {"servers"}
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


# Circles of modules that import each other (any import: at the top, inside a function, or for type checking only,
# as a reader follows them), each with why it stays for now.
CIRCLES_ALLOWED: set[frozenset[str]] = set()

MAX_FUNCTION_LINES = 80
# Functions over MAX_FUNCTION_LINES, each with why it is not split yet. Nothing else may grow past the limit.
LONG_FUNCTIONS_ALLOWED = {
    # A migration is history: its table definitions stay as released, whatever their length.
    "sharp_dagster/joblog/migrations/versions/0001_job_log.py:_tables",
}


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


def _tooling_offenders(package: Path) -> list[str]:
    """Imports of the tooling (`TOOLING`) from a part of the product (anything but the tooling and the demo)."""
    offenders = []
    for path in sorted(package.rglob("*.py")):
        part = path.relative_to(package).parts[0].removesuffix(".py")
        if part in TOOLING | BESIDE:
            continue
        for line, module in _imports(path):
            if _part(module) in TOOLING:
                offenders.append(f"{path.relative_to(package.parent)}:{line}: {module}")
    return offenders


def test_no_part_of_the_product_imports_the_tooling():
    assert _tooling_offenders(PACKAGE) == []


def test_the_tooling_scan_sees_an_import_of_the_servers(tmp_path, monkeypatch):
    package = tmp_path / "sharp_dagster"
    monkeypatch.setattr(f"{__name__}.PACKAGE", package)  # `_imports` resolves modules against it
    (package / "assets").mkdir(parents=True)
    (package / "demo").mkdir()
    (package / "assets" / "bad.py").write_text("from sharp_dagster.servers.broker import LocalBroker\n")
    (package / "demo" / "ok.py").write_text("from sharp_dagster.servers.broker import LocalBroker\n")
    assert _tooling_offenders(package) == ["sharp_dagster/assets/bad.py:1: sharp_dagster.servers.broker"]


def test_no_file_is_over_500_lines():
    long = {
        str(p.relative_to(PACKAGE.parent)): n
        for p, _ in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500
    }
    assert long == {}


# The rooms of `cdc/` (its package docstring), lowest first: a room imports only rooms of a lower floor within
# `cdc/` (or its own). `capture/` and `landing/` share a floor and do not import each other.
CDC_ROOMS = {"source": 0, "change": 1, "capture": 2, "landing": 2, "merge": 3, "ods": 4}


def _cdc_room(module: str) -> str | None:
    pieces = module.split(".")
    return pieces[2] if pieces[:2] == ["sharp_dagster", "cdc"] and len(pieces) > 2 else None


def _cdc_offenders(package: Path) -> list[str]:
    offenders = []
    for path in sorted((package / "cdc").rglob("*.py")):
        inside = path.relative_to(package / "cdc").parts
        if len(inside) == 1:
            if path.name != "__init__.py":
                offenders.append(f"{path.relative_to(package.parent)}: a module outside the rooms")
            continue
        room = inside[0]
        if room not in CDC_ROOMS:
            offenders.append(f"{path.relative_to(package.parent)}: a room not in CDC_ROOMS")
            continue
        for line, module in _imports(path):
            target = _cdc_room(module)
            if target is None or target == room:
                continue
            if target not in CDC_ROOMS or CDC_ROOMS[target] >= CDC_ROOMS[room]:
                offenders.append(f"{path.relative_to(package.parent)}:{line}: {module} ({room} -> {target})")
    return offenders


def test_every_cdc_room_imports_only_rooms_below_it():
    for room in CDC_ROOMS:
        assert (PACKAGE / "cdc" / room / "__init__.py").read_text(encoding="utf-8").startswith('"""'), room
    assert _cdc_offenders(PACKAGE) == []


def test_the_room_scan_sees_a_sideways_and_an_upward_import(tmp_path):
    package = tmp_path / "sharp_dagster"
    (package / "cdc" / "capture").mkdir(parents=True)
    (package / "cdc" / "capture" / "bad.py").write_text(
        "from sharp_dagster.cdc.landing import land\nfrom sharp_dagster.cdc.ods.store import x\n"
        "from sharp_dagster.cdc.change import messages\n"
    )
    (package / "cdc" / "loose.py").write_text("")
    global PACKAGE
    saved, PACKAGE = PACKAGE, package
    try:
        found = _cdc_offenders(package)
    finally:
        PACKAGE = saved
    assert found == [
        "sharp_dagster/cdc/capture/bad.py:1: sharp_dagster.cdc.landing (capture -> landing)",
        "sharp_dagster/cdc/capture/bad.py:2: sharp_dagster.cdc.ods.store (capture -> ods)",
        "sharp_dagster/cdc/loose.py: a module outside the rooms",
    ]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """module -> the modules of the package it imports. A package's `__init__` is left out: it only hands names
    on (an import of one of its names is followed to the module when that name is a module)."""
    names = {_module_name(path): path for path, _ in _modules() if path.name != "__init__.py"}
    graph: dict[str, set[str]] = {}
    for module, path in names.items():
        found = _imports(path)
        targets = {imported for _, imported in found}
        bases = dict(found)  # line -> the module of the import on it
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # `from package import module`
            if isinstance(node, ast.ImportFrom):
                targets.update(f"{bases[node.lineno]}.{alias.name}" for alias in node.names)
        graph[module] = {t for t in targets if t in names and t != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan), i.e. the import circles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(frozenset(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_circle_scan_finds_a_loop_and_only_the_loop():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}) == [frozenset("abc")]


def test_no_modules_import_each_other_in_a_circle():
    found = circles(_import_graph())
    assert [sorted(c) for c in found if c not in CIRCLES_ALLOWED] == []
    assert CIRCLES_ALLOWED <= set(found), "a circle on the allow-list is gone: take it off the list"


def _long_functions() -> dict[str, int]:
    long = {}
    for path, _ in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(PACKAGE.parent)}:{node.name}"] = lines
    return long


def test_no_function_is_over_80_lines_outside_the_allow_list():
    long = _long_functions()
    assert {name: n for name, n in long.items() if name not in LONG_FUNCTIONS_ALLOWED} == {}
    assert LONG_FUNCTIONS_ALLOWED <= set(long), "an allowed long function was split: take it off the list"
