-- Views and a function for the questions analysts ask, so psql, Metabase or
-- a notebook need no CLI. Every one reads ledger_entries; filter them by
-- topic (the command topic) when a database holds more than one ledger.
-- README's "Analysts" section shows them in use.

-- One SKU's decisions: filter by sku (and occurred_at), order by log_offset.
-- held = what deducted orders hold (total - available).
CREATE VIEW ledger_sku_timeline AS
SELECT topic, sku, partition, log_offset, occurred_at, command,
       coalesce(order_id, adjustment_id) AS order_or_adjustment,
       quantity, restock_mode, result, delta, available_after, total_after,
       total_after - available_after AS held, reason, rollback_reason
FROM ledger_entries
WHERE result NOT IN ('INVALID', 'MISROUTED');

-- Every record that named an order, whatever its result: filter by order_id.
CREATE VIEW ledger_order_timeline AS
SELECT topic, order_id, sku, partition, log_offset, occurred_at, command, quantity, result,
       delta, available_after, reason, rollback_reason
FROM ledger_entries
WHERE order_id IS NOT NULL;

-- The moments a SKU sold out: an applied record that took available stock
-- to zero.
CREATE VIEW ledger_sell_outs AS
SELECT topic, sku, occurred_at, partition, log_offset, command,
       coalesce(order_id, adjustment_id) AS order_or_adjustment, total_after
FROM ledger_entries
WHERE result = 'APPLIED' AND delta < 0 AND available_after = 0;

-- Per SKU (or one SKU) and per interval of `every` (aligned on the Unix
-- epoch, UTC; e.g. '1 minute', '1 hour', '1 day'), for records with
-- since <= occurred_at < until: what was taken, given back, refused and
-- restocked, the lowest available stock seen and when the SKU sold out.
CREATE FUNCTION ledger_report(
    p_topic text, every interval, since timestamptz, until timestamptz, p_sku text DEFAULT NULL)
RETURNS TABLE (
    sku                   text,
    bucket                timestamptz,
    records               bigint,
    deducts_applied       bigint,
    units_taken           bigint,
    rollbacks_applied     bigint,
    units_returned        bigint,
    net_taken             bigint,
    restocks_applied      bigint,
    restock_delta         bigint,
    rejected_insufficient bigint,
    rejected_cancelled    bigint,
    rejected_restock      bigint,
    ignored_no_deduction  bigint,
    duplicates            bigint,
    invalid               bigint,
    lowest_available      bigint,
    sold_out_at           timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT e.sku,
           date_bin(every, e.occurred_at, timestamptz '1970-01-01 00:00:00+00') AS bucket,
           count(*),
           count(*) FILTER (WHERE e.result = 'APPLIED' AND e.command = 'DEDUCT'),
           coalesce(sum(-e.delta) FILTER (WHERE e.result = 'APPLIED' AND e.command = 'DEDUCT'), 0),
           count(*) FILTER (WHERE e.result = 'APPLIED' AND e.command = 'ROLLBACK'),
           coalesce(sum(e.delta) FILTER (WHERE e.result = 'APPLIED' AND e.command = 'ROLLBACK'), 0),
           coalesce(sum(-e.delta) FILTER (WHERE e.command IN ('DEDUCT', 'ROLLBACK')), 0),
           count(*) FILTER (WHERE e.result = 'APPLIED' AND e.command = 'RESTOCK'),
           coalesce(sum(e.delta) FILTER (WHERE e.command = 'RESTOCK'), 0),
           count(*) FILTER (WHERE e.result = 'REJECTED_INSUFFICIENT'),
           count(*) FILTER (WHERE e.result = 'REJECTED_CANCELLED'),
           count(*) FILTER (WHERE e.result = 'REJECTED_RESTOCK'),
           count(*) FILTER (WHERE e.result = 'IGNORED_NO_DEDUCTION'),
           count(*) FILTER (WHERE e.result = 'DUPLICATE'),
           count(*) FILTER (WHERE e.result IN ('INVALID', 'MISROUTED')),
           min(e.available_after) FILTER (WHERE e.result NOT IN ('INVALID', 'MISROUTED')),
           min(e.occurred_at) FILTER (
               WHERE e.result = 'APPLIED' AND e.delta < 0 AND e.available_after = 0)
    FROM ledger_entries e
    WHERE e.topic = p_topic AND e.occurred_at >= since AND e.occurred_at < until
      AND (p_sku IS NULL OR e.sku = p_sku)
    GROUP BY 1, 2
    ORDER BY 1, 2
$$;
