-- The record the archiver last stopped on, and how many times in a row it
-- did: an archiver that exits on the same page at every restart is in a
-- crash loop, which `stockledger status` names. The row goes once the
-- archiver has written past that record. (The applier keeps its note in
-- the projection it writes, `{prefix}:stops`.)
CREATE TABLE service_stops (
    consumer_group text        NOT NULL,
    service        text        NOT NULL,  -- archiver
    record         text        NOT NULL,  -- topic/partition@offset
    times          integer     NOT NULL,
    error          text        NOT NULL,
    stopped_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, service)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON service_stops TO stockledger_archiver;
GRANT SELECT ON service_stops TO stockledger_analyst;
