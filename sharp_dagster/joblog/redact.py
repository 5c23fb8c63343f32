"""Scrubbing secrets out of text and payloads before they reach the job log, a log line or an alert.

Error texts come from drivers, Spark and user code, and they sometimes quote a JDBC or SQLAlchemy URL with its
password, or a `password=...` option. Everything this package writes to the job log, the step log or an alert
goes through here first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# scheme://user:password@host  ->  scheme://user:***@host
_URL_CREDENTIALS = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s:/@'\"]*):(?P<pw>[^\s@/'\"]+)@"
)
# password=..., token: ..., "secret": "..." and friends in free text, JDBC options and JSON.
_KEY_VALUE = re.compile(
    r"(?P<key>[\"']?\b[\w.\-]*(?:password|passwd|pwd|secret|token|api[_\-]?key|access[_\-]?key)[\w.\-]*\b[\"']?)"
    r"(?P<sep>\s*[=:]\s*)"
    r"(?P<quote>[\"']?)(?P<value>[^\s&;,'\"}]+)(?P=quote)",
    re.IGNORECASE,
)
_SECRET_KEY = re.compile(
    r"password|passwd|pwd|secret|token|api[_\-]?key|access[_\-]?key|credential", re.IGNORECASE
)

MASK = "***"


def scrub_text(text: str | None) -> str | None:
    """Mask passwords in URLs and `key=value` secrets inside free text.

    >>> scrub_text("connect postgresql://etl:s3cret@db/log failed; password=hunter2")
    'connect postgresql://etl:***@db/log failed; password=***'
    """
    if text is None:
        return None
    text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    return _KEY_VALUE.sub(lambda m: f"{m['key']}{m['sep']}{m['quote']}{MASK}{m['quote']}", text)


def scrub(value: Any) -> Any:
    """Scrub a JSON-like structure: secret-looking keys are masked, strings are scrubbed, the rest is kept."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, Mapping):
        return {
            str(k): (MASK if _SECRET_KEY.search(str(k)) and v not in (None, "") else scrub(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [scrub(v) for v in value]
    return value
