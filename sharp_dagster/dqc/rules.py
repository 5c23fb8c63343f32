"""Rule entities: YAML files binding a template to an asset, validated completely before anything runs.

A rule file holds a list of rules, either at the top level or under `rules:` (with an optional file-wide
`asset:` that rules inherit)::

    asset: dwd/order_detail
    rules:
      - id: order_id_unique            # unique per asset; plain identifier (it becomes a SQL alias)
        template: duplicate_count
        params: {key: [order_id]}
        comparator: "="                # one of > >= = != <= < between
        expect: 0                      # a number, or [low, high] for between
        severity: strong               # strong: blocks publication; weak: reported and alerted only
        dimension: uniqueness          # accuracy completeness timeliness uniqueness validity consistency
        description: one row per order line
        sample_key: [order_id]         # columns to report for failing rows (optional)

**A rule PASSES when `actual <comparator> expect` holds** (for `between`: `low <= actual <= high`, both ends
inclusive). `null_count` with `comparator: "="` and `expect: 0` passes when there are no NULLs. This is the
opposite of seed 001's "assert" (there the comparator describes the *failure*); here it describes what good
data looks like, like a unit-test assertion. `=` and `!=` compare with a relative tolerance of 1e-9.

**`custom_sql` rules read only the asset's staged rows (`${table}`), their own CTEs, and the tables they declare**
in `reads:` (a list of `db.table`, on the rule or file-wide next to `asset:`, which rules inherit)::

    reads: [dwd.order_detail]
    rules:
      - id: gmv_matches_detail
        template: custom_sql
        params: {sql: "SELECT abs((SELECT sum(gmv) FROM ${table}) - (SELECT sum(amount) FROM dwd.order_detail))"}

Functions that reach the JVM or the file system (`reflect`, `java_method`, `read_files`, ...), path-based
relations (``text.`/etc/passwd` ``) and anything but one SELECT are rejected at load, the error naming the file,
its line and the rule (`sharp_dagster.dqc.sqlguard`); the verdict is Spark's plan of the rendered SQL, judged before
the rule's query first runs (`sharp_dagster.dqc.plan_guard`).

`severity` defaults to `weak`, `dimension` to the template's own (e.g. uniqueness for duplicate_count), and
`description` to the template's description. `reconciliation` and `fluctuation` compute their own expectation (`tolerance` param; history bounds), so they
take no `expect` / `comparator`.

`load_rules` raises `RuleError` naming the file and the rule id for every mistake it can see: unknown asset,
column, table, template, comparator, bad severity/dimension, missing or unknown param, a parameter that is not
a plain identifier where one is needed. Nothing of a rule reaches Spark before it has passed here.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sharp_dagster.dqc.errors import ParamError
from sharp_dagster.dqc.params import COLUMNS, ParamSpec, Schemas, check_column, render, validate_params
from sharp_dagster.dqc.quoting import CONTEXT_VARIABLES, IDENTIFIER, INTERNAL_VARIABLES, fill
from sharp_dagster.dqc.sqlguard import check_custom_sql, check_declared_table
from sharp_dagster.dqc.templates import RuleSql, Template, get_template
from sharp_dagster.naming import qualified

COMPARATORS = (">", ">=", "=", "!=", "<=", "<", "between")
SEVERITIES = ("strong", "weak")
DIMENSIONS = ("accuracy", "completeness", "timeliness", "uniqueness", "validity", "consistency")
RULE_KEYS = frozenset(
    {
        "id",
        "asset",
        "template",
        "params",
        "expect",
        "comparator",
        "severity",
        "dimension",
        "description",
        "sample_key",
        "sample_limit",
        "reads",
    }
)
FILE_KEYS = ("asset", "reads", "rules")
ASSET_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*$")


class RuleError(ValueError):
    """A rule file or rule is invalid; the message starts with the file and names the rule id."""


@dataclass(frozen=True)
class SourceLines:
    """Where a rule sits in its YAML file (1-based lines), for error messages."""

    rule: int | None = None  # the rule mapping's first line
    end: int | None = None  # its last line
    sql: int | None = None  # the first line of `params.sql`'s text


@dataclass(frozen=True)
class Rule:
    """A validated rule. `sql` holds its rendered SQL (run-time placeholders still open)."""

    id: str
    asset: str
    template: str
    params: Mapping[str, Any]
    comparator: str
    expect: float | tuple[float, float] | None
    severity: str
    dimension: str
    description: str
    sample_key: tuple[str, ...]
    sample_limit: int | None
    sql: RuleSql
    source: str = ""
    version: str = field(default="", compare=False)
    reads: tuple[str, ...] = ()  # tables a custom_sql rule declared it reads (`reads:`), besides ${table}
    lines: SourceLines | None = field(default=None, compare=False)  # where it sits in its file (custom SQL)

    @property
    def label(self) -> str:
        return f"{self.asset}:{self.id}"

    @property
    def tmpl(self) -> Template:
        return get_template(self.template)

    @property
    def scan_based(self) -> bool:
        return self.sql.scan is not None

    def describe_expectation(self) -> str:
        if self.tmpl.mode == "reconcile":
            unit = "%" if self.params.get("tolerance_type") == "percent" else ""
            return f"difference <= {self.params.get('tolerance', 0)}{unit}"
        if self.tmpl.mode == "fluctuation":
            return (
                f"within -{self.params['lower_pct']}%/+{self.params['upper_pct']}% of the mean of the last "
                f"{self.params['window']} partitions"
            )
        if self.comparator == "between":
            low, high = self.expect  # type: ignore[misc]
            return f"between {low} and {high}"
        return f"{self.comparator} {self.expect}"


def rule_version(
    template: Template, sql: RuleSql, params: Mapping[str, Any], expect: Any, comparator: str, severity: str
) -> str:
    """A short hash of what decides a verdict: template SQL (and the rendered SQL), params, expect, comparator,
    severity. Description, dimension and sample settings do not change it."""
    payload = json.dumps(
        {
            "template": [template.name, template.sql],
            "sql": sql.pieces(),
            "params": params,
            "expect": list(expect) if isinstance(expect, tuple) else expect,
            "comparator": comparator,
            "severity": severity,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------------ loading
def locate(rule: Rule, exc: ParamError) -> str:
    """`file:line` (or the file) of what a check of the rule's rendered SQL refused: Spark's plan carries the
    line within the SQL, which beats a search for the token (that may stand in a comment before it)."""
    line = _file_line(rule.lines, rule.source, exc, sql_line_first=True)
    return f"{rule.source}:{line}" if line else rule.source


def _file_line(
    lines: SourceLines | None, source: str, exc: ParamError, sql_line_first: bool = False
) -> int | None:
    """The file line of what a custom SQL check refused: the line of its token inside the rule, else the SQL's
    own line counted from the start of `params.sql`, else the rule's first line (`sql_line_first`: the SQL's
    line before the token's)."""
    if lines is None:
        return None
    token = getattr(exc, "token", None)
    start = lines.sql or lines.rule
    if sql_line_first and lines.sql and getattr(exc, "line", None):
        return lines.sql + exc.line - 1
    if token and start and lines.end:
        try:
            text = Path(source).read_text(encoding="utf-8").splitlines()
        except OSError:
            text = []
        for number in range(start, min(lines.end, len(text)) + 1):
            if token.lower() in text[number - 1].lower():
                return number
    sql_line = getattr(exc, "line", None)
    if lines.sql and sql_line:
        return lines.sql + sql_line - 1
    return start


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, int | float) and math.isfinite(value):
        return value
    return None


def known_table_schemas(
    schemas: Mapping[str, Mapping[str, str]] | None,
    known_tables: Mapping[str, Mapping[str, str] | None] | Iterable[str] | None,
) -> dict[str, Mapping[str, str] | None] | None:
    if schemas is None and known_tables is None:
        return None
    tables: dict[str, Mapping[str, str] | None] = {}
    # Every asset with a schema is a table `db.name` too (asset `dwd/order_detail` = table `dwd.order_detail`).
    for asset, cols in (schemas or {}).items():
        tables[qualified(asset)] = cols
    if isinstance(known_tables, Mapping):
        tables.update(known_tables)
    elif known_tables is not None:
        for name in known_tables:
            tables.setdefault(name, None)
    return tables


def build_rule(
    raw: Mapping[str, Any],
    schemas: Mapping[str, Mapping[str, str]] | None,
    tables: Mapping[str, Mapping[str, str] | None] | None,
    source: str = "<memory>",
    lines: SourceLines | None = None,
) -> Rule:
    """Validate one rule mapping; `schemas=None` skips asset/column existence checks (listing only).

    `lines` (from `parse_rule_file_lines`) puts the file's line into the error of a refused custom SQL.
    """
    rid = raw.get("id")
    where = f"{source}: rule {rid!r}"

    def fail(msg: str) -> RuleError:
        return RuleError(f"{where}: {msg}")

    if not isinstance(rid, str) or not IDENTIFIER.match(rid):
        raise fail("'id' must be a plain identifier (letters, digits, _), it becomes a SQL alias")
    unknown = sorted(set(raw) - RULE_KEYS)
    if unknown:
        raise fail(f"unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(RULE_KEYS))})")
    asset = raw.get("asset")
    if not isinstance(asset, str) or not ASSET_KEY.match(asset):
        raise fail(f"'asset' must be an asset key like dwd/order_detail, got {asset!r}")
    where = f"{source}: rule {rid!r} (asset {asset})"
    if schemas is not None and asset not in schemas:
        raise fail(f"unknown asset {asset!r} (known: {', '.join(sorted(schemas)) or '(none)'})")
    try:
        template = get_template(str(raw.get("template")))
    except ParamError as exc:
        raise fail(str(exc)) from None

    severity = raw.get("severity", "weak")
    if severity not in SEVERITIES:
        raise fail(f"severity must be one of {', '.join(SEVERITIES)}, got {severity!r}")
    dimension = raw.get("dimension", template.dimension)
    if dimension not in DIMENSIONS:
        raise fail(f"dimension must be one of {', '.join(DIMENSIONS)}, got {dimension!r}")

    try:
        reads = _reads(raw.get("reads"), tables)
    except ParamError as exc:
        raise fail(str(exc)) from None

    cols = schemas.get(asset) if schemas is not None else None
    raw_params = raw.get("params") or {}
    if not isinstance(raw_params, Mapping):
        raise fail(f"'params' must be a mapping, got {raw_params!r}")
    try:
        params = validate_params(template, raw_params, Schemas(columns=cols, tables=tables))
        sample_key = _sample_key(raw.get("sample_key"), cols) or template.default_sample_key(params)
        sql = template.build(params, render(template, params), sample_key, cols)
        keep = CONTEXT_VARIABLES | INTERNAL_VARIABLES
        sql = RuleSql(**{k: fill(v, {}, keep) for k, v in sql.pieces().items()})
    except ParamError as exc:
        raise fail(str(exc)) from None
    if template.name == "custom_sql":
        try:
            check_custom_sql(params["sql"], reads)
        except ParamError as exc:
            line = _file_line(lines, source, exc)
            at = f"{source}:{line}" if line else source
            raise RuleError(f"{at}: rule {rid!r} (asset {asset}): {exc}") from None

    comparator, expect = _expectation(raw, template, fail)
    limit = raw.get("sample_limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise fail(f"sample_limit must be a non-negative integer, got {limit!r}")
    if lines is not None and lines.sql and template.name == "custom_sql":
        # The rendered SQL is the text stripped (templates.py): count its lines from its first non-blank one.
        text = str(params["sql"])
        lines = SourceLines(
            lines.rule, lines.end, lines.sql + text[: len(text) - len(text.lstrip())].count("\n")
        )
    description = raw.get("description") or template.description
    return Rule(
        id=rid,
        asset=asset,
        template=template.name,
        params=params,
        comparator=comparator,
        expect=expect,
        severity=severity,
        dimension=dimension,
        description=str(description),
        sample_key=tuple(sample_key),
        sample_limit=limit,
        sql=sql,
        source=source,
        version=rule_version(template, sql, params, expect, comparator, severity),
        reads=reads,
        lines=lines,
    )


def _reads(value: Any, tables: Mapping[str, Mapping[str, str] | None] | None) -> tuple[str, ...]:
    """The `reads:` declaration: a list of db.table names, each a known table when known tables are given."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ParamError(f"'reads' must be a list of tables db.table, got {value!r}")
    out = []
    for item in items:
        name = check_declared_table(item)
        if tables is not None and name not in tables:
            known = ", ".join(sorted(tables)) or "(none)"
            raise ParamError(f"'reads' names unknown table {name!r} (known tables: {known})")
        out.append(name)
    return tuple(dict.fromkeys(out))


def _sample_key(value: Any, cols: Mapping[str, str] | None) -> list[str]:
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise ParamError(f"sample_key must be a column or a list of columns, got {value!r}")
    spec = ParamSpec("sample_key", COLUMNS)
    return [check_column(spec, v, cols, "the asset") for v in items]


def _expectation(raw: Mapping[str, Any], template: Template, fail) -> tuple[str, Any]:
    has_expect, has_comp = "expect" in raw, "comparator" in raw
    if template.mode in ("reconcile", "fluctuation"):
        if has_expect or has_comp:
            what = "its 'tolerance' param" if template.mode == "reconcile" else "the rule's own history"
            raise fail(
                f"template {template.name} takes no expect/comparator: the expectation comes from {what}"
            )
        return ("<=", None) if template.mode == "reconcile" else ("between", None)
    if not has_comp:
        raise fail(f"missing 'comparator' (one of {' '.join(COMPARATORS)})")
    comparator = raw["comparator"]
    if comparator not in COMPARATORS:
        raise fail(f"unknown comparator {comparator!r} (one of {' '.join(COMPARATORS)})")
    if not has_expect:
        raise fail("missing 'expect'")
    value = raw["expect"]
    if comparator == "between":
        if not isinstance(value, list | tuple) or len(value) != 2:
            raise fail(f"'between' needs expect: [low, high], got {value!r}")
        low, high = _number(value[0]), _number(value[1])
        if low is None or high is None or low > high:
            raise fail(f"'between' needs two numbers low <= high, got {value!r}")
        return comparator, (low, high)
    number = _number(value)
    if number is None:
        raise fail(f"'expect' must be a number for comparator {comparator}, got {value!r}")
    return comparator, number


class _RuleLoader(yaml.SafeLoader):
    """SafeLoader that reads a bare `=` as the string "=" (YAML 1.1 makes it a 'value' tag PyYAML rejects)."""


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
        loader = _RuleLoader(path.read_text(encoding="utf-8"))  # a SafeLoader subclass
        try:
            node = loader.get_single_node()
            doc = None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()
    except OSError as exc:
        raise RuleError(f"{path}: cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        hint = ' (quote comparators in YAML: comparator: ">=")'
        raise RuleError(f"{path}: not valid YAML: {exc}{hint}") from None
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


def rules_for(rules: Iterable[Rule], asset: str, severity: str | None = None) -> list[Rule]:
    """The rules of one asset, optionally only `strong` (run before publishing) or `weak` (after)."""
    return [r for r in rules if r.asset == asset and (severity is None or r.severity == severity)]
