-- Snapshots of the Redis projection, so a rebuild can start from one and
-- replay only the tail of the log.
CREATE TABLE snapshots (
    id       bigserial   PRIMARY KEY,
    topic    text        NOT NULL,  -- the command topic the projection folds
    prefix   text        NOT NULL,  -- the Redis prefix it was taken from
    taken_at timestamptz NOT NULL DEFAULT now(),
    skus     bigint      NOT NULL DEFAULT 0,
    complete boolean     NOT NULL DEFAULT false
);
CREATE INDEX snapshots_newest ON snapshots (topic, id DESC) WHERE complete;

-- Where a replay from the snapshot starts reading each partition: the
-- applier group's committed offsets when the snapshot began (every record
-- before them is in the snapshot's SKU states).
CREATE TABLE snapshot_partitions (
    snapshot_id  bigint  NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE,
    partition    integer NOT NULL,
    start_offset bigint  NOT NULL,
    PRIMARY KEY (snapshot_id, partition)
);

-- One SKU's state: stock, last applied offset, orders and adjustments (in
-- their Redis forms). Per-record decisions stay in ledger_entries.
CREATE TABLE snapshot_skus (
    snapshot_id bigint NOT NULL REFERENCES snapshots (id) ON DELETE CASCADE,
    sku         text   NOT NULL,
    last_offset bigint NOT NULL,
    available   bigint NOT NULL,
    total       bigint NOT NULL,
    orders      jsonb  NOT NULL,  -- order id -> "D|quantity|offset"
    adjustments jsonb  NOT NULL,  -- adjustment id -> offset
    PRIMARY KEY (snapshot_id, sku)
);
