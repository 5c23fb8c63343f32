"""The tables of one script, as the lineage walk (`parser.py`) sees them while it reads the statements in order.

This module owns what a table name stands for at a point of the script: the names as the dialect resolves them
(Spark and Hive lower-case), the columns the caller's schema gives, and the versions of tables the script itself
writes (`Write`: CREATE starts a version, INSERT adds to the current one; a dropped or renamed one is hidden). A
source column's table_key (`relations.Key`) is a real table's name or the index of one of those versions; once the
script ends, `expand` and `hidden_closure` resolve the indexes, passing through hidden versions to what they read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sqlglot import exp

from sharp_dagster.lineage.relations import EMPTY, Key, Src

# Spark and Hive resolve identifiers case-insensitively, so names are lower-cased there. Spark's
# `spark.sql.caseSensitive=true` makes columns, aliases and CTE names case-sensitive; table names stay
# case-insensitive (the session catalog lower-cases them either way).
_CASE_INSENSITIVE = {"spark", "hive"}
# `format.`/path`` reads files, not a table (Spark's "path relations"); these are the formats Spark accepts there.
PATH_FORMATS = frozenset({"parquet", "orc", "json", "csv", "text", "avro", "delta", "iceberg", "binaryfile"})


def is_path(text: str) -> bool:
    """Whether a relation name is a file location (`/data/x`, `s3a://b/x`, `file:/x`) rather than a table."""
    return text.startswith("/") or "://" in text or text.startswith("file:")


class Write:
    """One version of a table written by the script (CREATE starts a version, INSERT adds to the current one)."""

    __slots__ = ("name", "cols", "deps", "tables", "hidden", "kinds", "conds")

    def __init__(self, name: str, hidden: bool):
        self.name = name
        self.cols: dict[str, set] = {}
        self.deps: set = set()  # (key, column, dependency kind) triples
        self.tables: set = set()
        self.hidden = hidden
        self.kinds: dict[str, int] = {}  # column -> how it is computed (bits of `relations`)
        self.conds: dict[str, set] = {}  # column -> its sources read only in conditions

    def computed(self, col: str, kind: int, conds: Iterable) -> None:
        self.kinds[col] = self.kinds.get(col, 0) | kind
        if conds:
            self.conds.setdefault(col, set()).update(conds)

    def known_columns(self) -> list[str] | None:
        if not self.cols or "*" in self.cols:
            return None
        return list(self.cols)


def _with_set(cols: list[str] | None) -> tuple[list[str], frozenset] | None:
    return None if cols is None else (cols, frozenset(cols))


class ScriptTables:
    """State of one parse_script call: the script's table versions, the tables it only read, its renames."""

    def __init__(
        self,
        dialect: str,
        schema: Mapping[str, Mapping[str, str]] | None,
        case_sensitive: bool | None = None,
    ):
        self.ci_tables = dialect in _CASE_INSENSITIVE
        self.ci = self.ci_tables and not case_sensitive
        self.dialect = dialect
        self.paths: dict[str, str] = {}  # path datasets read or written: name -> location
        self.renames: list[tuple[str, str]] = []
        self.schema = schema or {}
        self._schema_ci: dict[str, Mapping[str, str]] | None = None
        self._schema_cache: dict[str, tuple[list[str], frozenset] | None] = {}
        self.writes: list[Write] = []
        self.current: dict[str, int] = {}
        self.reads: set = set()

    # ---- names -------------------------------------------------------------------------------------------------
    def norm(self, name: str) -> str:
        return name.lower() if self.ci else name

    def set_case_sensitive(self, on: bool) -> None:
        """`SET spark.sql.caseSensitive=...` in the script: the statements after it resolve names that way."""
        self.ci = self.ci_tables and not on
        self._schema_cache.clear()

    def table_name(self, t: exp.Table) -> str:
        args = t.args
        name = args["this"].name if args.get("this") is not None else ""
        db = args.get("db")
        if db is not None:
            if args.get("catalog") is None and is_path(name) and db.name.lower() in PATH_FORMATS:
                return self.path_dataset(db.name, name)
            cat = args.get("catalog")
            name = f"{cat.name}.{db.name}.{name}" if cat is not None else f"{db.name}.{name}"
        return name.lower() if self.ci_tables else name

    def path_dataset(self, file_format: str, location: str) -> str:
        """A path dataset, named as Spark SQL names a path relation (`parquet./data/x`); the location keeps its
        case (file systems are case-sensitive) and is listed in `paths`."""
        name = f"{file_format.lower()}.{location}"
        self.paths[name] = location
        return name

    def schema_columns(self, name: str) -> tuple[list[str], frozenset] | None:
        if name in self._schema_cache:
            return self._schema_cache[name]
        cols = self.schema.get(name)
        if cols is None and self.ci_tables:
            if self._schema_ci is None:
                self._schema_ci = {k.lower(): v for k, v in self.schema.items()}
            cols = self._schema_ci.get(name)
        found = None
        if cols is not None:
            names = [c.lower() for c in cols] if self.ci else list(cols)
            found = (names, frozenset(names))
        self._schema_cache[name] = found
        return found

    def resolve_table(self, name: str) -> tuple[Key, tuple[list[str], frozenset] | None]:
        idx = self.current.get(name)
        if idx is not None:
            return idx, _with_set(self.writes[idx].known_columns())
        return name, self.schema_columns(name)

    # ---- versions written by the script ------------------------------------------------------------------------
    def new_write(self, name: str, hidden: bool) -> Write:
        w = Write(name, hidden)
        self.current[name] = len(self.writes)
        self.writes.append(w)
        return w

    def target_write(self, name: str) -> Write:
        idx = self.current.get(name)
        return self.writes[idx] if idx is not None else self.new_write(name, hidden=False)

    def target_columns(self, name: str) -> list[str] | None:
        idx = self.current.get(name)
        if idx is not None:
            return self.writes[idx].known_columns()
        found = self.schema_columns(name)
        return None if found is None else found[0]

    def same_name_columns(self, key: Key) -> dict[str, set]:
        """Each column of a table (or of a version written earlier in the script) mapped to itself; a `*` column
        when no schema knows them."""
        if type(key) is int:
            cols: list[str] | None = list(self.writes[key].cols) or None
        else:
            found = self.schema_columns(key)
            cols = None if found is None else found[0]
        if not cols:
            return {"*": {(key, "*")}}
        return {c: {(key, c)} for c in cols}

    # ---- end of script -----------------------------------------------------------------------------------------
    def expand(self, src: Src, memo: dict) -> set:
        key, col = src
        if type(key) is str:
            return {src}
        w = self.writes[key]
        if not w.hidden:
            return {(w.name, col)}
        got = memo.get(src)
        if got is not None:
            return got
        memo[src] = EMPTY  # a version reading itself must not loop
        srcs: Iterable = w.cols.get(col) or ()
        if col == "*":
            srcs = set().union(*w.cols.values()) if w.cols else ()
        elif col not in w.cols and "*" in w.cols:
            srcs = {(k, col) for k, _ in w.cols["*"]}
        out: set = set()
        for s in srcs:
            out |= self.expand(s, memo)
        memo[src] = out
        return out

    def expand_kind(self, src: Src, memo: dict) -> tuple[int, set]:
        """How a source column of a hidden version is computed from the real columns behind it, and which of those
        it reads only in conditions; (0, empty) for a real table's column."""
        key, col = src
        if type(key) is str or not self.writes[key].hidden:
            return 0, set()
        got = memo.get(src)
        if got is not None:
            return got
        memo[src] = (0, set())
        w = self.writes[key]
        kind = w.kinds.get(col, 0)
        conds: set = set()
        for s in w.conds.get(col, ()):
            conds |= self.expand(s, {})
        for s in w.cols.get(col, ()):
            k, c = self.expand_kind(s, memo)
            kind |= k
            conds |= c
        memo[src] = (kind, conds)
        return kind, conds

    def hidden_closure(self, keys: Iterable[Key]) -> tuple[set, set]:
        """Real tables behind `keys`, and the dependencies of the hidden tables passed through on the way."""
        tables: set = set()
        deps: set = set()
        seen: set = set()
        stack = list(keys)
        while stack:
            k = stack.pop()
            if type(k) is str:
                tables.add(k)
                continue
            w = self.writes[k]
            if not w.hidden:
                tables.add(w.name)
                continue
            if k in seen:
                continue
            seen.add(k)
            deps |= w.deps
            stack.extend(w.tables)
        return tables, deps
