-- Locations (outcome schema v7): the location a command named or acted on
-- (a deduct's, named or chosen by the ledger; where an order's units went
-- back or were sold; a restock's; a transfer's `from`), and where a
-- transfer moved stock to; NULL for SKUs without locations and for rows
-- archived before. Nullable columns with no default rewrite nothing. The
-- partial index serves `report --by location` and per-location history
-- without weighing on the rows that have none.
ALTER TABLE ledger_entries ADD COLUMN location text;
ALTER TABLE ledger_entries ADD COLUMN to_location text;

CREATE INDEX ledger_entries_location ON ledger_entries (location, sku, log_offset)
    WHERE location IS NOT NULL;
