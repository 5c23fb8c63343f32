"""The Dagster layer's assets: SQL tables, the CDC path, data-quality checks, lineage metadata."""

import warnings

from dagster import BetaWarning

# Single-run backfills are this project's design (a range runs oldest first under the job log's order); Dagster
# marks the parameter beta and would warn once per asset, i.e. a thousand lines for a thousand tables.
warnings.filterwarnings("ignore", message=r"Parameter `backfill_policy`", category=BetaWarning)
