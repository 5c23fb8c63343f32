"""Every environment variable the product reads is read in `settings.py`, so one file says what can be configured
(a static scan, no imports). Exporting a variable for a child process or for Dagster (`os.environ[...] = ...`,
`setdefault`, `pop`) is not a read; passing the whole environment on to a child process is.

The exceptions, each with why, are the list below.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sharp_dagster"

ALLOWED = {
    "settings.py": "the one place",
    # Test, benchmark and demo tooling, not the product: it passes the environment on to the servers it starts
    # and finds their programs (JAVA_HOME, the SeaweedFS build cache) as those tools do.
    "servers/": "tooling",
    # Which secret values to hide: it reads the variables that hold secrets (or the mapping it is given), to mask
    # them in any text; `settings.py` itself hides URLs through it.
    "redact.py": "the secrets to hide",
}
WRITES = {"setdefault", "pop", "update", "__setitem__", "__delitem__"}


def environment_reads(path: Path) -> list[int]:
    """Line numbers where `path` reads the environment: `os.environ` (or `environ` imported from `os`) used other
    than to set or drop a variable, and `os.getenv`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    names = {"environ"} if _imports_environ(tree) else set()
    lines = set()
    for node in ast.walk(tree):
        is_os = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"
        if is_os and node.attr in {"getenv", "getenvb"}:
            lines.add(node.lineno)
        elif (is_os and node.attr == "environ") or (isinstance(node, ast.Name) and node.id in names):
            if not _is_write(node, parents):
                lines.add(node.lineno)
    return sorted(lines)


def _imports_environ(tree: ast.AST) -> bool:
    return any(
        isinstance(n, ast.ImportFrom) and n.module == "os" and any(a.name == "environ" for a in n.names)
        for n in ast.walk(tree)
    )


def _is_write(node: ast.AST, parents: dict) -> bool:
    parent = parents.get(node)
    if isinstance(parent, ast.Subscript) and not isinstance(parent.ctx, ast.Load):
        return True  # os.environ[k] = v, del os.environ[k]
    return isinstance(parent, ast.Attribute) and parent.attr in WRITES


def _found(package: Path) -> dict[str, list[int]]:
    found = {}
    for path in sorted(package.rglob("*.py")):
        if "node_modules" in path.parts:
            continue
        rel = path.relative_to(package).as_posix()
        lines = environment_reads(path)
        if lines and not any(rel == a or (a.endswith("/") and rel.startswith(a)) for a in ALLOWED):
            found[rel] = lines
    return found


def test_the_environment_is_read_only_in_settings():
    assert _found(PACKAGE) == {}, "read the variable through a function of settings.py"


def test_every_exception_still_reads_the_environment():
    for allowed in ALLOWED:
        paths = sorted(PACKAGE.glob(f"{allowed}**/*.py")) if allowed.endswith("/") else [PACKAGE / allowed]
        assert any(environment_reads(p) for p in paths), f"{allowed} reads no variable: drop it from ALLOWED"


def test_the_scan_sees_a_planted_read(tmp_path):
    package = tmp_path / "sharp_dagster"
    (package / "joblog").mkdir(parents=True)
    (package / "joblog" / "bad.py").write_text(
        "import os\nfrom os import environ\n\n"
        "A = os.environ.get('X')\nB = os.getenv('Y')\nC = environ['Z']\nD = {**os.environ}\n"
        "os.environ['W'] = '1'\nos.environ.setdefault('V', '2')\nos.environ.pop('W')\n",
        encoding="utf-8",
    )
    (package / "settings.py").write_text("import os\n\nA = os.environ.get('X')\n", encoding="utf-8")
    assert _found(package) == {"joblog/bad.py": [4, 5, 6, 7]}
