"""A test module is not a library: what tests share lives in support modules (`merge_reference.py`,
`kill_support.py`, `iceberg_support.py`, conftest fixtures...), so no test module imports another one and running or
moving one test file never runs or breaks another's import (a static scan, no imports)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imports_of_test_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of each import in `path` that names a test module (`test_*`), as a module or from one."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if _is_test(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if _is_test(node.module):
                found.append((node.lineno, node.module))
            found += [
                (node.lineno, f"{node.module}.{a.name}") for a in node.names if a.name.startswith("test_")
            ]
    return found


def _is_test(module: str) -> bool:
    return module.split(".")[-1].startswith("test_")


def _offenders(root: Path) -> dict[str, list[tuple[int, str]]]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        if found := imports_of_test_modules(path):
            out[path.relative_to(root).as_posix()] = found
    return out


def test_no_test_module_imports_another():
    assert _offenders(TESTS) == {}, "move what is shared into a support module (not named test_*)"


def test_the_scan_sees_a_planted_import(tmp_path):
    (tmp_path / "test_a.py").write_text(
        "from pkg.test_b import helper\nfrom pkg import test_c\nimport pkg.test_d\nfrom pkg.support import x\n",
        encoding="utf-8",
    )
    assert _offenders(tmp_path) == {"test_a.py": [(1, "pkg.test_b"), (2, "pkg.test_c"), (3, "pkg.test_d")]}
