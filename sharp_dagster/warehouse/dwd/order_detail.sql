-- Order-detail fact: one row per item of the orders placed on the partition's day, with the order's status at
-- the end of that day, the product's name and category, and the line amount (quantity x unit price).
-- @partition: daily
-- @deps: ods.orders, ods.order_item, ods.product
SELECT
    i.item_id,
    o.order_id,
    o.user_id,
    o.order_status,
    o.order_time,
    i.product_id,
    p.product_name,
    COALESCE(p.category, 'unknown') AS category,
    i.quantity,
    i.unit_price,
    CAST(i.quantity * i.unit_price AS DECIMAL(14, 2)) AS line_amount,
    o.order_status = 'cancelled' AS is_cancelled
FROM ods.orders VERSION AS OF '${dt}' AS o
JOIN ods.order_item VERSION AS OF '${dt}' AS i
    ON i.order_id = o.order_id
LEFT JOIN ods.product VERSION AS OF '${dt}' AS p
    ON p.product_id = i.product_id
WHERE o.order_time >= TIMESTAMP '${DATA_RANGE_START}'
  AND o.order_time < TIMESTAMP '${DATA_RANGE_END}'
