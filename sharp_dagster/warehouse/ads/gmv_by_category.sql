-- Daily GMV by product category: orders, items and gross merchandise value of the orders placed that day
-- (cancelled orders excluded), with each category's rank by GMV and its share of the day's GMV.
-- @partition: daily
SELECT
    category,
    COUNT(DISTINCT order_id) AS order_count,
    SUM(quantity) AS item_count,
    CAST(SUM(line_amount) AS DECIMAL(16, 2)) AS gmv,
    RANK() OVER (ORDER BY SUM(line_amount) DESC) AS gmv_rank,
    CAST(SUM(line_amount) / SUM(SUM(line_amount)) OVER () AS DECIMAL(8, 6)) AS gmv_share
FROM dwd.order_detail
WHERE dt = '${dt}' AND NOT is_cancelled
GROUP BY category
