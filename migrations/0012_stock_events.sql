-- Stock events (outcome schema v8): the events a record caused, SOLD_OUT,
-- BACK_IN_STOCK and LOW_STOCK, in that order; NULL when it caused none and
-- for rows archived before. A nullable column with no default rewrites
-- nothing. ledger_stock_events lists them one a row, each with the
-- record that caused it, for analysts; the partial index serves it.
ALTER TABLE ledger_entries ADD COLUMN events text[];

CREATE INDEX ledger_entries_events ON ledger_entries (sku, log_offset)
    WHERE events IS NOT NULL;

CREATE VIEW ledger_stock_events AS
SELECT e.topic, e.sku, kind, e.location, e.available_after, e.total_after, e.occurred_at,
       e.partition, e.log_offset, e.command, coalesce(e.order_id, e.adjustment_id) AS caused_by
FROM ledger_entries e, unnest(e.events) AS kind
WHERE e.events IS NOT NULL;

GRANT SELECT ON ledger_stock_events TO stockledger_analyst;
