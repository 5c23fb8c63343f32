"""Dagster's instance folder (`DAGSTER_HOME`) for the commands that run Dagster in-process (`log rerun`, the demo).

Nothing here imports Dagster: it only decides the folder and exports it for Dagster to find.
"""

from __future__ import annotations

import os
from pathlib import Path

from sharp_dagster.settings import Settings, dagster_home_given

# The instance's settings when the folder has none: no first-run "join the Dagster community" dialog over every
# page of the UI (Dagster's `nux` setting). A `dagster.yaml` already there is the user's and stays as it is.
INSTANCE_YAML = "nux:\n  enabled: false\n"


def ensure_dagster_home(settings: Settings) -> Path:
    """Use DAGSTER_HOME when set, else `data/dagster_home` (created, given `INSTANCE_YAML` when it has no
    `dagster.yaml`, and exported for Dagster)."""
    home = Path(dagster_home_given() or settings.dagster_home)
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(INSTANCE_YAML, encoding="utf-8")
    os.environ["DAGSTER_HOME"] = str(home)
    return home
