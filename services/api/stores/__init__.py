"""Postgres statements of the write path, one module per aggregate. Thin: no decisions."""
