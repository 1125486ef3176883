-- The partition whose records built each SKU's state (Redis records it so a
-- record of the SKU on another partition is refused as MISROUTED). NULL in
-- snapshots taken before it was recorded: the SKU's home partition owns it.
ALTER TABLE snapshot_skus ADD COLUMN partition integer;
