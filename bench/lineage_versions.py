"""Two versions of the lineage parser side by side: the same corpus, rounds alternating between two warm processes.

On a shared, loaded machine an absolute figure measured today is not comparable with one measured another day; the
ratio of two versions measured in the same minutes is. `side_by_side(rev)` extracts `sharp_dagster/` at git
revision `rev` into a temporary folder, starts one worker process on that tree and one on this checkout's, warms
both up on the corpus (bench/lineage_corpus.py), then runs `rounds` rounds: each round times every statement once
in each worker, the order of the two workers swapped every round. Returned: each version's wall and CPU tail, and
the ratios current / `rev` (per-call p50 and p99; the median of the per-statement ratios of medians).

    .venv/bin/python bench/bench_lineage.py --against 2ceb616    # adds "side_by_side" to the result

A worker is this file run as `python lineage_versions.py --worker TREE N`: it reads one line per round on stdin and
answers one JSON line (`wall`, `cpu`: milliseconds per statement, in corpus order).
"""

from __future__ import annotations

import io
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _tail(values: list[float]) -> dict[str, float]:
    return {f"p{int(q * 100)}_ms": round(_pct(values, q), 4) for q in (0.5, 0.95, 0.99)} | {
        "max_ms": round(max(values), 4)
    }


def _worker(tree: str, n_statements: int) -> None:
    sys.path[:0] = [tree, str(BENCH)]
    from lineage_corpus import statements  # noqa: PLC0415 - the corpus of this checkout, the parser of `tree`

    from sharp_dagster.lineage.parser import parse_script  # noqa: PLC0415

    corpus = statements(n_statements)
    for _, dialect, sql in corpus:  # warm-up: sqlglot's dialect set-up, the first-call costs
        parse_script(sql, dialect)
    print(json.dumps({"ready": str(Path(sys.modules["sharp_dagster"].__file__).parent)}), flush=True)
    clock, thread_clock = time.perf_counter, time.thread_time
    for _ in sys.stdin:
        wall, cpu = [], []
        for _, dialect, sql in corpus:
            c0, w0 = thread_clock(), clock()
            parse_script(sql, dialect)
            w1, c1 = clock(), thread_clock()
            wall.append((w1 - w0) * 1000)
            cpu.append((c1 - c0) * 1000)
        print(json.dumps({"wall": wall, "cpu": cpu}), flush=True)


def _extract(rev: str, into: Path) -> str:
    """`sharp_dagster/` at `rev` into `into`; returns the full commit id."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=REPO, capture_output=True, text=True
    )
    if commit.returncode != 0:
        raise SystemExit(f"--against {rev}: not a commit of this repository ({commit.stderr.strip()})")
    tar = subprocess.run(
        ["git", "archive", "--format=tar", commit.stdout.strip(), "sharp_dagster"],
        cwd=REPO,
        capture_output=True,
    )
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as archive:
        archive.extractall(into, filter="data")
    return commit.stdout.strip()


def _start(tree: Path, n_statements: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--worker", str(tree), str(n_statements)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(tree),
    )
    ready = json.loads(proc.stdout.readline())
    if Path(ready["ready"]) != tree / "sharp_dagster":  # the worker must parse with the tree it was given
        proc.kill()
        raise SystemExit(f"worker for {tree} imported sharp_dagster from {ready['ready']}")
    return proc


def _round(proc: subprocess.Popen) -> dict[str, list[float]]:
    proc.stdin.write("round\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def side_by_side(rev: str, n_statements: int, rounds: int) -> dict[str, Any]:
    """Current checkout against `rev`, alternating rounds (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="lineage_versions_") as tmp:
        base_commit = _extract(rev, Path(tmp))
        workers = {"base": _start(Path(tmp), n_statements), "current": _start(REPO, n_statements)}
        runs: dict[str, list[dict[str, list[float]]]] = {"base": [], "current": []}
        try:
            for r in range(rounds):
                for name in ("base", "current") if r % 2 == 0 else ("current", "base"):
                    runs[name].append(_round(workers[name]))
        finally:
            for proc in workers.values():
                proc.stdin.close()
                proc.wait(timeout=60)
    out: dict[str, Any] = {"base_rev": rev, "base_commit": base_commit, "statements": n_statements}
    out["rounds"] = rounds
    medians: dict[str, list[float]] = {}
    for name, rs in runs.items():
        wall = [t for r in rs for t in r["wall"]]
        cpu = [t for r in rs for t in r["cpu"]]
        out[name] = {"wall": _tail(wall), "cpu": _tail(cpu)}
        medians[name] = [statistics.median(r["cpu"][i] for r in rs) for i in range(n_statements)]
    ratios = [c / b for c, b in zip(medians["current"], medians["base"], strict=True) if b > 0]
    out["current_over_base"] = {
        "cpu_p50": round(out["current"]["cpu"]["p50_ms"] / out["base"]["cpu"]["p50_ms"], 3),
        "cpu_p99": round(out["current"]["cpu"]["p99_ms"] / out["base"]["cpu"]["p99_ms"], 3),
        "wall_p50": round(out["current"]["wall"]["p50_ms"] / out["base"]["wall"]["p50_ms"], 3),
        "wall_p99": round(out["current"]["wall"]["p99_ms"] / out["base"]["wall"]["p99_ms"], 3),
        "per_statement_cpu_median_ratio": round(statistics.median(ratios), 3),
    }
    return out


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    _worker(sys.argv[2], int(sys.argv[3]))
