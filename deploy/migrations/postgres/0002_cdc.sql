-- CDC relay state (services/cdc). Not in publication feed_cdc, so its own writes are
-- never captured. One row per replication slot: the initial snapshot is complete only
-- when this row says so; a relay that finds its slot without a completed snapshot drops
-- the slot and snapshots again (a crash mid-snapshot must not leave a gap).
CREATE TABLE cdc_relay_state (
    slot_name              TEXT PRIMARY KEY,
    consistent_point       PG_LSN NOT NULL,
    snapshot_completed_at  TIMESTAMPTZ NULL,
    snapshot_rows          BIGINT NOT NULL DEFAULT 0
);
