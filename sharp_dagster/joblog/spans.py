"""Success spans: per asset, the maximal runs of consecutive time-window periods whose latest attempt is done.

A span is a half-open `[span_start, span_end)` pair of job_log range strings in `job_success_span`. They make
planning independent of history size: the planner reads job_log rows only inside the gaps between spans.

Invariant: a span only covers periods whose latest attempt is SUCCESS / SKIPPED. The store keeps it in the same
transactions as the job_log changes: a claim removes its period (`remove_period`), a successful finish adds it
(`add_period`). Spans never claim more than the job log says, so missing spans only make planning slower, never
wrong; `rebuild` recomputes them from the rows.

Every change first bumps the asset's `job_asset` row: that row lock serialises span changes of one asset across
processes (and is a write, so SQLite takes its write lock before anything is read).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import delete, insert, select, union_all, update
from sqlalchemy.engine import Connection

from sharp_dagster.joblog.models import DONE_STATUSES, job_asset, job_success_span

Span = tuple[str, str]


def lock_asset(conn: Connection, job_name: str, now: datetime) -> None:
    bumped = conn.execute(
        update(job_asset)
        .where(job_asset.c.job_name == job_name)
        .values(version=job_asset.c.version + 1, updated_at=now)
    ).rowcount
    if bumped != 1:
        raise LookupError(f"asset {job_name!r} has no job_asset row (the store creates it before claiming)")


def touching(conn: Connection, job_name: str, lo: str, hi: str, *, adjacent: bool) -> list[Span]:
    """Spans overlapping [lo, hi) (or also touching it when `adjacent`), oldest first, in one statement."""
    s = job_success_span.c
    before = (
        select(s.span_start, s.span_end)
        .where(s.job_name == job_name, s.span_start <= lo)
        .order_by(s.span_start.desc())
        .limit(1)
        .subquery()
    )
    inner_bound = s.span_start <= hi if adjacent else s.span_start < hi
    stmt = union_all(
        select(before.c.span_start, before.c.span_end),
        select(s.span_start, s.span_end).where(s.job_name == job_name, s.span_start > lo, inner_bound),
    )
    rows = [(r[0], r[1]) for r in conn.execute(stmt)]
    return sorted((a, b) for a, b in rows if (b >= lo if adjacent else b > lo))


def remove_period(conn: Connection, job_name: str, lo: str, hi: str, now: datetime) -> None:
    """Take [lo, hi) out of the spans (a claim: the period's latest attempt is now RUNNING).

    Locks even when nothing covers the period, so that a concurrent `rebuild` (which reads the rows under the
    same lock) either sees this claim's RUNNING row or runs before it.
    """
    lock_asset(conn, job_name, now)
    s = job_success_span.c
    for a, b in touching(conn, job_name, lo, hi, adjacent=False):
        if a < lo:
            conn.execute(
                update(job_success_span).where(s.job_name == job_name, s.span_start == a).values(span_end=lo)
            )
        else:
            conn.execute(delete(job_success_span).where(s.job_name == job_name, s.span_start == a))
        if hi < b:
            conn.execute(insert(job_success_span).values(job_name=job_name, span_start=hi, span_end=b))


def add_period(conn: Connection, job_name: str, lo: str, hi: str, now: datetime) -> None:
    """Add [lo, hi), merging it with the spans it touches (a successful finish)."""
    lock_asset(conn, job_name, now)
    s = job_success_span.c
    near = touching(conn, job_name, lo, hi, adjacent=True)
    start = min([lo] + [a for a, _ in near])
    end = max([hi] + [b for _, b in near])
    if near:
        conn.execute(
            delete(job_success_span).where(s.job_name == job_name, s.span_start.in_([a for a, _ in near]))
        )
    conn.execute(insert(job_success_span).values(job_name=job_name, span_start=start, span_end=end))


def from_attempts(rows: Iterable[tuple[str, str | None, int, str]]) -> list[Span]:
    """Spans from job_log rows `(range_start, range_end, attempt, status)`: latest attempt per period."""
    latest: dict[str, tuple[int, str, str | None]] = {}
    for start, end, attempt, status in rows:
        seen = latest.get(start)
        if seen is None or attempt > seen[0]:
            latest[start] = (attempt, status, end)
    spans: list[list[str]] = []
    for start in sorted(latest):
        _attempt, status, end = latest[start]
        if status not in DONE_STATUSES or not end:
            continue
        if spans and spans[-1][1] >= start:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    return [(a, b) for a, b in spans]


def replace(conn: Connection, job_name: str, spans: list[Span]) -> None:
    """Replace an asset's spans; the caller holds the asset lock (taken before it read the rows)."""
    conn.execute(delete(job_success_span).where(job_success_span.c.job_name == job_name))
    if spans:
        conn.execute(
            insert(job_success_span),
            [{"job_name": job_name, "span_start": a, "span_end": b} for a, b in spans],
        )


def gaps(conn: Connection, job_name: str, lo: str, hi: str) -> list[Span]:
    """The parts of [lo, hi) no span covers, oldest first."""
    if hi <= lo:
        return []
    out: list[Span] = []
    cursor = lo
    for a, b in touching(conn, job_name, lo, hi, adjacent=False):
        if a > cursor:
            out.append((cursor, min(a, hi)))
        cursor = max(cursor, b)
        if cursor >= hi:
            break
    if cursor < hi:
        out.append((cursor, hi))
    return out


def all_spans(conn: Connection, job_name: str) -> list[Span]:
    s = job_success_span.c
    rows = conn.execute(select(s.span_start, s.span_end).where(s.job_name == job_name).order_by(s.span_start))
    return [(a, b) for a, b in rows]
