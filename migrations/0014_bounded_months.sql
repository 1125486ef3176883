-- The archive makes a month's partition only for the months from 2000-01
-- to 2099-12: at most 1,200 tables, however many months producers stamp.
-- A row of any other month goes to ledger_entries_other_months. The ledger
-- decides only records whose occurred_at lies between 1970-01-01 and the
-- end of 9999 (an INVALID record is archived at its record time, clamped
-- into the same span), so such a row comes from a producer whose clock is
-- wrong, or from a test. Partitions made before this migration for months
-- outside the span stay as they are.
--
-- The CHECK lets PostgreSQL create a month's partition without scanning
-- this one: it can hold no row of the months that get partitions.
CREATE TABLE ledger_entries_other_months PARTITION OF ledger_entries DEFAULT;
ALTER TABLE ledger_entries_other_months ADD CONSTRAINT ledger_entries_other_months_span
    CHECK (occurred_at < timestamptz '2000-01-01 00:00:00+00'
        OR occurred_at >= timestamptz '2100-01-01 00:00:00+00');

CREATE OR REPLACE FUNCTION ledger_entries_ensure_months(instants timestamptz[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
DECLARE
    month timestamp;
    name  text;
BEGIN
    FOR month IN
        SELECT DISTINCT date_trunc('month', i AT TIME ZONE 'UTC') FROM unnest(instants) AS i
    LOOP
        -- Outside the span: the row goes to ledger_entries_other_months.
        CONTINUE WHEN month < timestamp '2000-01-01' OR month >= timestamp '2100-01-01';
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
