-- Least privilege. Two roles without login, made once per cluster (roles
-- are cluster-wide) and granted in each database migrated:
--
--   stockledger_analyst   SELECT on the archive (ledger_entries,
--                         ledger_hourly) and its views, nothing else; the
--                         CLI's history, report, export and stock --as-of
--                         and the gateway's archive reads act as it.
--   stockledger_archiver  what the archiver writes: rows, hourly totals and
--                         its progress; it acts as it once migrated.
--
-- A login for a person or a tool is a member of one, e.g.
--   CREATE ROLE alice LOGIN PASSWORD '…' IN ROLE stockledger_analyst;
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'stockledger_analyst') THEN
        CREATE ROLE stockledger_analyst NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'stockledger_archiver') THEN
        CREATE ROLE stockledger_archiver NOLOGIN;
    END IF;
END
$$;

-- The migrating user acts as either (SET ROLE) without being a superuser.
DO $$
BEGIN
    EXECUTE format('GRANT stockledger_analyst, stockledger_archiver TO %I', current_user);
EXCEPTION WHEN invalid_grant_operation OR insufficient_privilege THEN
    NULL;  -- a superuser needs no grant; one who may not grant is told at SET ROLE
END
$$;

GRANT USAGE ON SCHEMA public TO stockledger_analyst, stockledger_archiver;

GRANT SELECT ON ledger_entries, ledger_hourly, ledger_sku_timeline, ledger_order_timeline,
    ledger_sell_outs, ledger_reservations TO stockledger_analyst;

GRANT SELECT, INSERT ON ledger_entries TO stockledger_archiver;
GRANT SELECT, INSERT, UPDATE ON ledger_hourly, archiver_progress TO stockledger_archiver;
-- New months are made as the owner of ledger_entries (only the owner may
-- attach a partition), by the archiver only.
ALTER FUNCTION ledger_entries_ensure_months(timestamptz[]) SECURITY DEFINER SET search_path = public;
REVOKE EXECUTE ON FUNCTION ledger_entries_ensure_months(timestamptz[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_entries_ensure_months(timestamptz[]) TO stockledger_archiver;
