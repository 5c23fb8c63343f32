"""The deployment folder `deploy/` and its environment file as the tests read it."""

from __future__ import annotations

import re
from pathlib import Path

from sharp_dagster.settings import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"


def env_file_settings(path: Path = DEPLOY / "sharp.env") -> dict[str, str]:
    """`NAME=value` lines of an environment file; `ValueError` for a setting without a comment line above it."""
    settings: dict[str, str] = {}
    previous = ""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip() and not line.startswith("#"):
            name, sep, value = line.partition("=")
            if not sep or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name):
                raise ValueError(f"{path}:{number}: expected NAME=value, got {line!r}")
            if not previous.startswith("#"):
                raise ValueError(f"{path}:{number}: {name} has no comment saying what it means")
            settings[name] = value
        previous = line
    return settings
