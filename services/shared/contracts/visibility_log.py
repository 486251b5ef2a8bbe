"""The visibility log's shared SQL (migrations 0003-0006): what the API's fence and the
fan-out's verifier both ask of it."""
from __future__ import annotations

# The log's head: the last sequence number handed out (0 before the first entry).
# Entries are numbered under the fence lock, so every entry up to it exists once the
# transactions that took the numbers have committed.
LOG_HEAD = "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM visibility_changes_seq"
