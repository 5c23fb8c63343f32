-- Order items of the shop as they stand at the end of the partition's day (one row per item).
-- It is the initial snapshot with every row change up to that day applied, in commit order: the latest change of
-- a key wins and a deleted key is gone.
-- @partition: daily
WITH versions AS (
    SELECT item_id, order_id, product_id, quantity, unit_price,
           CAST(0 AS BIGINT) AS change_seq, 'r' AS change_op
    FROM src_shop.order_item_snapshot
    UNION ALL
    SELECT item_id, order_id, product_id, quantity, unit_price,
           _seq AS change_seq, _op AS change_op
    FROM src_shop.order_item_changes
    WHERE dt <= '${dt}'
),
ranked AS (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY item_id ORDER BY change_seq DESC) AS version_rank
    FROM versions
)
SELECT item_id, order_id, product_id, quantity, unit_price
FROM ranked
WHERE version_rank = 1 AND change_op <> 'd'
