-- The W3C traceparent a producer put on the command record, carried by
-- the applier to the outcome's headers and kept here, so one order can be
-- followed from the service that sent it to its archived decision. NULL
-- when the producer sent none (or one that is not valid). Adding a column
-- with no default rewrites nothing.
ALTER TABLE ledger_entries ADD COLUMN traceparent text;
