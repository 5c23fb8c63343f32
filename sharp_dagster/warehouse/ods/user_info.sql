-- The shop's users at the end of the partition's day, folded from the physical shards user_info_0..3 (source_table names the shard).
-- It is the initial snapshot with every row change up to that day applied, in commit order: the latest change of
-- a key wins and a deleted key is gone.
-- @partition: daily
WITH versions AS (
    SELECT user_id, user_name, city, level, register_time, updated_at, _source_table AS source_table,
           CAST(0 AS BIGINT) AS change_seq, 'r' AS change_op
    FROM src_shop.user_info_snapshot
    UNION ALL
    SELECT user_id, user_name, city, level, register_time, updated_at, _source_table AS source_table,
           _seq AS change_seq, _op AS change_op
    FROM src_shop.user_info_changes
    WHERE dt <= '${dt}'
),
ranked AS (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY change_seq DESC) AS version_rank
    FROM versions
)
SELECT user_id, user_name, city, level, register_time, updated_at, source_table
FROM ranked
WHERE version_rank = 1 AND change_op <> 'd'
