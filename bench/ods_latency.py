"""`bench_ods_layout.py --parts latency` (issue 44): the latency users feel, from the moment the day's last hour is
landed and marked done to the day's ODS tag, for the same day's changes spread over 24 hours, two ways side by side
in one run:

- `whole_day`: today's path, the day's changes read (checkpointed, counted, as `change_source.day_changes`) and
  staged by `ods_stage.stage` (the ODS asset's path: a merge of the whole day on `stage_<day>_<attempt>`), then
  published (fence, `main` moved, the day tagged);
- `premerged`: hours 00..22 merged as they landed (`premerge.premerge_hours`, one call per hour after its done
  marker: untimed for the latency, their total work reported apart), then at the day's end the same read, stage
  and publish, which now merge only hour 23 onto the pre-merge branch.

Both published days are compared row for row (live rows and tombstones of both tags, `exceptAll` both ways).
"""

from __future__ import annotations

import bench_merge as bm

HOURS = [f"{h:02d}" for h in range(24)]


def premerge_calls(clock, store, table: str, day: str, landed, every: int = 1) -> list[dict]:
    """Hours 00..22 of `day` pre-merged as they are marked done, `every` hours a call (1: one call per hour, as the
    landing runs; more: a smoke run with fewer calls), each call's wall and CPU; `landed(done)`: the changes of the
    hours `done`. Raises when a call did not pre-merge every hour done (a fallback)."""
    from sharp_dagster.cdc.ods.premerge import premerge_hours

    runs = []
    for end in range(every, 23 + every, every):
        done = HOURS[: min(end, 23)]
        result = {}

        def step(done=done, result=result) -> None:
            result["r"] = premerge_hours(store, table, day, landed(done), done, ["id"])

        runs.append(clock.time(step))
        if result["r"].fallback or result["r"].absorbed != tuple(done):
            raise RuntimeError(f"{day}: hours up to {done[-1]} were not pre-merged: {result['r']}")
    return runs


def publish_day(store, table: str, day: str, changes, branch: str):
    """What runs after the day's last done marker, as the ODS asset runs it: the day's `changes` staged by
    `ods_stage.stage` on `branch` and published. Returns the staged day."""
    from sharp_dagster.cdc.ods import stage as ods_stage

    staged = ods_stage.stage(store, table, branch, ([day], []), lambda _: (changes, None), ["id"])
    staged.publish(store)
    return staged


class Latency:
    """The two paths on one ODS table of their own (`ods.latency_<rows>`), each run rolled back to the previous
    day (untimed) before the next."""

    def __init__(self, ds, clock):
        from sharp_dagster.cdc.ods import merge as ods_merge
        from sharp_dagster.cdc.ods import store as ods_store

        self.ds, self.clock, self.ods_store = ds, clock, ods_store
        self.table = f"latency_{ds.rows}"
        for ref in ods_store.both(self.table):
            ds.store.drop_table(ref)
        ods_merge.write_state(ds.store, self.table, bm.PREVIOUS, ds.base_state(), ["id"])
        self.runs = 0
        self.heads: dict[str, tuple] = {}

    def reset(self) -> None:
        if bm.DAY in self.ods_store.published_days(self.ds.store, self.table):
            self.ods_store.rollback_to_day(self.ds.store, self.table, bm.PREVIOUS)

    def day_end(self, name: str) -> None:
        """What runs after the last done marker: the day's changes read, staged, published."""
        from sharp_dagster.spark.checkpoint import checkpoint

        self.runs += 1
        changes = checkpoint(self.ds.images())
        changes.count()
        staged = publish_day(self.ds.store, self.table, bm.DAY, changes, f"stage_{bm.DAY}_{self.runs}")
        self.heads[name] = staged.days[0].heads

    def hours(self, every: int = 1) -> dict:
        """Hours 00..22 pre-merged as they are marked done, `every` hours a call (1: one call per hour, as the
        landing runs; more: a smoke run with fewer calls): each call's wall and CPU."""
        from pyspark.sql import functions as F

        images = self.ds.images()
        runs = premerge_calls(
            self.clock,
            self.ds.store,
            self.table,
            bm.DAY,
            lambda done: images.where(F.col("hour").isin(*done)),
            every,
        )
        return {
            "hours": 23,
            "calls": len(runs),
            "total_s": round(sum(r["s"] for r in runs), 2),
            "total_cpu_s": round(sum(r["cpu_s"] for r in runs), 2),
            "max_s": round(max(r["s"] for r in runs), 2),
            "runs_s": [round(r["s"], 2) for r in runs],
        }

    def same_rows(self) -> dict:
        """The two paths' published days, row for row (live rows whole, tombstones as key + position)."""
        from sharp_dagster.cdc.ods.versions import ods_ref, tombstones_ref

        out = {}
        store = self.ds.store
        for index, ref in enumerate((ods_ref(self.table), tombstones_ref(self.table))):
            a, b = (
                store.spark.sql(f"SELECT * FROM {store.name(ref)} VERSION AS OF {self.heads[n][index]}")
                for n in ("whole_day", "premerged")
            )
            kind = "live" if index == 0 else "tombstones"
            out[f"{kind}_rows"] = a.count()
            out[f"{kind}_differing"] = a.exceptAll(b).count() + b.exceptAll(a).count()
        out["equal"] = not out["live_differing"] and not out["tombstones_differing"]
        return out


def latency(ds, clock, repeat: int, check: bool = True, every: int = 1) -> dict:
    """Both paths `repeat` times, alternated (best and median kept), the hourly work of the last pre-merged run
    (`every` hours a call), and the two published days compared."""
    lat = Latency(ds, clock)
    whole, pre, hourly = [], [], {}
    for _ in range(repeat):
        lat.reset()
        whole.append(clock.time(lambda: lat.day_end("whole_day")))
        lat.reset()
        hourly = lat.hours(every)
        pre.append(clock.time(lambda: lat.day_end("premerged")))
    out = {
        "state_rows": ds.rows,
        "change_rows": ds.change_rows,
        "whole_day": bm.summary(whole),
        "premerged": bm.summary(pre),
        "hourly_premerges": hourly,
    }
    out["ratio_premerged_to_whole_day"] = round(out["premerged"]["best_s"] / out["whole_day"]["best_s"], 3)
    if check:
        out["same_rows"] = lat.same_rows()
    return out
