"""Data-quality rules (DQC): templates, YAML rule entities, one-scan compilation, Spark runner, results store.

Plain Python + PySpark + SQLAlchemy, no Dagster import. Where things are decided:

- `templates.py`: the catalogue of rule templates; `builders.py`: the SQL each template builds; `params.py`: how
  parameters are validated and rendered; `quoting.py`: literals, identifiers and placeholders in SQL text;
  `errors.py`: `ParamError`;
- `rules.py`: the YAML rule format, what a validated `Rule` is, rule version hashes; `rule_validation.py`: the
  checks of one rule (`build_rule`); `rule_files.py`: reading rule files, `load_rules`; `context.py`: the run
  context (`RuleContext`) and its placeholder values;
- what a `custom_sql` rule may run: `plan_guard.py` (the verdict, on Spark's own plan of it, against
  `allowlist.py`), `sqlguard.py` (the early sqlglot check at load), `spark_check.py` (`dqc rules --spark`);
- `compiler.py`: how the rules of one asset partition become one aggregate query (+ per-rule queries);
- `evaluate.py`: pass/fail/warn verdicts and the quality score;
- `runner.py`: running on Spark (`RuleRunner`), blocking failures, alerts;
- `store.py`: the `dqc_result` table; `report.py` / `cli.py`: `sharp-dagster dqc report|rules`.

Names are re-exported lazily so that importing the CLI does not import PySpark.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Rule": "rules",
    "RuleContext": "context",
    "RuleError": "rules",
    "load_rules": "rule_files",
    "rules_for": "rules",
    "TEMPLATES": "templates",
    "compile_rules": "compiler",
    "explain_rules": "compiler",
    "RuleResult": "evaluate",
    "quality_score": "evaluate",
    "RuleRunner": "runner",
    "BlockingFailure": "runner",
    "alert_failures": "runner",
    "blocking_failures": "runner",
    "raise_for_blocking": "runner",
    "schema_of": "runner",
    "DqcStore": "store",
    "dqc_result": "store",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sharp_dagster.dqc' has no attribute {name!r}")
    return getattr(import_module(f"sharp_dagster.dqc.{module}"), name)
