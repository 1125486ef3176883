-- A record that is not a command (INVALID) or is on another partition than
-- its SKU's (MISROUTED) was not decided on the SKU's stock, so it says
-- nothing of it: its stock figures are NULL, not 0. A 0 read as the SKU's
-- stock made it look sold out (the lowest available_after of a SKU, a
-- reader of stock from the archive).
--
-- The outcomes topic still carries 0 in these outcomes (the Outcome schema
-- keeps its released shape); docs/producers.md says what they mean.
--
-- The update reads the whole archive once; such rows are rare, so it
-- writes few.

ALTER TABLE ledger_entries
    ALTER COLUMN available_after DROP NOT NULL,
    ALTER COLUMN total_after DROP NOT NULL;

UPDATE ledger_entries
   SET available_after = NULL, total_after = NULL
 WHERE result IN ('INVALID', 'MISROUTED');

ALTER TABLE ledger_entries
    ADD CONSTRAINT ledger_entries_figures_of_decided_records CHECK (
        (available_after IS NULL) = (total_after IS NULL)
        AND (available_after IS NULL) = (result IN ('INVALID', 'MISROUTED'))
    );
