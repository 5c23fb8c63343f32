"""Would Java's `java.util.regex.Pattern` compile this pattern? Checked at load, where there is no JVM.

A `regex_match_rate` pattern runs in Spark (`RLIKE`), that is Java's regex engine, not Python's. Python's `re`
accepts a number of patterns Java refuses (and then the rule's scan fails at run time), so a pattern must pass
both: Python's compiler for the plain typos, and this scan for the syntax where the two differ:

* Python's named groups and extensions: `(?P<n>...)`, `(?P=n)`, `(?#...)`, `(?(1)...)`, the flags `a` and `L`;
* a group name Java refuses (`(?<my_name>...)`: ASCII letters and digits only, a letter first);
* a `{` that does not open a repetition `{n}`, `{n,}`, `{n,m}` after something repeatable (Python reads it as
  the character; Java refuses it: `${`, `a{,3}`, `{x}`);
* a backslash before a letter Java has no escape for (`\\U`, `\\i`), an octal escape `\\0` without a digit,
  `\\x` without two hex digits or `{...}`;
* a `[` inside a character class (Java nests classes, Python reads the character).

>>> java_regex_problem("^[a-z]+@[a-z.]+$") is None
True
>>> java_regex_problem("(?P<c>[a-z]+)")
"Python's named group (?P<...>...): write (?<name>...)"
"""

from __future__ import annotations

import re

_QUANTIFIER = re.compile(r"\{\d+(,\d*)?\}")
_GROUP_NAME = re.compile(r"\(\?<([^>=!]*)>")
_JAVA_LETTER_ESCAPES = set("tnrfaecdDsSwWhHvVbBAGzZQERXkNpPux")
_ESCAPE_NOTE = "Java's regex has no escape \\{}"


def java_regex_problem(pattern: str) -> str | None:
    """Why Java's regex compiler would refuse `pattern` where Python's accepts it; None when it would not."""
    if "(?P<" in pattern or "(?P=" in pattern or "(?P>" in pattern:
        return "Python's named group (?P<...>...): write (?<name>...)"
    for construct, what in (("(?#", "a comment group (?#...)"), ("(?(", "a conditional group (?(...)...)")):
        if construct in pattern:
            return f"{what} is Python's only"
    for name in _GROUP_NAME.findall(pattern):
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", name):
            return f"group name {name!r}: Java takes ASCII letters and digits only, a letter first"
    return _scan(pattern)


def _scan(pattern: str) -> str | None:
    i, in_class, repeatable = 0, False, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            problem = _escape(pattern, i)
            if problem:
                return problem
            if pattern[i + 1 : i + 2] == "Q":  # \Q...\E: everything between is literal
                end = pattern.find("\\E", i + 2)
                i = len(pattern) if end < 0 else end + 2
            elif pattern[i + 1 : i + 2] in ("p", "P", "N", "x") and pattern[i + 2 : i + 3] == "{":
                end = pattern.find("}", i + 3)  # \p{Alpha}, \N{NAME}, \x{263A}: the braces are the escape's
                i = len(pattern) if end < 0 else end + 1
            else:
                i += 2
            repeatable = True
            continue
        if in_class:
            if ch == "[":
                return f"a '[' inside a character class (position {i}): Java nests classes; write \\["
            in_class = ch != "]"
            repeatable = not in_class
            i += 1
            continue
        if ch == "[":
            in_class = True
            i += 1 + (pattern[i + 1 : i + 2] == "^")
            continue
        if ch == "{":
            match = _QUANTIFIER.match(pattern, i)
            if not match or not repeatable:
                return f"a '{{' that opens no repetition (position {i}): Java refuses it; write \\{{ for the character"
            i = match.end()
            repeatable = False
            continue
        if ch == "(" and pattern.startswith("(?", i):
            flags = re.match(r"\(\?([a-zA-Z-]*)[:)]", pattern[i:])
            if flags and set(flags.group(1)) & set("aL"):
                return "the flags (?a) and (?L) are Python's only"
        repeatable = ch not in "(|^"
        i += 1
    return None


def _escape(pattern: str, i: int) -> str | None:
    nxt = pattern[i + 1 : i + 2]
    if nxt.isascii() and nxt.isalpha() and nxt not in _JAVA_LETTER_ESCAPES:
        return _ESCAPE_NOTE.format(nxt)
    if nxt == "0" and not re.match(r"[0-7]", pattern[i + 2 : i + 3]):
        return "\\0 needs an octal digit after it in Java (\\00 is the NUL character)"
    if nxt == "x" and not re.match(r"[0-9a-fA-F]{2}|\{[0-9a-fA-F]+\}", pattern[i + 2 :]):
        return "\\x takes two hex digits or {hex...} in Java"
    return None
