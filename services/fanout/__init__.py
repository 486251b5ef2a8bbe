"""The fan-out worker: posts into per-reader inboxes (hybrid tiers, inactive readers
skipped, returning ones rebuilt), follows and blocks into copies and backfills, rank-key
moves into inbox rows; one author event per post. `jobs/` holds its offline jobs
(rebuild, reconcile)."""
