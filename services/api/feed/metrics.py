"""Read-path metrics, registered in the API's registry (``ApiMetrics.registry``)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram


class FeedMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.snapshots = Counter("feed_snapshots_built_total", "First pages that ranked a snapshot",
                                 ("reason",), registry=registry)
        self.snapshots_reused = Counter(
            "feed_snapshots_reused_total", "First pages that showed the reader's last snapshot "
            "again: its sources were unchanged (reuse.py)", registry=registry)
        self.candidates = Counter("feed_candidates_total", "Candidates ranked into snapshots",
                                  registry=registry)
        self.source_failures = Counter("feed_partition_read_failures_total",
                                       "Candidate reads that failed or timed out (page served "
                                       "without them)", ("source",), registry=registry)
        for source in ("inbox", "celebrity", "fallback"):  # at 0: a rate of none is no data
            self.source_failures.labels(source)
        self.skipped = Counter("feed_items_skipped_total",
                               "Snapshot entries not shown because they became ineligible",
                               ("reason",), registry=registry)
        self.partial_pages = Counter("feed_partial_pages_total",
                                     "Pages ended early because post copies could not be read",
                                     registry=registry)
        self.snapshot_save_failures = Counter("feed_snapshot_save_failures_total",
                                              "Snapshots that could not be stored",
                                              registry=registry)
        self.snapshot_write_seconds = Histogram(
            "feed_snapshot_write_seconds", "Stored snapshot batches: time to write one",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2), registry=registry)
        self.body_cache_hits = Counter("feed_body_cache_hits_total", "Post bodies from the cache",
                                       registry=registry)
        self.body_cache_misses = Counter("feed_body_cache_misses_total",
                                         "Post bodies read from Cassandra", registry=registry)
        self.readers_returned = Counter("feed_readers_returned_total",
                                        "Inactive readers who came back (announced to the "
                                        "fan-out, which regenerates their inbox)",
                                        registry=registry)
        self.activity_failures = Counter("feed_activity_failures_total",
                                         "Reads not recorded or returns not announced (retried)",
                                         registry=registry)
        self.store_hedges = Counter(
            "feed_store_hedges_total", "Reads sent to a second node after hedge_after_s, by "
            "which answered first (hedge, first) or none (failed); over_budget: slow reads not "
            "hedged (the extra reads are capped at half of all reads)", ("outcome",),
            registry=registry)
        for outcome in ("hedge", "first", "failed", "over_budget"):
            self.store_hedges.labels(outcome)
