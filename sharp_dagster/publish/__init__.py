"""Publishing a partition of a log-driven asset, below the assets that declare it: one period (`run.py`,
`materialize.py`), a range of periods as one batch (`range.py`), the data-quality rules at run time (`rules.py`;
those of the later periods a run re-publishes: `later.py`), and the landing's range lifecycle
(`claimed_range.py`). The assets hand it an `AssetPublish`; it never imports them."""
