"""`sharp-dagster lineage ...`: parse a script's lineage, walk the project's lineage graph, check governance rules.

- `lineage parse --dialect D` reads a SQL script on stdin and prints one JSON object (ScriptLineage.to_dict()).
- `lineage graph TABLE --direction up|down|both [--depth N] [--columns]` prints the lineage graph as JSON (vertices, edges).
- `lineage impact TABLE.COLUMN...` prints the downstream columns (and the tables whose rows they steer) a change to
  each column breaks, transitively, with the SQL file and line reading it (`lineage/impact.py`), as a table or
  `--json`; the table is the longest leading part of the name that is a table (`dwd.t.o.id` is column `o.id`, as is
  ``dwd.t.`o.id` ``; an ODS table as users read it, `ods.orders.order_status`).
- `lineage check` lists governance violations; exit status 1 when there is any.
- `lineage serve [--host H] [--port N]` starts the lineage explorer (a web page per table) on loopback.

graph / impact / check build the project graph from the warehouse catalog, loaded only when those commands run.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sharp_dagster.cli.args import PORT
from sharp_dagster.cli.main import CliError

# Engines (sqlglot, the catalog, the explorer's server) are imported inside the command that uses them, so that
# building the CLI's parser stays cheap: `sharp-dagster --help` and `lineage parse` must start in well under 1 s.


def _load_catalog() -> Any:
    from sharp_dagster.warehouse.catalog import load_catalog

    return load_catalog()


def _project_graph() -> Any:
    from sharp_dagster.warehouse.catalog_lineage import build_project_graph

    try:
        return build_project_graph(_load_catalog())
    except ValueError as exc:
        raise CliError(f"cannot build the lineage graph: {exc}") from exc


def _cmd_parse(args: argparse.Namespace) -> int:
    from sharp_dagster.lineage.parser import LineageParseError, parse_script

    sql = sys.stdin.read()
    schema = None
    if args.schema:
        try:
            with open(args.schema, encoding="utf-8") as fh:
                schema = json.load(fh)
        except (OSError, ValueError) as exc:
            raise CliError(f"cannot read schema file {args.schema}: {exc}") from exc
    try:
        result = parse_script(sql, dialect=args.dialect, schema=schema, default_target=args.default_target)
    except LineageParseError as exc:
        print(f"sharp-dagster lineage parse: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # unsupported dialect
        raise CliError(str(exc)) from exc
    except RecursionError:  # sqlglot's parser recurses once per nesting level
        raise CliError(
            "the script nests too deeply to parse (Python's recursion limit, a few thousand parentheses or "
            "subqueries deep): split the statement"
        ) from None
    print(json.dumps(result.to_dict(), ensure_ascii=False))
    return 0


def _cmd_graph(args: argparse.Namespace) -> int:
    if args.depth is not None and args.depth < 0:
        raise CliError(f"--depth must be 0 or more, not {args.depth}")
    graph = _project_graph()
    if args.table not in graph:
        raise CliError(
            f"unknown table {args.table!r}: not in the lineage graph (try layer/table or layer.table)"
        )
    result = graph.traverse(args.table, direction=args.direction, depth=args.depth, columns=args.columns)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return 0


def _cmd_impact(args: argparse.Namespace) -> int:
    from sharp_dagster.lineage.impact import impact, impact_json
    from sharp_dagster.warehouse.catalog_lineage import sql_texts

    graph = _project_graph()
    texts = sql_texts(_load_catalog())
    found = []
    for ref in args.column:
        table, column = _impact_ref(graph, ref)
        hits = impact(graph, texts, table, column)
        known = _columns_of(graph, table)
        if not hits and column not in known:
            # An empty answer would read as "nothing breaks": a typo must not look like a safe change.
            listed = ", ".join(sorted(known)) or "none known"
            raise CliError(
                f"unknown column {column!r} of {graph.dataset(table).qualified} (its columns: {listed})"
            )
        found.append((f"{graph.dataset(table).qualified}.{column}", hits))
    if args.json:
        print(json.dumps([i for _, hits in found for i in impact_json(hits)], ensure_ascii=False, indent=2))
        return 0
    print(_impact_table(found))
    return 0


def _impact_ref(graph: Any, ref: str) -> tuple[str, str]:
    try:
        return graph.column_ref(ref)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    except KeyError as exc:
        raise CliError(f"{exc.args[0]} (try layer.table.column or layer/table.column)") from exc


def _impact_table(found: list[tuple[str, list[Any]]]) -> str:
    """One line per impacted column: the changed column, the impacted one (`table.*`: its rows), how (value or
    rows), the column it reads and where; a changed column nothing reads says so."""
    rows = [("CHANGED", "IMPACTED", "HOW", "READS", "WHERE")]
    for changed, hits in found:
        if not hits:
            rows.append((changed, "(nothing downstream reads it)", "", "", ""))
        for i in hits:
            where = ", ".join(str(r) for r in i.reads) or "(not built by SQL)"
            rows.append((changed, f"{i.table}.{i.column}", i.kind, f"{i.via[0]}.{i.via[1]}", where))
    widths = [max(len(r[k]) for r in rows) for k in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(widths[k]) for k, cell in enumerate(r[:4])) + "  " + r[4] for r in rows
    ).rstrip()


def _columns_of(graph: Any, table: str) -> set[str]:
    """The columns the lineage graph knows of `table`: those of its column edges either way, and of its schema
    when the catalog has one (a table nothing reads from yet)."""
    dataset = graph.dataset(table)
    qualified = dataset.qualified
    found = {
        end["column"]
        for edge in graph.traverse(table, direction="both", depth=1, columns=True).get("column_edges", [])
        for end in (edge["source"], edge["target"])
        if end["id"] == dataset.urn and end["column"] != "*"
    }
    try:
        found |= set((_load_catalog().external_schemas or {}).get(qualified, {}))
    except Exception:  # noqa: BLE001 - the catalog's schemas only widen the known columns
        pass
    return found


def _cmd_check(args: argparse.Namespace) -> int:
    from sharp_dagster.lineage.governance import check

    graph = _project_graph()
    violations = check(graph)
    for v in violations:
        print(f"{v.rule}: {v.message}")
    if violations:
        print(f"{len(violations)} governance violation(s)", file=sys.stderr)
        return 1
    print(f"ok: {len(graph)} datasets, no governance violation")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    # Imported here: the server is only needed by this command.
    from sharp_dagster.lineage.explorer.server import serve
    from sharp_dagster.warehouse.catalog_lineage import sql_texts

    graph = _project_graph()
    try:
        serve(
            graph,
            host=args.host,
            port=args.port,
            allowed_hosts=args.allow_host or (),
            sql=sql_texts(_load_catalog()),
        )
    except OSError as exc:
        raise CliError(str(exc)) from exc
    return 0


def register(subparsers: Any) -> None:
    lineage = subparsers.add_parser("lineage", help="SQL lineage: parse scripts, walk the graph, check rules")
    sub = lineage.add_subparsers(dest="lineage_command", required=True, metavar="SUBCOMMAND")

    p = sub.add_parser("parse", help="lineage of a SQL script read on stdin, as one JSON object")
    p.add_argument("--dialect", default="spark", help="spark (default), hive, ansi or mysql")
    p.add_argument("--default-target", help="read a final bare SELECT as INSERT OVERWRITE into this table")
    p.add_argument("--schema", help="JSON file {table: {column: type}} to expand SELECT *")
    p.set_defaults(func=_cmd_parse)

    p = sub.add_parser("graph", help="upstream / downstream lineage of a table, as JSON")
    p.add_argument("table", help="ads/gmv_daily or ads.gmv_daily")
    p.add_argument("--direction", choices=["up", "down", "both"], default="up")
    p.add_argument("--depth", type=int, default=None, help="hops to follow (default: all)")
    p.add_argument("--columns", action="store_true", help="add column-level edges")
    p.set_defaults(func=_cmd_graph)

    p = sub.add_parser(
        "impact",
        help="what a change to TABLE.COLUMN breaks downstream, with the SQL file and line reading it",
    )
    p.add_argument(
        "column", metavar="TABLE.COLUMN", nargs="+", help="e.g. ods.orders.order_status (several allowed)"
    )
    p.add_argument("--json", action="store_true", help="one JSON list instead of the table")
    p.set_defaults(func=_cmd_impact)

    p = sub.add_parser("check", help="governance rules (layering, naming); exit 1 on a violation")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("serve", help="the lineage explorer: a web page per table, with a JSON API")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    p.add_argument("--port", type=PORT, default=3070, help="port (default 3070; 0 picks a free one)")
    p.add_argument(
        "--allow-host",
        action="append",
        metavar="NAME",
        help="also answer requests whose Host header names NAME (repeatable; default: loopback names only)",
    )
    p.set_defaults(func=_cmd_serve)
