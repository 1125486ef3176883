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
-- When `every`, `since` and `until` are whole hours it sums ledger_hourly;
-- otherwise it reads the rows themselves.
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
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF every = interval '1 hour'
       AND extract(epoch FROM since) % 3600 = 0 AND extract(epoch FROM until) % 3600 = 0 THEN
        -- The hours as they are: nothing to add up.
        RETURN QUERY EXECUTE $q$
            SELECT h.sku, h.hour, h.records, h.deducts_applied, h.units_taken,
                   h.rollbacks_applied, h.units_returned, h.net_taken, h.restocks_applied,
                   h.restock_delta, h.rejected_insufficient, h.rejected_cancelled,
                   h.rejected_restock, h.ignored_no_deduction, h.duplicates, h.invalid,
                   h.lowest_available, h.sold_out_at
            FROM ledger_hourly h
            WHERE h.topic = $1 AND h.hour >= $2 AND h.hour < $3
              AND ($4::text IS NULL OR h.sku = $4)
            ORDER BY 1, 2
        $q$ USING p_topic, since, until, p_sku;
    ELSIF extract(epoch FROM every) > 0 AND extract(epoch FROM every) % 3600 = 0
       AND extract(epoch FROM since) % 3600 = 0 AND extract(epoch FROM until) % 3600 = 0 THEN
        RETURN QUERY EXECUTE $q$
            SELECT h.sku, date_bin($2, h.hour, timestamptz 'epoch'),
                   sum(h.records)::bigint, sum(h.deducts_applied)::bigint,
                   sum(h.units_taken)::bigint, sum(h.rollbacks_applied)::bigint,
                   sum(h.units_returned)::bigint, sum(h.net_taken)::bigint,
                   sum(h.restocks_applied)::bigint, sum(h.restock_delta)::bigint,
                   sum(h.rejected_insufficient)::bigint, sum(h.rejected_cancelled)::bigint,
                   sum(h.rejected_restock)::bigint, sum(h.ignored_no_deduction)::bigint,
                   sum(h.duplicates)::bigint, sum(h.invalid)::bigint,
                   min(h.lowest_available), min(h.sold_out_at)
            FROM ledger_hourly h
            WHERE h.topic = $1 AND h.hour >= $3 AND h.hour < $4
              AND ($5::text IS NULL OR h.sku = $5)
            GROUP BY 1, 2 ORDER BY 1, 2
        $q$ USING p_topic, every, since, until, p_sku;
    ELSE
        RETURN QUERY EXECUTE
            'SELECT t.sku, t.bucket, t.records, t.deducts_applied, t.units_taken,
                    t.rollbacks_applied, t.units_returned, t.net_taken, t.restocks_applied,
                    t.restock_delta, t.rejected_insufficient, t.rejected_cancelled,
                    t.rejected_restock, t.ignored_no_deduction, t.duplicates, t.invalid,
                    t.lowest_available, t.sold_out_at
             FROM (' || ledger_totals_sql(
                 'ledger_entries WHERE topic = $1 AND occurred_at >= $3 AND occurred_at < $4
                      AND ($5::text IS NULL OR sku = $5)',
                 $b$date_bin($2, occurred_at, timestamptz 'epoch')$b$)
            || ' GROUP BY 1, 2, 3) AS t (topic, bucket, sku, records, deducts_applied,
                    units_taken, rollbacks_applied, units_returned, net_taken, restocks_applied,
                    restock_delta, rejected_insufficient, rejected_cancelled, rejected_restock,
                    ignored_no_deduction, duplicates, invalid, lowest_available, sold_out_at)
             ORDER BY 1, 2'
        USING p_topic, every, since, until, p_sku;
    END IF;
END
$$;
