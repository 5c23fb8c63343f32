-- Per-user order statistics of the day: orders, items and amount of every user who placed an order that day
-- (cancelled orders excluded), with the user's city and level and the user's rank by amount within the city.
-- @partition: daily
SELECT
    d.user_id,
    u.city,
    u.level,
    COUNT(DISTINCT d.order_id) AS order_count,
    SUM(d.quantity) AS item_count,
    CAST(SUM(d.line_amount) AS DECIMAL(16, 2)) AS order_amount,
    DENSE_RANK() OVER (PARTITION BY u.city ORDER BY SUM(d.line_amount) DESC) AS city_rank
FROM dwd.order_detail AS d
LEFT JOIN dwd.user_dim AS u
    ON u.user_id = d.user_id AND u.dt = '${dt}'
WHERE d.dt = '${dt}' AND NOT d.is_cancelled
GROUP BY d.user_id, u.city, u.level
