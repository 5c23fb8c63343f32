"""The JVM packages: pinned once (jvm/pom.xml), matching PySpark, fetched by the bootstrap, given to Spark."""

from __future__ import annotations

import re
import tomllib
import xml.etree.ElementTree as ET

from sharp_dagster import jvm
from sharp_dagster.settings import REPO_ROOT

NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _pom_property(name: str) -> str:
    root = ET.parse(jvm.POM).getroot()
    return root.find(f"m:properties/m:{name}", NS).text


def test_spark_packages_match_the_pyspark_pin():
    deps = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pyspark = next(d for d in deps if d.startswith("pyspark=="))
    assert pyspark == f"pyspark=={_pom_property('spark.version')}"
    minor = ".".join(_pom_property("spark.version").split(".")[:2])
    assert _pom_property("iceberg.spark.binary.version") == minor


def test_no_registry_is_named_in_the_poms():
    for pom in [jvm.POM, *jvm.POM.parent.glob("*/pom.xml")]:
        text = pom.read_text()
        assert "<repositories>" not in text and "<repository>" not in text, pom
        assert not re.search(r"https?://(?!maven\.apache\.org/|www\.w3\.org/)", text), pom


def test_every_spark_session_gets_the_fetched_jars(spark):
    given = spark.sparkContext.getConf().get("spark.jars").split(",")
    for jar in jvm.jars("spark"):
        assert str(jar) in given
    # the classes are really there, as Spark loads user jars: Spark's Kafka source and Iceberg's catalog
    utils = spark.sparkContext._jvm.org.apache.spark.util.Utils
    for name in (
        "org.apache.spark.sql.kafka010.KafkaSourceProvider",
        "org.apache.iceberg.spark.SparkCatalog",
    ):
        assert utils.classForName(name, False, False).getName() == name


def test_missing_jars_say_how_to_fetch_them(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARP_JVM_LIB_DIR", str(tmp_path))
    try:
        jvm.jars("spark")
    except jvm.JvmPackagesMissing as exc:
        assert "scripts/bootstrap.sh" in str(exc) and "dependency:copy-dependencies" in str(exc)
    else:
        raise AssertionError("no error for a missing jar folder")
