"""The examples in the package's docstrings are run: a module with `>>>` examples must pass them all."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import sharp_dagster

ROOT = Path(sharp_dagster.__file__).parent


def _modules_with_examples() -> list[str]:
    names = []
    for info in pkgutil.walk_packages([str(ROOT)], prefix="sharp_dagster."):
        if info.name.endswith("__main__") or ".migrations" in info.name:
            continue  # running as a program, or loaded by Alembic only
        path = ROOT.joinpath(*info.name.split(".")[1:])
        source = path / "__init__.py" if info.ispkg else path.with_suffix(".py")
        if source.exists() and ">>>" in source.read_text(encoding="utf-8"):
            names.append(info.name)
    return sorted(names)


MODULES = _modules_with_examples()


def test_the_package_has_examples():
    assert {"sharp_dagster.periods", "sharp_dagster.naming"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(
        module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    assert result.attempted > 0, f"{name}: its `>>>` lines are not in any docstring doctest finds"
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} docstring examples failed"
