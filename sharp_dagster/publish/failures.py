"""What Dagster shows for a failed publish: a `Failure` whose text is scrubbed of secrets, and an exception's text
as `Class: message` (for an error raised in the JVM, the Java class and message)."""

from __future__ import annotations

from dagster import Failure

from sharp_dagster.redact import scrub_text
from sharp_dagster.spark.iceberg_base import java_error


def as_failure(exc: BaseException, label: str) -> BaseException:
    """What Dagster shows for a failed run: a `Failure` whose text is scrubbed of secrets (raw exception text may
    quote a database URL); interrupts pass through unchanged."""
    if isinstance(exc, Failure) or not isinstance(exc, Exception):
        return exc
    return Failure(description=scrub_text(f"{label}: {error_text(exc)}"))


def error_text(exc: BaseException) -> str:
    """`Class: message`; for an error raised in the JVM, the Java class and message (Py4J's own text is the
    whole Java stack trace)."""
    if getattr(exc, "description", None):
        return str(exc.description)  # type: ignore[attr-defined]
    kind, message = java_error(exc)
    return f"{kind}: {message}"
