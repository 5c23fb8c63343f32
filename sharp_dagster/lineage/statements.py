"""The statements of a script: what each one writes, into which table version, from which query.

This module owns the statements besides the query walk (`queries.py`): INSERT (partitions, column lists, multi-table
inserts), CREATE TABLE / VIEW (AS SELECT, LIKE, CLONE, DDL only, temporary and global temporary views, file-backed
views), CACHE TABLE, DROP (which hides a version the script wrote), MERGE, UPDATE, ALTER TABLE RENAME, and the table
moves read from statements sqlglot keeps as opaque Commands (`commands.py`). Each writes into the script's tables
(`tables.ScriptTables`); the script's end resolves them (`parser.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

from sharp_dagster.lineage.commands import command_moves
from sharp_dagster.lineage.gc_quiet import release
from sharp_dagster.lineage.queries import QUERY_TYPES, SETOP_TYPES, QueryWalker
from sharp_dagster.lineage.relations import EMPTY, FILTER, JOIN, Key, Rel, Scope, TableSource
from sharp_dagster.lineage.tables import ScriptTables, Write

_Column = exp.Column
_Star = exp.Star
_Table = exp.Table
_Subquery = exp.Subquery
_Select = exp.Select


class StatementReader:
    """Reads the statements of one parse_script call, in order, into the script's tables."""

    def __init__(self, script: ScriptTables, dialect_obj: Dialect):
        self.script = script
        self.walker = QueryWalker(script)
        self.dialect_obj = dialect_obj

    def write_rel(
        self,
        w: Write,
        rel: Rel,
        target_cols: list[str] | None,
        static: Sequence[str] = (),
        dynamic: Sequence[str] = (),
    ) -> None:
        """Record `rel` written into `w`: outputs map by position to `target_cols` (else by their own names),
        then to the dynamic partition columns; static partition columns get a constant (no source)."""
        w.deps |= rel.deps
        w.tables |= rel.tables
        n_out = len(rel.names)
        n_dyn = min(len(dynamic), n_out)
        n_base = n_out - n_dyn
        if "*" in rel.index:
            target_cols = None  # an unexpanded star hides the positions: keep the output names
        if target_cols is None:
            names = [] if rel.synthetic else rel.names[:n_base]
        else:
            names = list(target_cols[:n_base])
            if len(names) < n_base and not rel.synthetic:
                names += rel.names[len(names) : n_base]
        cols = w.cols
        for i, name in enumerate(names):
            _merge(cols, name, rel.sources[i])
            w.computed(name, rel.kinds[i], rel.conds[i])
        for j in range(n_dyn):
            _merge(cols, dynamic[j], rel.sources[n_base + j])
            w.computed(dynamic[j], rel.kinds[n_base + j], rel.conds[n_base + j])
        for name in static:
            _merge(cols, name, EMPTY)

    def statement(self, st: exp.Expression, default_target: str | None) -> None:
        t = type(st)
        if t is exp.Insert:
            self.insert(st)
        elif t is _Select or t in SETOP_TYPES or t is _Subquery:
            rel = self.walker.query(st, {}, None)
            if default_target is not None:
                name = self.script.norm(default_target)
                self.write_rel(self.script.target_write(name), rel, self.script.target_columns(name))
            else:
                self.script.reads |= rel.tables
        elif t is exp.Create:
            self.create(st)
        elif t is exp.Cache:
            q = st.args.get("expression")
            if q is not None:
                rel = self.walker.query(q, {}, None)
                self.write_rel(self.script.new_write(self.script.table_name(st.this), hidden=True), rel, None)
        elif t is exp.Drop:
            if str(st.args.get("kind") or "").upper() in ("TABLE", "VIEW"):
                for tbl in st.args.get("tables") or ([st.this] if st.this is not None else []):
                    if type(tbl) is _Table:
                        idx = self.script.current.pop(self.script.table_name(tbl), None)
                        if idx is not None:
                            self.script.writes[idx].hidden = True
        elif t is exp.MultitableInserts:
            source = st.args.get("source")
            for ins in st.expressions:
                if type(ins) is exp.Insert:
                    self.insert(ins, from_override=source)
        elif t is exp.Merge:
            self.merge(st)
        elif t is exp.Update:
            self.update(st)
        elif t is exp.Alter:
            for action in st.args.get("actions") or ():
                if type(action) is exp.AlterRename and type(action.this) is _Table:
                    self.rename(self.script.table_name(st.this), self.script.table_name(action.this))
        elif t is exp.Set:
            self.set_conf(st)
        elif t is exp.Command:
            for move in command_moves(st, self.dialect_obj):
                self.move(move.kind, self.script.table_name(move.target), self.script.table_name(move.source))
        # USE, SET, ADD JAR (Command), ANALYZE, DROP FUNCTION, DELETE, RENAME COLUMN, ...: no lineage.

    def set_conf(self, st: exp.Set) -> None:
        """`SET spark.sql.caseSensitive=true|false`: how the statements after it compare names."""
        for item in st.expressions:
            eq = item.this if type(item) is exp.SetItem else None
            if type(eq) is not exp.EQ or eq.this.sql(dialect="spark").lower() != "spark.sql.casesensitive":
                continue
            value = eq.expression
            text = value.name if not isinstance(value, exp.Boolean) else str(value.this)
            self.script.set_case_sensitive(text.strip().lower() == "true")
            self.walker.ci = self.script.ci

    def insert(self, ins: exp.Insert, from_override: Any = None) -> None:
        target = ins.this
        explicit: list[str] | None = None
        if type(target) is exp.Schema:
            explicit = [self.script.norm(i.name) for i in target.expressions]
            target = target.this
        q = ins.args.get("expression")
        ctes = self.walker.ctes(ins, {}, None)
        if q is None and type(ins.args.get("source")) is _Table:
            # Spark's `INSERT INTO t TABLE s` is `INSERT INTO t SELECT * FROM s`.
            q = exp.Select(expressions=[exp.Star()]).from_(ins.args["source"].copy(), copy=False)
            rel = self.walker.query(q, ctes, None, from_override)
            release([q])
        else:
            rel = self.walker.query(q, ctes, None, from_override) if q is not None else Rel()
        if type(target) is exp.Directory:
            # INSERT OVERWRITE [LOCAL] DIRECTORY: the files written are a path dataset, columns by output name.
            stored = ins.args.get("stored")
            fmt = stored.name if isinstance(stored, exp.FileFormatProperty) else "text"
            name = self.script.path_dataset(fmt, target.this.name)
            self.write_rel(self.script.new_write(name, hidden=False), rel, None)
            return
        if type(target) is not _Table:
            self.script.reads |= rel.tables
            return
        name = self.script.table_name(target)
        static: list[str] = []
        dynamic: list[str] = []
        part = target.args.get("partition") or ins.args.get("partition")
        if isinstance(part, exp.Partition):
            for e in part.expressions:
                if type(e) is exp.EQ:
                    static.append(self.script.norm(e.this.name))
                else:
                    dynamic.append(self.script.norm(e.name))
        if explicit is None:
            cols = self.script.target_columns(name)
            if cols is not None and (static or dynamic):
                parts = set(static) | set(dynamic)
                cols = [c for c in cols if c not in parts]
        else:
            cols = explicit
        self.write_rel(self.script.target_write(name), rel, cols, static, dynamic)

    def create(self, st: exp.Create) -> None:
        kind = str(st.args.get("kind") or "").upper()
        if kind not in ("TABLE", "VIEW"):
            return
        target = st.this
        coldefs: list[str] | None = None
        if type(target) is exp.Schema:
            coldefs = [
                self.script.norm(c.name)
                for c in target.expressions
                if isinstance(c, (exp.ColumnDef, exp.Identifier))
            ]
            target = target.this
        if type(target) is not _Table:
            return
        props = st.args.get("properties")
        temporary = is_global = False
        part_cols: list[str] = []
        like: exp.Expression | None = None
        file_format = path = None
        for p in props.expressions if props is not None else ():
            tp = type(p)
            if tp is exp.TemporaryProperty:
                temporary = True
            elif tp is exp.FileFormatProperty:
                file_format = p.name.lower()
            elif tp is exp.OptionsProperty:
                path = next((o.text("value") for o in p.expressions if o.name.lower() == "path"), path)
            elif tp is exp.GlobalProperty:
                is_global = True
            elif tp is exp.LikeProperty:
                like = p.this
            elif tp is exp.PartitionedByProperty:
                schema = p.this
                items = schema.expressions if isinstance(schema, (exp.Schema, exp.Tuple)) else [schema]
                part_cols = [self.script.norm(c.name) for c in items]
        if st.this is not target:  # MySQL `CREATE TABLE t (LIKE s)` puts LIKE among the column definitions
            like = next((c.this for c in st.this.expressions if type(c) is exp.LikeProperty), like)
        name = self.script.table_name(target)
        if is_global and temporary:
            name = f"global_temp.{name}"  # Spark's global temporary views are read as global_temp.<name>
        clone = st.args.get("clone")
        if type(clone) is exp.Clone and type(clone.this) is _Table:
            self.move("clone", name, self.script.table_name(clone.this), hidden=temporary)
            return
        if type(like) is _Table:
            self.move("like", name, self.script.table_name(like), hidden=temporary)
            return
        q = st.args.get("expression")
        if q is not None and isinstance(q, QUERY_TYPES):
            rel = self.walker.query(q, self.walker.ctes(st, {}, None), None)
            self.write_rel(self.script.new_write(name, hidden=temporary), rel, coldefs)
            return
        # DDL only: a target with no sources yet. Its columns name INSERT targets and expand SELECT * later on.
        w = self.script.new_write(name, hidden=temporary)
        if temporary and file_format and path:
            # `CREATE TEMPORARY VIEW v USING parquet OPTIONS (path '...')`: the view reads those files, named
            # as Spark SQL names a path table (parquet.`/data/x`), so lineage passes through the view to them.
            files = self.script.path_dataset(file_format, path)
            w.tables.add(files)
            if not coldefs:
                w.cols["*"] = {(files, "*")}
        for c in (coldefs or []) + part_cols:
            w.cols.setdefault(c, set())

    def move(self, kind: str, target: str, source: str, hidden: bool = False) -> None:
        """A statement that lands `source`'s rows (or, for LIKE, its column layout) in `target`, column by
        column under the same names.

        like / clone: `target` is a new table. rename: see `rename`. exchange: a partition of `source` moves
        into `target` (Hive: `ALTER TABLE target EXCHANGE PARTITION (..) WITH TABLE source`); MySQL's EXCHANGE
        swaps the partition's rows with the other table's, so there the data moves both ways."""
        if kind == "rename":
            self.rename(source, target)
            return
        src_key, _ = self.script.resolve_table(source)
        if kind == "exchange":
            if self.script.dialect == "mysql":
                dst_key, _ = self.script.resolve_table(target)
                self._land(self.script.target_write(target), src_key)
                self._land(self.script.target_write(source), dst_key)
            else:
                self._land(self.script.target_write(target), src_key)
            return
        self._land(self.script.new_write(target, hidden=hidden), src_key)

    def _land(self, w: Write, src_key: Key) -> None:
        if src_key == w.name or src_key == self.script.current.get(w.name):
            return  # a table moved onto itself: no lineage edge
        w.tables.add(src_key)
        for c, srcs in self.script.same_name_columns(src_key).items():
            _merge(w.cols, c, srcs)

    def rename(self, old: str, new: str) -> None:
        """`ALTER TABLE old RENAME TO new`: `new` holds what `old` held, so it inherits `old`'s lineage.

        A table the script itself wrote under `old` (the "build into staging, then rename" pattern) no longer
        exists under that name: like a dropped one it is hidden, and `new` is reported with the real sources and
        column lineage of what was written. A table that existed before the script is a source of `new` (a
        dataset edge, with same-name column edges), as a lineage graph needs to connect `old`'s history to
        `new`. Either way the rename is listed in `ScriptLineage.renames`."""
        self.script.renames.append((old, new))
        idx = self.script.current.pop(old, None)
        if idx is None:
            self._land(self.script.new_write(new, hidden=False), old)
            return
        was_hidden = self.script.writes[idx].hidden
        self.script.writes[idx].hidden = True
        self._land(self.script.new_write(new, hidden=was_hidden), idx)

    def merge(self, st: exp.Merge) -> None:
        target = st.this
        name = self.script.table_name(target)
        scope = Scope(None, self.walker.ctes(st, {}, None))
        rel = Rel()
        self.walker.add_source(scope, st.args["using"], rel)
        using_src = list(scope.sources.values())[0] if scope.sources else None
        t_alias = self.script.norm(target.alias) or self.script.norm(target.name)
        # Self-references resolve to the target's own name; they are dropped below (no self-loops).
        scope.sources[t_alias] = TableSource(name, None)
        deps: set = set()
        self.walker.steer(st.args["on"], scope, deps, None, JOIN)
        known_target = self.script.target_columns(name)
        w = self.script.target_write(name)
        cols = w.cols
        whens = st.args.get("whens")
        for when in whens.expressions if whens is not None else ():
            cond = when.args.get("condition")
            if cond is not None:
                self.walker.steer(cond, scope, deps, None, FILTER)
            then = when.args.get("then")
            if type(then) is exp.Update:
                for eq in then.expressions:
                    if type(eq) is _Star:
                        self._merge_star(cols, using_src)
                        continue
                    out, kind, conds = self.walker.value(eq.expression, scope, deps, None)
                    col = self.script.norm(eq.this.name)
                    out.discard((name, col))
                    _merge(cols, col, out)
                    w.computed(col, kind, conds)
            elif type(then) is exp.Insert:
                names = then.this
                values = then.expression.expressions if then.expression is not None else []
                if type(names) is _Star or (names is None and not values):
                    self._merge_star(cols, using_src)
                    continue
                if names is not None:
                    targets: list[str | None] = [self.script.norm(i.name) for i in names.expressions]
                else:
                    # INSERT VALUES (...) without a column list: the target's columns by position when known,
                    # else the name of a plain column value (VALUES (s.id, s.v) -> id, v).
                    known = known_target or []
                    targets = [
                        known[i]
                        if i < len(known)
                        else (self.script.norm(v.name) if type(v) is _Column else None)
                        for i, v in enumerate(values)
                    ]
                for tname, val in zip(targets, values, strict=False):
                    out, kind, conds = self.walker.value(val, scope, deps, None)
                    if tname is not None:
                        _merge(cols, tname, out)
                        w.computed(tname, kind, conds)
        w.deps |= {d for d in deps if d[0] != name} | rel.deps
        w.tables |= scope.tables
        if using_src is not None:
            w.tables |= using_src.tables if type(using_src) is Rel else {using_src.key}

    def _merge_star(self, cols: dict[str, set], src: Any) -> None:
        if src is not None:
            for n, srcs in src.expand():
                _merge(cols, n, srcs)

    def update(self, st: exp.Update) -> None:
        target = st.this
        name = self.script.table_name(target)
        scope = Scope(None, self.walker.ctes(st, {}, None))
        rel = Rel()
        t_alias = self.script.norm(target.alias) or self.script.norm(target.name)
        scope.sources[t_alias] = TableSource(name, self.script.target_columns(name))
        for j in target.args.get("joins") or ():
            self.walker.join(scope, j, rel)
        frm = st.args.get("from_")
        if frm is not None:
            self.walker.add_source(scope, frm.this, rel)
        for j in st.args.get("joins") or ():
            self.walker.join(scope, j, rel)
        deps = rel.deps
        w = self.script.target_write(name)
        for eq in st.expressions:
            out, kind, conds = self.walker.value(eq.expression, scope, deps, None)
            col = self.script.norm(eq.this.name)
            out.discard((name, col))
            _merge(w.cols, col, out)
            w.computed(col, kind, conds)
        where = st.args.get("where")
        if where is not None:
            self.walker.steer(where, scope, deps, None, FILTER)
        w.deps |= {d for d in deps if d[0] != name}
        w.tables |= scope.tables
        for alias, src in scope.sources.items():
            if alias != t_alias:
                w.tables |= src.tables if type(src) is Rel else {src.key}


def _merge(cols: dict[str, set], name: str, srcs: Iterable) -> None:
    acc = cols.get(name)
    if acc is None:
        cols[name] = set(srcs)
    else:
        acc |= srcs
