"""The platform's one place for scrubbing secrets out of text before it leaves the process.

Every message that reaches Dagster (Failure descriptions, event log), the job log (error and output columns), an
alert or a log line goes through `scrub_text` (or `scrub` for JSON-like payloads); `redact_url` shows a database
URL without its secrets. Error texts come from drivers, Spark and user code and quote URLs and options in every
form, so three passes run, each catching what the others cannot:

1. **Known secrets** are masked wherever they appear, as written or percent-encoded: the value of
   `SHARP_CDC_MYSQL_PASSWORD`, the password (and secret query parameters) of `SHARP_LOG_DB_URL`, and
   `SHARP_ALERT_WEBHOOK_URL` (whose path or query is the secret). This catches a secret quoted without its URL,
   or a fragment of a URL a driver misread. Values shorter than 4 characters are not masked as bare substrings
   (they would mask ordinary words); they are still masked inside URLs and `key=value` pairs.
2. **URLs** (`scheme://...`) are parsed with SQLAlchemy's own `make_url`; the password is hidden with
   `URL.render_as_string(hide_password=True)`. A password holding a raw `@` makes `make_url` split it at the
   first `@` (host `rest@db`), so such URLs, and any URL it cannot parse, are masked from the first `:` of the
   user-info to the *last* `@` that is followed by a host: over-masking rather than a leak.
3. **`key=value` secrets** in free text, JDBC options, JSON and URL query strings: `password=`, `?pwd=`,
   `"token": "..."`, `api_key=` and friends.

SQLAlchemy is imported inside the functions: the CLI's fast paths import this module without it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus, urlsplit

MASK = "***"

# Environment variables that hold a secret or a URL with one; `known_secrets` reads them at call time.
SECRET_ENV = ("SHARP_CDC_MYSQL_PASSWORD", "SHARP_LOG_DB_URL", "SHARP_ALERT_WEBHOOK_URL")
MIN_BARE_SECRET = 4

_SECRET_NAME = r"password|passwd|pwd|secret|token|api[_\-]?key|access[_\-]?key|credential"
_SECRET_KEY = re.compile(_SECRET_NAME, re.IGNORECASE)
# password=..., token: ..., "secret": "..." and friends in free text, JDBC options, JSON and query strings.
_KEY_VALUE = re.compile(
    r"(?P<key>[\"']?\b[\w.\-]*(?:" + _SECRET_NAME + r")[\w.\-]*\b[\"']?)"
    r"(?P<sep>\s*[=:]\s*)"
    r"(?P<quote>[\"']?)(?P<value>[^\s&;,'\"}]+)(?P=quote)",
    re.IGNORECASE,
)
# A URL as it appears in text: scheme:// up to whitespace or a quote.
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<rest>[^\s'\"<>`]+)")
# What follows the user-info's `@`: a host (name, IPv4 or [IPv6]), an optional port, then the end of the
# authority (path, query, fragment, end, or the punctuation that ends a URL in prose).
_HOST_AFTER_AT = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-%]+)(?::\d*)?(?:$|[/?#,;)\]}])")
_TRAILING = ".,;:)]}"


def _userinfo_end(rest: str) -> int | None:
    """Index of the `@` ending the user-info of `rest` (the URL after `://`): the last `@` followed by a host.

    The last one, because a password may hold a raw `@`, `:`, `/` or `?`; `None` when there is no user-info.
    """
    at = rest.rfind("@")
    while at > 0:
        if _HOST_AFTER_AT.match(rest, at + 1):
            return at
        at = rest.rfind("@", 0, at)
    return None


def _mask_by_text(scheme: str, rest: str) -> str:
    """Mask the password of a URL the text way: from the user-info's first `:` to its last `@`."""
    end = _userinfo_end(rest)
    if end is None:
        return scheme + rest
    user, colon, _ = rest[:end].partition(":")
    if not colon:
        return scheme + rest
    return f"{scheme}{user}:{MASK}{rest[end:]}"


def _parse(url: str) -> Any:
    """SQLAlchemy's reading of `url`, or None when it cannot read it or misreads a raw `@` in the password."""
    try:
        from sqlalchemy.engine import (
            make_url,  # not at the top: the command line imports redact before dispatch
        )

        parsed = make_url(url)
    except Exception:  # not a URL SQLAlchemy understands (or a malformed one): the text rules apply
        return None
    if parsed.host and "@" in parsed.host:
        return None  # `user:p@ss@db` read as password "p", host "ss@db"
    return parsed


def url_secrets(url: str) -> list[str]:
    """The secret values inside one URL: its password and its secret-named query parameters' values."""
    found: list[str] = []
    parsed = _parse(url)
    if parsed is not None:
        if parsed.password:
            found.append(str(parsed.password))
        for key, value in parsed.query.items():
            if _SECRET_KEY.search(key):
                found.extend([value] if isinstance(value, str) else list(value))
        return [s for s in found if s]
    scheme, sep, rest = url.partition("://")
    end = _userinfo_end(rest) if sep else None
    if end is not None and ":" in rest[:end]:
        found.append(rest[:end].partition(":")[2])
    found.extend(m["value"] for m in _KEY_VALUE.finditer(url))
    return [s for s in found if s]


def redact_url(url: str) -> str:
    """A URL with its secrets hidden, for messages and logs: password and secret query parameters.

    >>> redact_url("postgresql://etl:s3cret@db:5432/log")
    'postgresql://etl:***@db:5432/log'
    >>> redact_url("postgresql://etl@db/log?password=s3cret&sslmode=require")
    'postgresql://etl@db/log?password=***&sslmode=require'
    >>> redact_url("mysql://etl:p@ss@db/x")
    'mysql://etl:***@db/x'
    """
    url = str(url)
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _KEY_VALUE.sub(_mask_pair, url)
    parsed = _parse(url)
    if parsed is None:
        shown = _mask_by_text(scheme + sep, rest)
    elif parsed.password is not None:
        shown = parsed.render_as_string(hide_password=True)
    else:
        shown = url
    return _KEY_VALUE.sub(_mask_pair, shown)


def _mask_pair(m: re.Match[str]) -> str:
    return f"{m['key']}{m['sep']}{m['quote']}{MASK}{m['quote']}"


def known_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The secret values configured in the environment (see `SECRET_ENV`), longest first, each also in its
    percent-encoded forms."""
    env = os.environ if environ is None else environ
    values: list[str] = []
    password = env.get("SHARP_CDC_MYSQL_PASSWORD", "")
    if password:
        values.append(password)
    log_db = env.get("SHARP_LOG_DB_URL", "").strip()
    if log_db:
        values.extend(url_secrets(log_db))
    webhook = env.get("SHARP_ALERT_WEBHOOK_URL", "").strip()
    if webhook:
        values.append(webhook)
        parts = urlsplit(webhook)
        tail = parts.path + (f"?{parts.query}" if parts.query else "")
        if tail.strip("/"):
            values.append(tail)
        values.extend(url_secrets(webhook))
    return _variants(values)


def _variants(values: Iterable[str], min_len: int = MIN_BARE_SECRET) -> list[str]:
    out: set[str] = set()
    for value in values:
        if len(value) < min_len:
            continue
        out.update({value, quote(value, safe=""), quote(value), quote_plus(value)})
    return sorted(out, key=len, reverse=True)


def scrub_text(text: str | None, extra_secrets: Iterable[str] = ()) -> str | None:
    """Mask every secret in `text`: known secret values, URL passwords and `key=value` secrets.

    `extra_secrets` are further values to mask whatever their length (e.g. the password of the engine that
    failed).

    >>> scrub_text("connect postgresql://etl:s3cret@db/log failed; password=hunter2")
    'connect postgresql://etl:***@db/log failed; password=***'
    """
    if text is None:
        return None
    text = str(text)
    for secret in sorted({*known_secrets(), *_variants(extra_secrets, 1)}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    # Passwords of the URLs in this text, masked also where the text repeats them outside the URL.
    found = [s for m in _URL.finditer(text) for s in url_secrets(m.group(0).rstrip(_TRAILING))]
    text = _URL.sub(_scrub_url, text)
    for secret in _variants(found):
        text = text.replace(secret, MASK)
    return _KEY_VALUE.sub(_mask_pair, text)


def _scrub_url(m: re.Match[str]) -> str:
    token = m.group(0)
    body = token.rstrip(_TRAILING)
    return redact_url(body) + token[len(body) :]


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
