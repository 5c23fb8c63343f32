"""The warehouse written in SQL: one `.sql` file per table under `ods/`, `dwd/`, `ads/` (see `catalog`)."""
