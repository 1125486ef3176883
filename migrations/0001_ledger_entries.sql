-- One row per command record: the decision the applier took for it.
-- The primary key is the record's log position, so outcome messages that
-- are published twice collapse into one row.
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
    reason          text,
    occurred_at     timestamptz NOT NULL,  -- when the order service issued it
    archived_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition, log_offset)
);

-- "History of a SKU", in log order (a SKU lives in one partition).
CREATE INDEX ledger_entries_sku_history ON ledger_entries (sku, topic, log_offset);

-- "History of an order".
CREATE INDEX ledger_entries_order_history ON ledger_entries (order_id, sku, log_offset)
    WHERE order_id IS NOT NULL;

-- The archiver's own progress, written in the same transaction as the rows.
CREATE TABLE archiver_progress (
    consumer_group text        NOT NULL,
    topic          text        NOT NULL,  -- the outcomes topic
    partition      integer     NOT NULL,
    next_offset    bigint      NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, topic, partition)
);
