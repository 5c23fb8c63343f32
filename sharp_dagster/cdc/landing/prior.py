"""What the last successful landing of a topic reached, as the next landing starts from it: the `land` step's
output in the job log (`LandingResult.to_dict()`: per-partition watermarks, the low watermark, the first commit
time ever seen). Apart from `land.py`, which loads the Kafka client.
"""

from __future__ import annotations

import json

from sharp_dagster.joblog.models import KAFKA_OFFSET


def prior_landing(jl, job_name: str) -> dict:
    """The `land` step output of `job_name`'s last successful landing (`jl`: the job log); {} before the first
    landing or when that output is not a JSON object."""
    last = jl.last_success(job_name, order_by_range=False, incremental_type=KAFKA_OFFSET)
    if last is None:
        return {}
    for step in jl.steps(last.job_id):
        if step.step_id == "land" and step.output:
            try:
                data = json.loads(step.output.splitlines()[0])
            except (ValueError, IndexError):
                return {}
            return data if isinstance(data, dict) else {}
    return {}
