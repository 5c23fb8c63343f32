"""Run periods of an asset through Dagster, strictly in order, stopping at the first failure.

Used by `sharp-dagster log rerun` (an explicit refresh of a range): each period is one Dagster run in the
project's instance (`DAGSTER_HOME`), tagged `sharp/refresh`, so the UI and the job log both record it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from sharp_dagster.dagster_home import ensure_dagster_home
from sharp_dagster.logdriven import REFRESH_TAG
from sharp_dagster.naming import parts
from sharp_dagster.periods import Period
from sharp_dagster.settings import Settings

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def rerun_periods(asset_key: str, periods: Sequence[Period], out=None) -> int:
    # sys.stdout is looked up per call, not bound at import: callers that redirect it (tests, wrappers) get the text.
    out = out if out is not None else sys.stdout
    from dagster import AssetKey, DagsterInstance, materialize

    from sharp_dagster.definitions import defs

    ensure_dagster_home(Settings.from_env())
    key = AssetKey(parts(asset_key))
    assets = list(defs.assets or [])
    with DagsterInstance.get() as instance:
        for i, period in enumerate(periods, start=1):
            t0 = time.monotonic()
            print(f"[{i}/{len(periods)}] {asset_key} {period.partition_key} ...", file=out, flush=True)
            result = materialize(
                assets,
                selection=[key],
                partition_key=period.partition_key,
                instance=instance,
                resources=defs.resources,
                tags={REFRESH_TAG: "true"},
                run_config=QUIET,
                raise_on_error=False,
            )
            if not result.success:
                failure = next((e for e in result.all_events if e.is_step_failure), None)
                reason = failure.step_failure_data.error.message.strip() if failure else "run failed"
                print(f"      FAILED (run {result.run_id[:8]}): {reason}", file=out)
                print(f"      {len(periods) - i} later period(s) not run", file=out)
                return 1
            print(f"      ok in {time.monotonic() - t0:.1f}s (run {result.run_id[:8]})", file=out, flush=True)
    return 0
