"""Java names resolved through Py4J once per process, not at every use.

PySpark and this package reach Java classes by name through Py4J's views of the JVM: `jvm.org.apache.iceberg.spark.
Spark3Util` asks the JVM what `org`, `org.apache`, ... each is, and PySpark's own calls ask for `functions`,
`PythonUtils` or (converting every Java exception) `py4j.reflection.TypeUtil` the same way. Each question that is
not a class (a package, or a name tried against PySpark's imports) is a failed `Class.forName`, which scans every
jar on the driver's class path: about 3 ms for `org.apache.iceberg.spark.Spark3Util`, and 600 such questions per
ODS table-day (bench/RESULTS.md, `source_day`). A package or class does not change in a running JVM, so
`remember_names` gives the context's views a memory of the answers (packages and classes only: static fields are
values, and errors are asked again). Only names are remembered; every call still goes to the JVM.

Nothing here imports Dagster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from py4j.java_gateway import JavaClass, JavaPackage, JVMView


def _ask_once(known: dict[str, Any], name: str, ask: Callable[[str], Any]) -> Any:
    """`ask(name)`, or its earlier answer when that was a package or a class (a package answered remembers too)."""
    found = known.get(name)
    if found is None:
        found = ask(name)
        if isinstance(found, JavaPackage) and not isinstance(found, KnownPackage):
            found = KnownPackage(found)
        if isinstance(found, (JavaClass, JavaPackage)):
            known[name] = found
    return found


class KnownPackage(JavaPackage):
    """A Java package whose sub-packages and classes are asked of the JVM once."""

    def __init__(self, package: JavaPackage) -> None:
        super().__init__(package._fqn, package._gateway_client, package._jvm_id)
        self._known: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # Py4J's own and magic names (and none before `_known` exists)
            return super().__getattr__(name)
        return _ask_once(self._known, name, super().__getattr__)


class KnownView(JVMView):
    """A view of the JVM whose names are asked once: the view it is made from (its id, its imports), shared, not
    a new view in the JVM (so `JVMView.__init__` is not called)."""

    def __init__(self, view: JVMView) -> None:
        self.__dict__.update(view.__dict__)
        self._known: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            return super().__getattr__(name)
        return _ask_once(self._known, name, super().__getattr__)


def remember_names(spark_context_class: Any, gateway: Any) -> None:
    """Give the gateway's view of the JVM (Py4J's, used for exceptions) and PySpark's (`SparkContext._jvm`) a memory
    of the names they resolve; once per gateway."""
    if not isinstance(gateway.jvm, KnownView):
        gateway.jvm = KnownView(gateway.jvm)
    view = spark_context_class._jvm
    if view is not None and not isinstance(view, KnownView):
        spark_context_class._jvm = gateway.jvm if view._id == gateway.jvm._id else KnownView(view)
