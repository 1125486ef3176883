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
