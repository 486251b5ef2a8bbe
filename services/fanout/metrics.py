"""Prometheus metrics of the fan-out worker (port: FanoutSettings.fanout_metrics_port).

Consumer lag and DLQ counts are in services/shared/worker/poison_guard.py and batch_consumer.py (shared with the ranker).
"""
from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

INBOX_ROWS = Counter("feed_fanout_inbox_rows_total", "Inbox rows written by fan-out "
                     "(rate() of it is fan-out rows/s)")
FANOUT_CAPACITY = Gauge("feed_fanout_capacity_rows_per_second",
                        "Measured fan-out capacity (EWMA of achieved rows/s, floored)")
FANOUT_SECONDS = Histogram("feed_fanout_post_seconds", "Time to fan one post out",
                           buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30))
EVENT_TO_INBOX = Histogram("feed_fanout_commit_to_inbox_seconds",
                           "Postgres commit (source.ts_ms) to the post's inbox rows written",
                           buckets=(0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 5, 10, 30, 60))
STORE_RETRIES = Counter("feed_fanout_store_retries_total",
                        "Pages of a fan-out retried after a store timeout (each halves the "
                        "capacity estimate)")
TIER_CHANGES = Counter("feed_fanout_tier_changes_total", "Author tier changes", ["to"])
for _tier in ("celebrity", "ordinary"):  # at 0 from the start: no change is data, not a gap
    TIER_CHANGES.labels(_tier)
CLEANUP_ROWS = Counter("feed_fanout_cleanup_rows_total", "Inbox rows removed", ["reason"])
TRIMS = Counter("feed_fanout_inbox_trims_total", "Inboxes trimmed to the length cap")
CELEBRITY_POSTS = Counter("feed_fanout_celebrity_posts_total",
                          "Posts kept in the author partition only")
POSTS_ANNOUNCED = Counter("feed_fanout_posts_announced_total",
                          "author-events records published (one per post made readable)")
BACKLOG_POSTS = Counter("feed_fanout_backlog_posts_total",
                        "Posts older than the inbox TTL taken in by the batch (backlog.py), by "
                        "outcome: kept, dropped, unchanged, or left to the per-post path",
                        ["outcome"])
for _outcome in ("kept", "dropped", "unchanged", "per_post"):
    BACKLOG_POSTS.labels(_outcome)
PUSH_ROUND_POSTS = Histogram("feed_fanout_push_round_posts",
                             "Posts whose inbox rows one push round wrote together, grouped by "
                             "reader (push_rounds.py)",
                             buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000))
FOLLOWER_DRIFT = Gauge("feed_reconcile_follower_drift_authors",
                       "Authors whose follower count differs from Postgres (last reconciliation)")
RANK_MOVE_ROWS = Histogram("feed_fanout_rank_move_rows",
                           "Inbox rows rewritten by one rank-key move (0: a celebrity post, "
                           "whose only row is in the author timeline)",
                           buckets=(0, 1, 10, 100, 1000, 5000, 20000, 100000))
INACTIVE_ROWS_SKIPPED = Counter("feed_fanout_inactive_rows_skipped_total",
                                "Inbox rows not written because the reader is inactive "
                                "(has not read their feed for FEED_INACTIVE_AFTER)")
READERS_GONE_IDLE = Counter("feed_fanout_readers_gone_idle_total",
                            "Readers the sweeper flagged inactive (fan-out skips them)")
READERS_UNDONE = Counter("feed_fanout_readers_idle_undone_total",
                         "Readers who came back while the sweeper flagged them (unflagged "
                         "and their inbox rebuilt by the sweeper)")
READERS_REGENERATED = Counter("feed_fanout_readers_regenerated_total",
                              "reader_returned events applied: inbox rebuilt, or the reader "
                              "was already active (an event announced again or replayed)",
                              ["outcome"])
for _outcome in ("rebuilt", "already_active"):
    READERS_REGENERATED.labels(_outcome)
REGENERATION_SECONDS = Histogram("feed_inbox_regeneration_seconds",
                                 "A returning reader's wait for their inbox: the API seeing "
                                 "them back (the event's at) to the state active",
                                 buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300))

# The visibility verifier (verifier.py) and the repair command (jobs/repair.py), both
# through copy_audit.py. ``kind``: the visibility-log entry's (post, follow, block).
VISIBILITY_REPAIRS = Counter("feed_visibility_repairs_total",
                             "Visibility-log entries whose copies were still wrong past "
                             "FEED_VISIBILITY_REPAIR_AFTER_S and were repaired from Postgres",
                             ["kind"])
VISIBILITY_VERIFIED = Counter("feed_visibility_verified_total",
                              "Visibility-log entries verified against Postgres (repairs included)",
                              ["kind"])
for _kind in ("post", "follow", "block"):
    VISIBILITY_REPAIRS.labels(_kind)
    VISIBILITY_VERIFIED.labels(_kind)
VISIBILITY_OLDEST_UNVERIFIED = Gauge("feed_visibility_oldest_unverified_seconds",
                                     "Age of the oldest visibility-log entry not yet verified "
                                     "(0: none; on the lock holder, growing while its walks fail)")
VISIBILITY_UNVERIFIED = Gauge("feed_visibility_unverified_entries",
                              "Visibility-log entries not yet verified (on the lock holder)")
VISIBILITY_VERIFIER_ACTIVE = Gauge("feed_visibility_verifier_active",
                                   "1 on the fan-out process holding the verifier's lock")
COPY_AUDIT_CHECKED = Gauge("feed_copy_audit_checked",
                           "Copies the last repair command compared with Postgres", ["kind"])
COPY_AUDIT_DIFFERING = Gauge("feed_copy_audit_differing",
                             "Copies the last repair command found differing from Postgres", ["kind"])
COPY_AUDIT_REPAIRED = Gauge("feed_copy_audit_repaired",
                            "Copies the last repair command repaired", ["kind"])
