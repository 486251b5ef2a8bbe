"""The write path's decisions: idempotency keys, Snowflake node leases, first-request users, who may see or delete a post."""
