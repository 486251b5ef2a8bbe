"""Writes and ids: POST /v1/posts throughput, Snowflake ids per second, and what the id's
type costs an index."""
