"""No module outside `spark/` touches another module's or object's private members (a static scan of the
package, no imports): an attribute whose name starts with one `_`, read on anything but `self` or `cls`, is an
offence unless the module defines that name itself (a class's own members, used by the module that holds the
class); so is `from <module> import _name`. PySpark's and Iceberg's Java peers are reached through `spark/`'s public
operations (`spark/java.py`, `spark/refs.py`, `IcebergBase.java_table`). A name on `ALLOWED` is a third party's
public API that happens to start with `_`; each says why. Tags are made in one place (`spark/refs.py`) and
references change only inside `spark/`."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sharp_dagster"
OWN = "spark"  # the package that may touch PySpark's and Iceberg's private members (and its own)

ALLOWED = {
    "_SubParsersAction": "argparse's type of `add_subparsers()`' result, which has no public name",
    "_ALL_BROKERS_DOWN": "confluent_kafka's name of librdkafka's local error code (its documented constant)",
    "_AUTHENTICATION": "confluent_kafka's name of librdkafka's local error code (its documented constant)",
    "_1": "a Scala Tuple2's first field, as Py4J shows it",
    "_2": "a Scala Tuple2's second field, as Py4J shows it",
    "_mapping": "SQLAlchemy's `Row._mapping`, its public API (underscored so as not to clash with column names)",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _own_names(tree: ast.AST) -> set[str]:
    """The private names a module defines: its functions and classes (and their members), the attributes it sets
    on `self`/`cls`, and the names it assigns."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if _private(n)}


def offences(path: Path) -> list[str]:
    """`line: what` for every private member of another module or object that `path` touches."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = _own_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [
                f"{node.lineno}: from {node.module} import {a.name}" for a in node.names if _private(a.name)
            ]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            receiver = node.value
            if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
                continue
            if node.attr in own or node.attr in ALLOWED:
                continue
            found.append(f"{node.lineno}: {ast.unparse(receiver)}.{node.attr}")
    return found


def _scan(package: Path) -> dict[str, list[str]]:
    out = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if rel.parts[0] == OWN or "node_modules" in rel.parts:
            continue
        if found := offences(path):
            out[str(rel)] = found
    return out


def test_no_module_outside_spark_touches_a_private_member_of_another():
    assert _scan(PACKAGE) == {}


def test_the_scan_sees_a_planted_offender_and_only_it(tmp_path):
    package = tmp_path / "sharp_dagster"
    (package / "cdc").mkdir(parents=True)
    (package / "spark").mkdir()
    (package / "spark" / "inner.py").write_text("x = store._table(ref)\n")  # spark/'s own business
    (package / "cdc" / "bad.py").write_text(
        "from sharp_dagster.spark.iceberg_base import _VALUE\n"
        "class _Walk:\n"
        "    def _step(self):\n"
        "        self._seen = 1\n"
        "        return _Walk._step, self._other, other._seen\n"  # the module's own names
        "def f(store, ref, spark, parser):\n"
        "    parser.add_subparsers()  # argparse._SubParsersAction is allowed by name\n"
        "    kind: argparse._SubParsersAction\n"
        "    store._commit_refs(ref, None)\n"
        "    return spark.sparkContext._jvm, __name__.__class__\n"
    )
    assert _scan(package) == {
        "cdc/bad.py": [
            "1: from sharp_dagster.spark.iceberg_base import _VALUE",
            "9: store._commit_refs",
            "10: spark.sparkContext._jvm",
        ]
    }


def test_every_allowed_name_is_still_used():
    used = {
        node.attr
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute)
    }
    assert set(ALLOWED) - used == set()


def _calls_of(names: set[str]) -> dict[str, set[str]]:
    """Module (relative to the package) -> which of `names` it reads as an attribute."""
    out: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        hits = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in names}
        if hits:
            out[str(path.relative_to(PACKAGE))] = hits
    return out


def test_tags_are_made_in_one_place():
    assert _calls_of({"createTag", "replaceTag"}) == {"spark/refs.py": {"createTag", "replaceTag"}}


def test_references_change_only_inside_spark():
    changers = _calls_of({"manageSnapshots"})
    assert changers and all(module.startswith(f"{OWN}/") for module in changers), changers
