"""Dagster's instance folder (`DAGSTER_HOME`) for the commands that run Dagster in-process (`log rerun`, the demo).

Nothing here imports Dagster: it only decides the folder and exports it for Dagster to find.
"""

from __future__ import annotations

import os
from pathlib import Path

from sharp_dagster.settings import Settings, dagster_home_given


def ensure_dagster_home(settings: Settings) -> Path:
    """Use DAGSTER_HOME when set, else `data/dagster_home` (created, and exported for Dagster)."""
    home = Path(dagster_home_given() or settings.dagster_home)
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    return home
