"""Table moves hidden in statements that sqlglot keeps as opaque `Command`s.

This module owns reading, from sqlglot's own tokens, the tables of the few statements sqlglot 30 does not parse
into an AST but that move data between tables (so they carry lineage):

- `ALTER TABLE dest EXCHANGE PARTITION (...) WITH TABLE src` (Hive; MySQL's `... EXCHANGE PARTITION p WITH TABLE
  nt`),
- `RENAME TABLE a TO b [, c TO d ...]` (MySQL),
- `CREATE [OR REPLACE] TABLE [IF NOT EXISTS] t [SHALLOW | DEEP] CLONE s <time travel>` (Delta; sqlglot parses
  the plain form into `Create(clone=...)` but falls back to a Command when `VERSION AS OF` / `TIMESTAMP AS OF`
  follow).

The Command's text is tokenized by the script's own dialect (so quoting, comments and case follow its rules) and
the table names are built as `exp.Table` nodes, named exactly as the parsed statements' tables are. Anything else
(ADD JAR, MSCK, SET, partition renames, ...) yields no move.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import Token, TokenType

__all__ = ["Move", "command_moves"]

# Tokens that end a (possibly dotted) table name.
_NOT_NAME = {
    TokenType.DOT,
    TokenType.COMMA,
    TokenType.L_PAREN,
    TokenType.R_PAREN,
    TokenType.SEMICOLON,
    TokenType.STRING,
    TokenType.NUMBER,
    TokenType.EQ,
}


@dataclass(frozen=True)
class Move:
    """Data of `source` lands in `target`. kind: 'exchange' (a partition moves), 'rename', 'clone'."""

    kind: str
    target: exp.Table
    source: exp.Table


def _text(cmd: exp.Command) -> str:
    e = cmd.args.get("expression")
    if e is None:
        return ""
    return e if isinstance(e, str) else str(e.this if isinstance(e, exp.Literal) else e.sql())


def _word(tok: Token) -> str:
    return tok.text.upper() if tok.token_type is not TokenType.IDENTIFIER else ""


def _name(tokens: list[Token], i: int) -> tuple[exp.Table | None, int]:
    """A dotted name starting at tokens[i] -> (Table, index after it)."""
    parts: list[exp.Identifier] = []
    while i < len(tokens) and tokens[i].token_type not in _NOT_NAME:
        tok = tokens[i]
        parts.append(exp.Identifier(this=tok.text, quoted=tok.token_type is TokenType.IDENTIFIER))
        i += 1
        if i < len(tokens) and tokens[i].token_type is TokenType.DOT:
            i += 1
            continue
        break
    if not parts:
        return None, i
    table = exp.Table(this=parts[-1])
    if len(parts) >= 2:
        table.set("db", parts[-2])
    if len(parts) >= 3:
        table.set("catalog", parts[-3])
    return table, i


def _after_table_keyword(tokens: list[Token], start: int = 0) -> int:
    """Index just past the first TABLE keyword (and IF [NOT] EXISTS) at or after `start`, or -1."""
    for i in range(start, len(tokens)):
        if tokens[i].token_type is TokenType.TABLE:
            i += 1
            if i < len(tokens) and _word(tokens[i]) == "IF":
                i += 1
                while i < len(tokens) and _word(tokens[i]) in ("NOT", "EXISTS"):
                    i += 1
            return i
    return -1


def command_moves(cmd: exp.Command, dialect: Dialect) -> list[Move]:
    """The table-to-table data moves of a Command, in statement order (empty when it moves none)."""
    head = str(cmd.this or "").upper()
    if head not in ("ALTER", "RENAME", "CREATE"):
        return []
    tokens = dialect.tokenize(_text(cmd))
    words = [_word(t) for t in tokens]
    if head == "ALTER" and "EXCHANGE" in words:
        dest, _ = _name(tokens, _after_table_keyword(tokens))
        with_at = [i for i, w in enumerate(words) if w == "WITH" and i > words.index("EXCHANGE")]
        src = None
        if with_at:
            src, _ = _name(tokens, _after_table_keyword(tokens, with_at[0]))
        return [Move("exchange", dest, src)] if dest is not None and src is not None else []
    if head == "RENAME" and words[:1] == ["TABLE"]:
        moves = []
        i = 1
        while i < len(tokens):
            old, i = _name(tokens, i)
            if old is None or i >= len(tokens) or words[i] != "TO":
                break
            new, i = _name(tokens, i + 1)
            if new is None:
                break
            moves.append(Move("rename", new, old))
            if i < len(tokens) and tokens[i].token_type is TokenType.COMMA:
                i += 1
                continue
            break
        return moves
    if head == "CREATE" and "CLONE" in words:
        at = _after_table_keyword(tokens)
        target, _ = _name(tokens, at) if at >= 0 else (None, 0)
        src, _ = _name(tokens, words.index("CLONE") + 1)
        return [Move("clone", target, src)] if target is not None and src is not None else []
    return []
