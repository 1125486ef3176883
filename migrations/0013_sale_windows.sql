-- Sale windows (outcome schema v9): the window a WINDOW command set, its
-- opening and its closing; NULL for every other command, for an end the
-- window does not have, and for rows archived before. What the window was
-- before is the row's reason. Nullable columns with no default rewrite
-- nothing.
ALTER TABLE ledger_entries ADD COLUMN opens_at timestamptz;
ALTER TABLE ledger_entries ADD COLUMN closes_at timestamptz;
