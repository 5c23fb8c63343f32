"""A snapshot of the code location's asset graph: keys, groups, kinds, deps (with their partition mappings),
partitions, checks, jobs and sensors. A change to the graph shows in review as a change to
`asset_graph.json`; after a deliberate change, rewrite it with

    SHARP_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest sharp_dagster_tests/house/test_asset_graph_snapshot.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

SNAPSHOT = Path(__file__).with_name("asset_graph.json")


def _partitions(pd) -> str | None:
    if pd is None:
        return None
    start = pd.start.strftime("%Y-%m-%d %H:%M") if getattr(pd, "start", None) else ""
    return f"{type(pd).__name__}({start})"


def _mapping(m) -> str | None:
    if m is None:
        return None
    offsets = [getattr(m, a, None) for a in ("start_offset", "end_offset")]
    return f"{type(m).__name__}{tuple(offsets) if any(o is not None for o in offsets) else ''}"


def graph_of(defs) -> dict:
    graph = defs.resolve_asset_graph()
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "group": node.group_name,
            "kinds": sorted(node.kinds),
            "materializable": node.is_materializable,
            "partitions": _partitions(node.partitions_def),
            "deps": {
                parent.to_user_string(): _mapping(graph.get_partition_mapping(key, parent))
                for parent in sorted(node.parent_keys, key=lambda k: k.to_user_string())
            },
            "checks": sorted(c.name for c in node.check_keys),
        }
    return {
        "assets": assets,
        "jobs": sorted(j.name for j in defs.resolve_all_job_defs() if not j.name.startswith("__")),
        "sensors": sorted(s.name for s in defs.sensors or []),
    }


def test_the_asset_graph_is_the_snapshot():
    from sharp_dagster.definitions import defs

    now = json.dumps(graph_of(defs), indent=1, sort_keys=True) + "\n"
    if os.environ.get("SHARP_UPDATE_SNAPSHOTS") == "1" or not SNAPSHOT.exists():
        SNAPSHOT.write_text(now)
    assert now == SNAPSHOT.read_text(), (
        f"the asset graph differs from {SNAPSHOT.name}; if the change is meant, rewrite it "
        "(SHARP_UPDATE_SNAPSHOTS=1) and let review see the diff"
    )
