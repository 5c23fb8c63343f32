"""The error of a rule's parameters, shared by the parameter checks (`params.py`, `quoting.py`), the template
catalogue (`templates.py`) and the custom SQL guard (`sqlguard.py`, whose `SqlRejected` is one); kept apart so
that each imports it without importing the others."""

from __future__ import annotations


class ParamError(ValueError):
    """A parameter is missing, unknown or not of its declared type; rules.py adds the file and rule id."""
