"""Rule files: the YAML files of rules (their format is described in `rules.py`), read with where each rule sits,
and `load_rules`, which validates every rule of a set of files or folders.

`load_rules` raises `RuleError` naming the file and the rule id for every mistake it can see (`rule_validation.py`
does the checks), and for an id used twice for one asset. Nothing of a rule reaches Spark before it has passed here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from sharp_dagster.dqc.rule_validation import build_rule, known_table_schemas
from sharp_dagster.dqc.rules import Rule, RuleError, SourceLines

FILE_KEYS = ("asset", "reads", "rules")


MAX_FILE_BYTES = 1_000_000
MAX_NODES = 50_000


class _RuleLoader(yaml.SafeLoader):
    """SafeLoader that reads a bare `=` as the string "=" (YAML 1.1 makes it a 'value' tag PyYAML rejects), and
    refuses anchors and aliases (`&a` / `*a`: a few nested ones make a file of 700 bytes a structure of billions
    of items) and more than `MAX_NODES` nodes, before anything is built from them."""

    nodes = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise yaml.composer.ComposerError(
                None,
                None,
                "anchors and aliases (&name, *name) are not allowed in rule files",
                event.start_mark,
            )
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"more than {MAX_NODES} YAML nodes in one rule file", event.start_mark
            )
        return super().compose_node(parent, index)


_RuleLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


def parse_rule_file(path: Path) -> list[dict[str, Any]]:
    """The raw rule mappings of one YAML file, with the file-wide `asset` and `reads` applied."""
    return [raw for raw, _ in parse_rule_file_lines(path)]


def _lines_of(node: Any) -> list[SourceLines]:
    """SourceLines of each rule mapping of a composed rule file (a sequence, or a mapping with `rules`)."""
    if isinstance(node, yaml.MappingNode):
        node = next((v for k, v in node.value if getattr(k, "value", None) == "rules"), None)
    if not isinstance(node, yaml.SequenceNode):
        return []
    out = []
    for item in node.value:
        sql = None
        if isinstance(item, yaml.MappingNode):
            params = next((v for k, v in item.value if getattr(k, "value", None) == "params"), None)
            if isinstance(params, yaml.MappingNode):
                sql = next((v for k, v in params.value if getattr(k, "value", None) == "sql"), None)
        first_sql = None
        if isinstance(sql, yaml.ScalarNode):
            # A block scalar's text starts on the line after its `|` / `>` indicator.
            first_sql = sql.start_mark.line + (2 if sql.style in ("|", ">") else 1)
        out.append(SourceLines(item.start_mark.line + 1, item.end_mark.line + 1, first_sql))
    return out


def parse_rule_file_lines(path: Path) -> list[tuple[dict[str, Any], SourceLines | None]]:
    """`parse_rule_file` with where each rule sits in the file."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise RuleError(
                f"{path}: {path.stat().st_size} bytes, more than a rule file may hold ({MAX_FILE_BYTES})"
            )
        loader = _RuleLoader(path.read_text(encoding="utf-8"))  # a SafeLoader subclass
        try:
            node = loader.get_single_node()
            doc = None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()
    except OSError as exc:
        raise RuleError(f"{path}: cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        hint = (
            ""
            if isinstance(exc, yaml.composer.ComposerError)
            else ' (quote comparators in YAML: comparator: ">=")'
        )
        text = " ".join(str(exc).split())  # one line: PyYAML puts the mark on lines of its own
        raise RuleError(f"{path}: not valid YAML: {text}{hint}") from None
    default_asset = default_reads = None
    if doc is None:
        return []
    if isinstance(doc, Mapping):
        extra = sorted(set(doc) - set(FILE_KEYS))
        if extra:
            raise RuleError(
                f"{path}: unknown top-level key(s) {', '.join(extra)} (allowed: {', '.join(FILE_KEYS)})"
            )
        default_asset = doc.get("asset")
        default_reads = doc.get("reads")
        doc = doc.get("rules") or []
    if not isinstance(doc, list):
        raise RuleError(f"{path}: expected a list of rules or a mapping with 'rules'")
    lines = _lines_of(node)
    out = []
    for i, item in enumerate(doc):
        if not isinstance(item, Mapping):
            raise RuleError(f"{path}: rule #{i + 1} is not a mapping")
        item = dict(item)
        if default_asset is not None:
            item.setdefault("asset", default_asset)
        if default_reads is not None:
            item.setdefault("reads", default_reads)
        out.append((item, lines[i] if i < len(lines) else None))
    return out


def rule_files(paths: Iterable[str | Path] | str | Path) -> list[Path]:
    """Expand folders to their `*.yaml` / `*.yml` files (sorted); keep files as given."""
    if isinstance(paths, str | Path):
        paths = [paths]
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted([*p.glob("*.yaml"), *p.glob("*.yml")]))
        else:
            files.append(p)
    return files


def load_rules(
    paths: Iterable[str | Path] | str | Path,
    schemas: Mapping[str, Mapping[str, str]] | None,
    known_tables: Mapping[str, Mapping[str, str] | None] | Iterable[str] | None = None,
) -> list[Rule]:
    """Load and validate every rule of the YAML files (folders expand to their *.yaml files).

    `schemas` maps asset key -> {column: Spark type}; `known_tables` lists other tables (`db.table`, optionally
    with their columns) that referential/reconciliation rules may name; assets in `schemas` count as tables too.
    Raises `RuleError` at the first invalid rule, naming the file and the rule id.
    """
    tables = known_table_schemas(schemas, known_tables)
    rules: list[Rule] = []
    seen: dict[tuple[str, str], str] = {}
    for path in rule_files(paths):
        for raw, lines in parse_rule_file_lines(path):
            rule = build_rule(raw, schemas, tables, source=str(path), lines=lines)
            key = (rule.asset, rule.id)
            if key in seen:
                raise RuleError(
                    f"{path}: rule {rule.id!r} (asset {rule.asset}): duplicate id, first defined in {seen[key]}"
                )
            seen[key] = str(path)
            rules.append(rule)
    return rules
