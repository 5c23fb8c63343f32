-- User dimension: every user of the shop at the end of the partition's day with the shard it lives in, its tenure
-- in days and whether it registered on that day.
-- @partition: daily
SELECT
    u.user_id,
    u.user_name,
    u.city,
    u.level,
    u.register_time,
    u.source_table,
    DATEDIFF(DATE '${dt}', CAST(u.register_time AS DATE)) AS tenure_days,
    u.register_time >= TIMESTAMP '${DATA_RANGE_START}' AS is_new_user
FROM ods.user_info VERSION AS OF '${dt}' AS u
