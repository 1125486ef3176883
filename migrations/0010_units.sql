-- Seats (outcome schema v6): a deduct of named units keeps their names, as
-- a restock that added named units does; NULL for every other row, and for
-- rows archived before. A nullable column with no default rewrites
-- nothing. The partial GIN index serves `history --unit`, which looks for
-- the rows naming one unit of one SKU.
ALTER TABLE ledger_entries ADD COLUMN units text[];

CREATE INDEX ledger_entries_units ON ledger_entries USING gin (units)
    WHERE units IS NOT NULL;
