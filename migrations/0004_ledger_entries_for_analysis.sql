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
