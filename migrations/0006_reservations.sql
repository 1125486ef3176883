-- Reservations and per-user limits (outcome schema v4).
--
-- The archive keeps the buyer and the deadline a deduct named; both are NULL
-- for rows archived before, and for every other command. Adding nullable
-- columns changes only the catalogue: no row is rewritten.
ALTER TABLE ledger_entries
    ADD COLUMN user_id    text,
    ADD COLUMN expires_at timestamptz;

-- A snapshot keeps each SKU's reserved units and per-user limit, so a
-- restored projection decides confirms, expiries and limits as the live one
-- did. Snapshots taken before hold no reservations and no limits.
ALTER TABLE snapshot_skus
    ADD COLUMN reserved       bigint NOT NULL DEFAULT 0,
    ADD COLUMN per_user_limit bigint;

-- The timelines gain the buyer and the deadline (appended: the columns
-- analysts already select keep their places).
CREATE OR REPLACE VIEW ledger_sku_timeline AS
SELECT topic, sku, partition, log_offset, occurred_at, command,
       coalesce(order_id, adjustment_id) AS order_or_adjustment,
       quantity, restock_mode, result, delta, available_after, total_after,
       total_after - available_after AS held, reason, rollback_reason,
       user_id, expires_at
FROM ledger_entries
WHERE result NOT IN ('INVALID', 'MISROUTED');

CREATE OR REPLACE VIEW ledger_order_timeline AS
SELECT topic, order_id, sku, partition, log_offset, occurred_at, command, quantity, result,
       delta, available_after, reason, rollback_reason, user_id, expires_at
FROM ledger_entries
WHERE order_id IS NOT NULL;

-- One row per reservation granted: who held what until when, and the
-- record that ended the hold (a confirm on time, a rollback, an expire,
-- or a confirm after the deadline that expired it); ended_by is NULL while
-- the hold is live (or its end is not archived yet).
CREATE VIEW ledger_reservations AS
SELECT r.topic, r.sku, r.order_id, r.user_id, r.quantity, r.partition, r.log_offset,
       r.occurred_at AS reserved_at, r.expires_at,
       e.command AS ended_by, e.result AS ended_with, e.occurred_at AS ended_at,
       e.log_offset AS ended_at_offset
FROM ledger_entries r
LEFT JOIN LATERAL (
    SELECT x.command, x.result, x.occurred_at, x.log_offset
    FROM ledger_entries x
    WHERE x.topic = r.topic AND x.order_id = r.order_id AND x.sku = r.sku
      AND x.partition = r.partition AND x.log_offset > r.log_offset
      AND ((x.command = 'CONFIRM' AND x.result = 'CONFIRMED')
        OR (x.command = 'CONFIRM' AND x.result = 'REJECTED_EXPIRED' AND x.delta > 0)
        OR (x.command = 'ROLLBACK' AND x.result = 'APPLIED')
        OR (x.command = 'EXPIRE' AND x.result = 'EXPIRED'))
    ORDER BY x.log_offset
    LIMIT 1
) e ON true
WHERE r.command = 'DEDUCT' AND r.result = 'APPLIED' AND r.expires_at IS NOT NULL;
