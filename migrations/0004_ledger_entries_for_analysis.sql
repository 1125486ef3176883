-- The archive, laid out for analysts.
--
-- ledger_entries becomes a table partitioned by month of occurred_at, so a
-- time range reads only the months it covers, each month's indexes stay the
-- size of one month, and old months can be detached or dropped whole. The
-- archiver creates a month's partition (ledger_entries_ensure_months) before
-- it writes the first row of that month. The rows already archived move into
-- the new table here.
--
-- A partitioned table's primary key must hold the partition key, so the key
-- is the log position plus occurred_at. A record's occurred_at never changes
-- (it is the command's own, or the record's timestamp), so an outcome
-- published twice still collapses into one row.
--
-- New columns: what outcome schema v3 carries (restock_mode and the reason
-- a rollback gave; NULL for rows archived before).
--
-- ledger_hourly: per SKU and hour totals, kept by a trigger, for reports.

ALTER TABLE ledger_entries RENAME TO ledger_entries_unpartitioned;
ALTER INDEX ledger_entries_pkey RENAME TO ledger_entries_unpartitioned_pkey;
ALTER INDEX ledger_entries_sku_history RENAME TO ledger_entries_unpartitioned_sku_history;
ALTER INDEX ledger_entries_order_history RENAME TO ledger_entries_unpartitioned_order_history;

CREATE TABLE ledger_entries (
    topic           text        NOT NULL,  -- the command topic
    partition       integer     NOT NULL,
    log_offset      bigint      NOT NULL,
    sku             text        NOT NULL,  -- record key for an invalid record
    command         text,                  -- DEDUCT, ROLLBACK, RESTOCK; NULL if invalid
    command_id      text,
    order_id        text,
    adjustment_id   text,
    quantity        bigint,
    result          text        NOT NULL,  -- APPLIED, REJECTED_INSUFFICIENT, ...
    delta           bigint      NOT NULL,  -- change in available stock
    available_after bigint      NOT NULL,
    total_after     bigint      NOT NULL,
    reason          text,                  -- the ledger's reason for its decision
    occurred_at     timestamptz NOT NULL,  -- when the order service issued it
    archived_at     timestamptz NOT NULL DEFAULT now(),
    restock_mode    text,                  -- ADD or SET, for a restock
    rollback_reason text,                  -- the reason a rollback gave
    PRIMARY KEY (topic, partition, log_offset, occurred_at)
) PARTITION BY RANGE (occurred_at);

-- "History of a SKU" in log order, and "stock as of offset N".
CREATE INDEX ledger_entries_sku_log ON ledger_entries (sku, topic, log_offset);
-- "History of a SKU between two times", and "stock as of time T".
CREATE INDEX ledger_entries_sku_time ON ledger_entries (sku, topic, occurred_at, log_offset);
-- "History of an order".
CREATE INDEX ledger_entries_order_history ON ledger_entries (order_id, sku, log_offset)
    WHERE order_id IS NOT NULL;
-- Time ranges over every SKU (reports, exports): rows arrive roughly in
-- occurred_at order, which is what a BRIN index needs, at a fraction of a
-- B-tree's size and write cost.
CREATE INDEX ledger_entries_time ON ledger_entries USING brin (occurred_at);

-- Creates the monthly partitions (UTC months) that rows at `instants` need,
-- if they do not exist yet. Two archivers racing to create the same month
-- is harmless: the loser finds it made.
CREATE FUNCTION ledger_entries_ensure_months(instants timestamptz[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    month timestamp;
    name  text;
BEGIN
    FOR month IN
        SELECT DISTINCT date_trunc('month', i AT TIME ZONE 'UTC') FROM unnest(instants) AS i
    LOOP
        name := 'ledger_entries_' || to_char(month, 'YYYY_MM');
        CONTINUE WHEN to_regclass(name) IS NOT NULL;
        BEGIN
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF ledger_entries FOR VALUES FROM (%L) TO (%L)',
                name,
                month AT TIME ZONE 'UTC',
                (month + interval '1 month') AT TIME ZONE 'UTC');
        EXCEPTION WHEN duplicate_table OR unique_violation THEN
            NULL;  -- made meanwhile by another archiver
        END;
    END LOOP;
END
$$;

-- Per SKU and UTC hour, the totals reports are made of, kept by a trigger
-- in the statement that inserts the rows (only rows actually inserted: a
-- redelivered outcome that collapses on the primary key adds nothing). A
-- report over whole hours reads these instead of every row. Dropping a
-- month of ledger_entries leaves its hours here (delete them by `hour`).
CREATE TABLE ledger_hourly (
    topic                 text        NOT NULL,
    hour                  timestamptz NOT NULL,  -- start of the UTC hour
    sku                   text        NOT NULL,
    records               bigint      NOT NULL,
    deducts_applied       bigint      NOT NULL,
    units_taken           bigint      NOT NULL,
    rollbacks_applied     bigint      NOT NULL,
    units_returned        bigint      NOT NULL,
    net_taken             bigint      NOT NULL,  -- taken by deducts minus given back by rollbacks
    restocks_applied      bigint      NOT NULL,
    restock_delta         bigint      NOT NULL,
    rejected_insufficient bigint      NOT NULL,
    rejected_cancelled    bigint      NOT NULL,
    rejected_restock      bigint      NOT NULL,
    ignored_no_deduction  bigint      NOT NULL,
    duplicates            bigint      NOT NULL,
    invalid               bigint      NOT NULL,  -- INVALID and MISROUTED
    lowest_available      bigint,                -- NULL: no record with stock
    sold_out_at           timestamptz,           -- first applied record that took available to 0
    PRIMARY KEY (topic, hour, sku)
);
CREATE INDEX ledger_hourly_sku ON ledger_hourly (sku, topic, hour);

-- The one definition of what a set of rows adds to the hours: used by the
-- trigger (rows = the statement's inserted rows) and by ledger_report for
-- intervals that are not whole hours (rows = ledger_entries).
CREATE FUNCTION ledger_totals_sql(source text, bucket text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT format($q$
        SELECT topic, %2$s AS bucket, sku,
               count(*) AS records,
               count(*) FILTER (WHERE result = 'APPLIED' AND command = 'DEDUCT'),
               coalesce(sum(-delta) FILTER (WHERE result = 'APPLIED' AND command = 'DEDUCT'), 0)::bigint,
               count(*) FILTER (WHERE result = 'APPLIED' AND command = 'ROLLBACK'),
               coalesce(sum(delta) FILTER (WHERE result = 'APPLIED' AND command = 'ROLLBACK'), 0)::bigint,
               coalesce(sum(-delta) FILTER (WHERE command IN ('DEDUCT', 'ROLLBACK')), 0)::bigint,
               count(*) FILTER (WHERE result = 'APPLIED' AND command = 'RESTOCK'),
               coalesce(sum(delta) FILTER (WHERE command = 'RESTOCK'), 0)::bigint,
               count(*) FILTER (WHERE result = 'REJECTED_INSUFFICIENT'),
               count(*) FILTER (WHERE result = 'REJECTED_CANCELLED'),
               count(*) FILTER (WHERE result = 'REJECTED_RESTOCK'),
               count(*) FILTER (WHERE result = 'IGNORED_NO_DEDUCTION'),
               count(*) FILTER (WHERE result = 'DUPLICATE'),
               count(*) FILTER (WHERE result IN ('INVALID', 'MISROUTED')),
               min(available_after) FILTER (WHERE result NOT IN ('INVALID', 'MISROUTED')),
               min(occurred_at) FILTER (
                   WHERE result = 'APPLIED' AND delta < 0 AND available_after = 0)
        FROM %1$s
    $q$, source, bucket)
$$;

CREATE FUNCTION ledger_hourly_add() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- ledger_totals_sql selects the columns in the table's order. Rows go in
    -- (topic, hour, sku) order, so two archivers lock them in one order.
    EXECUTE 'INSERT INTO ledger_hourly AS h '
        || ledger_totals_sql('new_rows',
            $b$date_bin('1 hour', occurred_at, timestamptz 'epoch')$b$)
        || ' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3'
        || ' ON CONFLICT (topic, hour, sku) DO UPDATE SET
               records = h.records + EXCLUDED.records,
               deducts_applied = h.deducts_applied + EXCLUDED.deducts_applied,
               units_taken = h.units_taken + EXCLUDED.units_taken,
               rollbacks_applied = h.rollbacks_applied + EXCLUDED.rollbacks_applied,
               units_returned = h.units_returned + EXCLUDED.units_returned,
               net_taken = h.net_taken + EXCLUDED.net_taken,
               restocks_applied = h.restocks_applied + EXCLUDED.restocks_applied,
               restock_delta = h.restock_delta + EXCLUDED.restock_delta,
               rejected_insufficient = h.rejected_insufficient + EXCLUDED.rejected_insufficient,
               rejected_cancelled = h.rejected_cancelled + EXCLUDED.rejected_cancelled,
               rejected_restock = h.rejected_restock + EXCLUDED.rejected_restock,
               ignored_no_deduction = h.ignored_no_deduction + EXCLUDED.ignored_no_deduction,
               duplicates = h.duplicates + EXCLUDED.duplicates,
               invalid = h.invalid + EXCLUDED.invalid,
               lowest_available = LEAST(h.lowest_available, EXCLUDED.lowest_available),
               sold_out_at = LEAST(h.sold_out_at, EXCLUDED.sold_out_at)';
    RETURN NULL;
END
$$;

CREATE TRIGGER ledger_hourly_add AFTER INSERT ON ledger_entries
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_hourly_add();

SELECT ledger_entries_ensure_months(
    array_agg(DISTINCT date_trunc('month', occurred_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'))
FROM ledger_entries_unpartitioned;

INSERT INTO ledger_entries (topic, partition, log_offset, sku, command, command_id, order_id,
    adjustment_id, quantity, result, delta, available_after, total_after, reason, occurred_at,
    archived_at)
SELECT topic, partition, log_offset, sku, command, command_id, order_id, adjustment_id,
    quantity, result, delta, available_after, total_after, reason, occurred_at, archived_at
FROM ledger_entries_unpartitioned;

DROP TABLE ledger_entries_unpartitioned;
