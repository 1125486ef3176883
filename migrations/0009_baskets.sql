-- Baskets (outcome schema v5): a deduct that is a line of a basket keeps
-- the basket's id; NULL for every other row, and for rows archived before.
-- A nullable column with no default rewrites nothing. The partial index
-- serves `history --basket` without weighing on the rows that have none.
ALTER TABLE ledger_entries ADD COLUMN basket_id text;

CREATE INDEX ledger_entries_basket ON ledger_entries (basket_id, sku, log_offset)
    WHERE basket_id IS NOT NULL;
