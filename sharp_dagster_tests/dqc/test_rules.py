"""Rule files: validation errors name the file and the rule; injection never gets past load_rules."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sharp_dagster.dqc.context import RuleContext
from sharp_dagster.dqc.quoting import sql_string
from sharp_dagster.dqc.rule_files import load_rules
from sharp_dagster.dqc.rules import COMPARATORS, RuleError, rules_for
from sharp_dagster.dqc.templates import TEMPLATES
from sharp_dagster_tests.dqc.conftest import ASSET, SCHEMAS, TABLES, make_rule

EXAMPLES = Path(__file__).parent / "rules"

BASE = {"id": "r1", "asset": ASSET, "template": "null_count", "params": {"column": "user_id"},
        "comparator": "=", "expect": 0}  # fmt: skip


def write_rules(tmp_path: Path, rules: list[dict], name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"rules": rules}))
    return path


def load_one(tmp_path: Path, **changes) -> Path:
    rule = {**BASE, **changes}
    rule = {k: v for k, v in rule.items() if v is not None}
    path = write_rules(tmp_path, [rule])
    load_rules([path], SCHEMAS, TABLES)
    return path


def test_example_file_loads_every_template_kind():
    rules = load_rules(EXAMPLES, SCHEMAS, TABLES)
    assert {r.template for r in rules} >= {
        "row_count", "duplicate_count", "null_count", "accepted_values", "value_range", "regex_match_rate",
        "freshness", "referential", "reconciliation", "fluctuation", "custom_sql",
    }  # fmt: skip
    assert all(r.asset == ASSET for r in rules)
    assert [r.id for r in rules_for(rules, ASSET, "strong")] == [
        "has_rows", "order_line_unique", "user_id_not_null", "rows_match_job_log",
    ]  # fmt: skip
    assert len({r.version for r in rules}) == len(rules)


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"asset": "dwd/nope"}, "unknown asset 'dwd/nope'"),
        ({"params": {"column": "no_such_col"}}, "unknown column 'no_such_col'"),
        ({"template": "nope_count"}, "unknown template 'nope_count'"),
        ({"comparator": "=="}, "unknown comparator '=='"),
        ({"comparator": None}, "missing 'comparator'"),
        ({"expect": None}, "missing 'expect'"),
        ({"severity": "fatal"}, "severity must be one of strong, weak"),
        ({"dimension": "beauty"}, "dimension must be one of"),
        ({"params": {}}, "missing param 'column'"),
        ({"params": {"column": "user_id", "colour": "red"}}, "unknown param(s) colour"),
        ({"params": {"column": "id); drop table x; --"}}, "must be a plain column identifier"),
        ({"params": {"column": "user_id`"}}, "must be a plain column identifier"),
        ({"sample_key": ["order_id; drop"]}, "must be a plain column identifier"),
        ({"comparator": "between", "expect": 3}, "'between' needs expect: [low, high]"),
        ({"comparator": "between", "expect": [5, 1]}, "low <= high"),
        ({"expect": "zero"}, "'expect' must be a number"),
        ({"bogus": 1}, "unknown key(s) bogus"),
        ({"id": "bad id"}, "'id' must be a plain identifier"),
    ],
)
def test_load_errors_name_file_and_rule(tmp_path, changes, expected):
    with pytest.raises(RuleError) as info:
        load_one(tmp_path, **changes)
    message = str(info.value)
    assert message.startswith(str(tmp_path / "bad.yaml") + ": rule ")
    assert expected in message
    rule_id = changes.get("id", "r1")
    assert repr(rule_id) in message


@pytest.mark.parametrize(
    "template, params, expected",
    [
        ("referential", {"key": ["user_id"], "other": "dwd.user_dim; drop table t"}, "table name of plain"),
        ("referential", {"key": ["user_id"], "other": "dwd.nope"}, "unknown table 'dwd.nope'"),
        (
            "referential",
            {"key": ["user_id"], "other": "dwd.user_dim", "other_key": ["uid"]},
            "unknown column 'uid'",
        ),
        ("duplicate_count", {"key": ["order_id", "x) or (1=1"]}, "plain column identifier"),
        ("value_range", {"column": "status", "min": 0}, "has type string"),
        ("value_range", {"column": "amount", "min": "1; drop"}, "must be a number"),
        ("value_range", {"column": "amount", "min": 5, "max": 1}, "greater than max"),
        ("value_range", {"column": "amount"}, "needs 'min', 'max' or both"),
        ("regex_match_rate", {"column": "email", "pattern": "(unclosed"}, "not a valid regex"),
        ("freshness", {"column": "updated_at", "unit": "weeks"}, "must be one of seconds"),
        ("custom_sql", {"sql": "SELECT 1 FROM ${table}; DROP TABLE x"}, "exactly one SELECT"),
        ("custom_sql", {"sql": "DROP TABLE x"}, "exactly one SELECT"),
        ("custom_sql", {"sql": "SELECT count(1) FROM ${table} WHERE a = '${secret}'"}, "unknown placeholder"),
        ("custom_sql", {"sql": "SELECT count(1) FROM dwd.x"}, "through ${table}"),
        (
            "custom_sql",
            {"sql": "SELECT count(1) FROM ${table} WHERE a = '${spark.app.name}'"},
            "only ${name}",
        ),
    ],
)
def test_param_validation(tmp_path, template, params, expected):
    with pytest.raises(RuleError, match="rule 'r1'") as info:
        load_one(tmp_path, template=template, params=params)
    assert expected in str(info.value)


def test_reconciliation_and_fluctuation_take_no_expect(tmp_path):
    with pytest.raises(RuleError, match="takes no expect/comparator"):
        load_one(tmp_path, template="reconciliation", params={"against": "source_count"})
    with pytest.raises(RuleError, match="param 'base' must be one of"):
        load_one(
            tmp_path, template="fluctuation", params={"base": "referential"}, comparator=None, expect=None
        )
    with pytest.raises(RuleError, match="needs metric: count"):
        load_one(tmp_path, template="reconciliation", comparator=None, expect=None,
                 params={"against": "source_count", "metric": "sum", "column": "amount"})  # fmt: skip


def test_duplicate_rule_id_names_both_files(tmp_path):
    first = write_rules(tmp_path, [BASE], "a.yaml")
    second = write_rules(tmp_path, [{**BASE, "params": {"column": "status"}}], "b.yaml")
    with pytest.raises(RuleError) as info:
        load_rules([tmp_path], SCHEMAS, TABLES)
    assert (
        str(second) in str(info.value) and str(first) in str(info.value) and "duplicate id" in str(info.value)
    )


def test_bad_yaml_names_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("rules: [ {id: x\n")
    with pytest.raises(RuleError, match="broken.yaml: not valid YAML"):
        load_rules([path], SCHEMAS, TABLES)


def test_string_values_are_escaped_not_rejected():
    nasty = "it's \\ ${env:HOME} \n'); drop table t; --"
    rule = make_rule(id="s", template="accepted_values", params={"column": "status", "values": [nasty]},
                     comparator="=", expect=0)  # fmt: skip
    literal = sql_string(nasty)
    assert literal in rule.sql.scan
    body = literal[1:-1]
    # No unescaped quote can end the literal early, and no `${` survives for variable substitution.
    assert "${" not in literal and "\n" not in literal
    assert all(body[i - 1] == "\\" for i, ch in enumerate(body) if ch == "'")


def test_version_hash_tracks_what_decides_the_verdict():
    base = dict(id="v", template="null_count", params={"column": "user_id"}, comparator="=", expect=0)
    v0 = make_rule(**base).version
    assert make_rule(**base).version == v0
    assert make_rule(**{**base, "description": "other words"}).version == v0
    for change in (
        {"expect": 1},
        {"comparator": "<="},
        {"severity": "strong"},
        {"params": {"column": "status"}},
    ):
        assert make_rule(**{**base, **change}).version != v0, change


def test_column_names_resolve_case_insensitively_to_schema_spelling():
    rule = make_rule(id="c", template="null_count", params={"column": "USER_ID"}, comparator="=", expect=0)
    assert rule.params["column"] == "user_id" and "`user_id`" in rule.sql.scan


def test_every_comparator_is_accepted():
    for comp in COMPARATORS:
        expect = [0, 1] if comp == "between" else 1
        assert make_rule(id="c", template="row_count", comparator=comp, expect=expect).comparator == comp


def test_templates_declare_known_dimensions():
    from sharp_dagster.dqc.rules import DIMENSIONS

    assert {t.dimension for t in TEMPLATES.values()} <= set(DIMENSIONS)


def test_context_variables_are_checked_and_derived():
    ctx = RuleContext.coerce({"DATA_RANGE_END": "20240102000000"}, "2024-01-01")
    v = ctx.variables()
    assert v["dt"] == "2024-01-01" and v["_window_end"] == "2024-01-02 00:00:00"
    hourly = RuleContext.coerce(None, "2024-01-01-05:00").variables()
    assert hourly["_window_start"] == "2024-01-01 05:00:00" and hourly["_window_end"] == "2024-01-01 06:00:00"
    with pytest.raises(ValueError, match="unsafe value"):
        RuleContext.coerce({"dt": "2024-01-01' OR '1'='1"}).variables()
    with pytest.raises(ValueError, match="unknown key"):
        RuleContext.coerce({"sourcecount": 3})


def test_context_window_comes_from_the_runs_period():
    from datetime import datetime

    from sharp_dagster.periods import period_at

    hour = period_at(datetime(2024, 1, 1, 5), "hourly")
    # The period decides the window, not the key's shape: a run hands the period it parsed once.
    v = RuleContext(partition_key="anything", dt="2024-01-01", period=hour).variables()
    assert (v["_window_start"], v["_window_end"]) == ("2024-01-01 05:00:00", "2024-01-01 06:00:00")
    assert RuleContext.coerce(RuleContext(period=hour), "2024-01-01-05:00").period == hour


def test_yaml_comparator_spelling(tmp_path):
    path = tmp_path / "cmp.yaml"
    path.write_text(f"rules:\n  - {{id: a, asset: {ASSET}, template: row_count, comparator: =, expect: 1}}\n")
    (rule,) = load_rules([path], SCHEMAS, TABLES)
    assert rule.comparator == "="
    path.write_text(f"rules:\n  - id: a\n    asset: {ASSET}\n    template: row_count\n    comparator: !=\n")
    with pytest.raises(RuleError, match="quote comparators"):
        load_rules([path], SCHEMAS, TABLES)
