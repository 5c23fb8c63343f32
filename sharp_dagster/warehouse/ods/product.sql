-- The shop's product catalogue as it stands at the end of the partition's day (one row per product).
-- It is the initial snapshot with every row change up to that day applied, in commit order: the latest change of
-- a key wins and a deleted key is gone.
-- @partition: daily
WITH versions AS (
    SELECT product_id, product_name, category, price, updated_at,
           CAST(0 AS BIGINT) AS change_seq, 'r' AS change_op
    FROM src_shop.product_snapshot
    UNION ALL
    SELECT product_id, product_name, category, price, updated_at,
           _seq AS change_seq, _op AS change_op
    FROM src_shop.product_changes
    WHERE dt <= '${dt}'
),
ranked AS (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY product_id ORDER BY change_seq DESC) AS version_rank
    FROM versions
)
SELECT product_id, product_name, category, price, updated_at
FROM ranked
WHERE version_rank = 1 AND change_op <> 'd'
