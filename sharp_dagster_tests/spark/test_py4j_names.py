"""Py4J's names asked of the JVM once (`spark/py4j_names.py`): the same package or class object again, no second
question to the JVM, calls and Java exceptions as before."""

from __future__ import annotations

import pytest
from py4j.java_gateway import JavaClass

from sharp_dagster.spark.java import jvm
from sharp_dagster.spark.py4j_names import KnownView


def _questions(spark, monkeypatch) -> list[str]:
    """The reflection commands (name lookups) sent to the JVM from now on."""
    client = spark.sparkContext._gateway._gateway_client
    sent: list[str] = []
    send = client.send_command

    def counted(command, *args, **kwargs):
        if command.startswith("r\n"):
            sent.append(command)
        return send(command, *args, **kwargs)

    monkeypatch.setattr(client, "send_command", counted)
    return sent


def test_a_class_is_asked_for_once_and_still_called(spark, monkeypatch):
    view = jvm(spark)
    assert isinstance(view, KnownView)
    assert isinstance(spark.sparkContext._gateway.jvm, KnownView), (
        "Py4J's own view (exceptions) remembers too"
    )
    first = view.java.util.ArrayList
    asked = _questions(spark, monkeypatch)
    again = view.java.util.ArrayList
    assert again is first and isinstance(first, JavaClass)
    assert asked == [], f"no question to the JVM for a name known already: {asked}"
    made = again()
    made.add("x")
    assert made.size() == 1  # the call itself goes to the JVM


def test_a_name_resolved_through_imports_and_java_errors_are_unchanged(spark):
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    assert jvm(spark).functions is jvm(spark).functions  # PySpark's `functions`, found by the view's imports
    assert spark.range(3).select(F.max("id")).first()[0] == 2
    with pytest.raises(AnalysisException, match="no_such_table_py4j"):
        spark.sql("SELECT * FROM no_such_table_py4j").collect()
