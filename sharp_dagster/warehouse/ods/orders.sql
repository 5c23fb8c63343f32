-- Orders of the shop as they stand at the end of the partition's day (one row per order).
-- It is the initial snapshot with every row change up to that day applied, in commit order: the latest change of
-- a key wins and a deleted key is gone.
-- @partition: daily
WITH versions AS (
    SELECT order_id, user_id, order_status, order_time, total_amount, updated_at,
           CAST(0 AS BIGINT) AS change_seq, 'r' AS change_op
    FROM src_shop.orders_snapshot
    UNION ALL
    SELECT order_id, user_id, order_status, order_time, total_amount, updated_at,
           _seq AS change_seq, _op AS change_op
    FROM src_shop.orders_changes
    WHERE dt <= '${dt}'
),
ranked AS (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY order_id ORDER BY change_seq DESC) AS version_rank
    FROM versions
)
SELECT order_id, user_id, order_status, order_time, total_amount, updated_at
FROM ranked
WHERE version_rank = 1 AND change_op <> 'd'
