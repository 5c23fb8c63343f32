"""The data-quality report of one asset: each rule's recent results as text, and as a PNG chart.

Input is `DqcStore.recent()` (latest evaluation per rule and partition). The chart has one panel per rule
(rules measure different things: a row count and a null rate do not share a y axis), each a line of the actual
values per partition with failed points marked by a red cross and warnings by an orange triangle.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt

from sharp_dagster.dqc.evaluate import fmt
from sharp_dagster.dqc.store import StoredResult


def _by_rule(results: Sequence[StoredResult]) -> dict[str, list[StoredResult]]:
    out: dict[str, list[StoredResult]] = {}
    for r in sorted(results, key=lambda r: (r.rule_id, r.partition)):
        out.setdefault(r.rule_id, []).append(r)
    return out


def expectation_text(r: StoredResult) -> str:
    if r.lower_bound is not None or r.upper_bound is not None:
        return f"[{fmt(r.lower_bound)}, {fmt(r.upper_bound)}]"
    if r.expected is None:
        return "-"
    return f"{r.comparator} {fmt(r.expected)}"


def format_report(asset: str, results: Sequence[StoredResult]) -> str:
    """Plain-text history: per rule, one line per partition with actual, expected and the outcome."""
    groups = _by_rule(results)
    partitions = sorted({r.partition for r in results})
    if not groups:
        return f"dqc report {asset}: no results yet\n"
    lines = [
        f"dqc report {asset}: {len(groups)} rule(s), {len(partitions)} partition(s) "
        f"({partitions[0]} .. {partitions[-1]})",
        "",
    ]
    for rule_id, rows in groups.items():
        last = rows[-1]
        passed = sum(1 for r in rows if r.status == "pass")
        lines.append(
            f"{rule_id}  [{last.severity}, {last.dimension}, {last.template}]  {passed}/{len(rows)} passed"
            f"  version {last.rule_version}"
        )
        lines.append(f"  {'partition':<20} {'actual':>14}  {'expected':<24} result")
        for r in rows:
            lines.append(
                f"  {r.partition or '-':<20} {fmt(r.actual):>14}  {expectation_text(r):<24} {r.status.upper()}"
            )
        failing = [r for r in rows if r.status == "fail" and r.failing_keys]
        if failing:
            lines.append(f"  failing keys ({failing[-1].partition}): {failing[-1].failing_keys}")
        lines.append("")
    return "\n".join(lines)


def write_chart(asset: str, results: Sequence[StoredResult], path: str | Path) -> Path:
    """Write a PNG: one panel per rule, its actual values per partition, failures marked."""

    matplotlib.use("Agg")  # no display on servers and in tests

    groups = _by_rule(results)
    partitions = sorted({r.partition for r in results})
    pos = {p: i for i, p in enumerate(partitions)}
    n = max(1, len(groups))
    fig, axes = plt.subplots(
        n, 1, figsize=(max(6.0, 0.6 * len(partitions) + 3), 2.2 * n + 0.6), sharex=True, squeeze=False
    )
    for ax, (rule_id, rows) in zip(axes[:, 0], groups.items(), strict=False):
        pts = [(pos[r.partition], r.actual, r.status) for r in rows if r.actual is not None]
        band = [
            (pos[r.partition], r.lower_bound, r.upper_bound)
            for r in rows
            if r.lower_bound is not None and r.upper_bound is not None
        ]
        if band:  # the bounds a between/fluctuation rule used, so a reader sees why a point failed
            ax.fill_between(
                [x for x, _, _ in band],
                [lo for _, lo, _ in band],
                [hi for _, _, hi in band],
                alpha=0.15,
                step="mid",
                label="expected range",
            )
        if pts:
            ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], marker="o", linewidth=1.5, label=rule_id)
        bad = [(x, y) for x, y, s in pts if s == "fail"]
        warn = [(x, y) for x, y, s in pts if s == "warn"]
        if bad:
            ax.scatter(*zip(*bad, strict=True), marker="x", s=90, color="red", zorder=3, label="failed")
        if warn:
            ax.scatter(*zip(*warn, strict=True), marker="^", s=70, color="orange", zorder=3, label="warning")
        ax.set_title(f"{rule_id} ({rows[-1].template})", fontsize=9, loc="left")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    if not groups:
        axes[0, 0].text(0.5, 0.5, "no results", ha="center", va="center")
    axes[-1, 0].set_xticks(range(len(partitions)))
    axes[-1, 0].set_xticklabels(partitions, rotation=45, ha="right", fontsize=7)
    fig.suptitle(f"data quality: {asset}", fontsize=11)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=100)
    plt.close(fig)
    return out
