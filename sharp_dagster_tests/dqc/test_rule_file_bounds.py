"""Rule files are bounded: no YAML anchors or aliases (a 700-byte file nested 9 deep is a MemoryError), ids matched
whole (an id ending in a newline is not an identifier), lengths capped, and a custom SQL's non-number result shown
capped in the result that goes to dqc_result, Dagster and alerts. Each refused at load in one line, in well under a
second."""

from __future__ import annotations

import time

import pytest

from sharp_dagster.dqc.context import RuleContext
from sharp_dagster.dqc.evaluate import judge
from sharp_dagster.dqc.rule_files import load_rules
from sharp_dagster.dqc.rules import RuleError
from sharp_dagster_tests.dqc.conftest import ASSET, SCHEMAS, TABLES, make_rule

RULE = "  - id: rows\n    template: row_count\n    comparator: '>'\n    expect: 0\n"


def _bomb(depth: int = 9) -> str:
    """A flow sequence of anchored lists, each nine aliases of the one before: 9**10 strings once built."""
    items = ["&a0 [" + ",".join(["lol"] * 9) + "]"]
    items += [f"&a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, depth + 1)]
    return "[" + ", ".join(items) + "]"


CASES = {
    "yaml_bomb": (f"asset: {ASSET}\nrules:\n{RULE}    description: {_bomb()}\n", "anchors and aliases"),
    "bomb_in_a_key": ("x: &x [1, 2]\ny: *x\n", "anchors and aliases"),
    "newline_id": (f"asset: {ASSET}\nrules:\n  - id: \"rows\\n\"\n    template: row_count\n    comparator: '>'\n    expect: 0\n", "plain identifier"),
    "long_id": (f"asset: {ASSET}\nrules:\n  - id: {'r' * 65}\n    template: row_count\n    comparator: '>'\n    expect: 0\n", "at most 64"),
    "list_description": (f"asset: {ASSET}\nrules:\n{RULE}    description: [a, b]\n", "'description' must be a text"),
    "long_description": (f"asset: {ASSET}\nrules:\n{RULE}    description: {'d' * 2001}\n", "'description' must be a text"),
    "long_sql": (f"asset: {ASSET}\nrules:\n  - id: s\n    template: custom_sql\n    params:\n      sql: \"SELECT count(1) FROM ${{table}} WHERE '{'x' * 20000}' <> ''\"\n    comparator: '='\n    expect: 0\n", "more than 20000"),
}  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), list(CASES.values()), ids=list(CASES))
def test_refused_at_load_in_one_line_fast(tmp_path, text, expected):
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    t0 = time.perf_counter()
    with pytest.raises(RuleError) as info:
        load_rules([path], SCHEMAS, TABLES)
    elapsed = time.perf_counter() - t0
    message = str(info.value)
    assert expected in message and "\n" not in message and len(message) < 600, message
    assert elapsed < 1.0, elapsed


def test_the_bomb_is_small_and_the_file_is_capped(tmp_path):
    assert len(_bomb()) < 1000
    path = tmp_path / "big.yaml"
    path.write_text(f"asset: {ASSET}\nrules:\n{RULE}" + "# padding\n" * 110_000)
    with pytest.raises(RuleError, match="more than a rule file may hold"):
        load_rules([path], SCHEMAS, TABLES)


def test_a_custom_sql_string_result_is_capped_in_the_message():
    rule = make_rule(id="s", template="custom_sql", params={"sql": "SELECT max(status) FROM ${table}"},
                     comparator="=", expect=0)  # fmt: skip
    verdict = judge(rule, "x" * 1_000_000, RuleContext(partition_key="2024-01-01"))
    assert not verdict.passed and len(verdict.message) < 600 and "1000002 characters" in verdict.message
