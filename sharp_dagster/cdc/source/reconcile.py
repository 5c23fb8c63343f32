"""`cdc init` re-run against an existing source YAML: the server's schema now, proposed as a change to that file.

The user's file is never rewritten here: `propose` returns the proposed content and what changed, one line each;
`cdc init` prints the unified diff, writes the proposal beside the file (`<file>.proposed`) and replaces the file
only with `--apply`. What the proposal keeps and changes:

- every existing entry stays as written (its key, shard group, business key, order, any field a user edited);
- a table of the server that no existing entry covers (by name, by its `shard_regex` or its listed shards) is
  appended to its database's `tables`, written as a first `cdc init` writes it; a database given with
  `--database` that the file lacks is appended whole; databases not given are left alone;
- a column the server has and an entry's `columns` lacks is appended to that list (an entry without `columns` is
  left so); a column the entry declares and the server lacks, or declares with another type, is only named (the
  DDL policy decides what the capture does with it, not this file);
- a shard group whose listed shards (a count or names) miss some of the server's shards gets the server's list;
- an entry none of whose physical tables is on the server any more is removed from the proposal and named ("gone
  from the source"): its ODS tables and their tags stay in the warehouse.

Once applied, a new table is captured from the collector's next start and reaches ODS after
`cdc bootstrap --table <db>.<table>`.
"""

from __future__ import annotations

import copy
import difflib
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from sharp_dagster.cdc.source.config import source_config_from_dict

_RANGE = re.compile(r"\d+\.\.\d+")


@dataclass
class Proposal:
    config: dict[str, Any]  # the proposed YAML content
    changes: list[str] = field(default_factory=list)  # what the proposal changes, one line each
    notes: list[str] = field(default_factory=list)  # what differs but is not changed here

    @property
    def new_tables(self) -> list[str]:
        return [c.split(" ")[2] for c in self.changes if c.startswith("new table ")]


def physical_names(entry: dict[str, Any]) -> list[str]:
    """The physical tables an entry (as `cdc init` writes it) lists: `shards` as a count, a range or names, else
    its name.

    >>> physical_names({"name": "t", "shards": "08..10"}), physical_names({"name": "t", "shards": 2})
    (['t_08', 't_09', 't_10'], ['t_0', 't_1'])
    """
    shards = entry.get("shards")
    if isinstance(shards, int) and not isinstance(shards, bool):
        return [f"{entry['name']}_{i}" for i in range(shards)]
    if isinstance(shards, list):
        return [str(s) for s in shards]
    if isinstance(shards, str) and _RANGE.fullmatch(shards):  # '0000..1023': zero-padded, both ends as wide
        first, last = shards.split("..")
        return [f"{entry['name']}_{i:0{len(first)}d}" for i in range(int(first), int(last) + 1)]
    return [entry["name"]]


def _covers(entry: dict[str, Any], physical: str) -> bool:
    regex = entry.get("shard_regex")
    if regex is not None and re.fullmatch(regex, physical):
        return True
    return physical == entry["name"] or physical in physical_names(entry)


def _column_name(declaration: str) -> str:
    return declaration.split(" ", 1)[0]


def propose(existing: dict[str, Any], current: dict[str, Any], origin: str = "<CDC config>") -> Proposal:
    """`existing` (the user's YAML, parsed) updated with `current` (`introspect`'s config for some databases)."""
    proposed = copy.deepcopy(existing)
    out = Proposal(proposed)
    by_name = {db["name"]: db for db in proposed.get("databases") or []}
    for now in current["databases"]:
        db = by_name.get(now["name"])
        if db is None:
            proposed.setdefault("databases", []).append(copy.deepcopy(now))
            out.changes.append(f"new database {now['name']} ({len(now['tables'])} tables)")
            continue
        _reconcile_database(db, now, out)
    source_config_from_dict(proposed, origin=f"{origin} (proposed)")  # what is proposed must load
    return out


def _reconcile_database(db: dict[str, Any], now: dict[str, Any], out: Proposal) -> None:
    server = {p for entry in now["tables"] for p in physical_names(entry)}
    kept = []
    for entry in db.get("tables") or []:
        if any(_covers(entry, p) for p in server):
            kept.append(entry)
        else:
            out.changes.append(
                f"gone from the source: {db['name']}.{entry['name']} (removed from the YAML; its ODS tables and "
                "tags stay in the warehouse)"
            )
    db["tables"] = kept
    for entry in now["tables"]:
        physical = physical_names(entry)
        match = next((t for t in kept if t["name"] == entry["name"]), None) or next(
            (t for t in kept if any(_covers(t, p) for p in physical)), None
        )
        if match is None:
            kept.append(copy.deepcopy(entry))
            out.changes.append(
                f"new table {db['name']}.{entry['name']} ({len(entry['columns'])} columns, key "
                f"{', '.join(entry['primary_key']) or 'none'}): `cdc bootstrap --table "
                f"{db['name']}.{entry['name']}` once applied"
            )
            continue
        _reconcile_table(f"{db['name']}.{match['name']}", match, entry, out)


def _reconcile_table(qualified: str, entry: dict[str, Any], now: dict[str, Any], out: Proposal) -> None:
    if "shards" in entry and not set(physical_names(now)) <= set(physical_names(entry)):
        extra = sorted(set(physical_names(now)) - set(physical_names(entry)))
        entry["shards"] = now.get("shards", physical_names(now))
        out.changes.append(f"new shards of {qualified}: {', '.join(extra)}")
    if "columns" not in entry:
        return
    declared = {_column_name(d): d for d in entry["columns"]}
    server = {_column_name(d): d for d in now["columns"]}
    added = [d for name, d in server.items() if name not in declared]
    if added:
        entry["columns"] = [*entry["columns"], *added]
        out.changes.append(f"new columns of {qualified}: {', '.join(added)}")
    for name, declaration in declared.items():
        if name not in server:
            out.notes.append(f"{qualified}: column {name} is declared but not on the server (kept)")
        elif server[name] != declaration:
            out.notes.append(f"{qualified}: column {declaration!r} is {server[name]!r} on the server (kept)")


def proposed_text(existing_text: str, proposal: Proposal) -> str:
    """The proposal as YAML, under the existing file's leading comment lines (the rest is written as `cdc init`
    writes it)."""
    lines = existing_text.splitlines(keepends=True)
    head = "".join(
        line for line in lines[: next((i for i, t in enumerate(lines) if not t.startswith("#")), 0)]
    )
    return head + yaml.safe_dump(proposal.config, sort_keys=False, default_flow_style=False, width=120)


def unified_diff(existing_text: str, new_text: str, path: str) -> str:
    return "".join(
        difflib.unified_diff(
            existing_text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile=path,
            tofile=f"{path}.proposed",
        )
    )
