"""The stream's metrics, registered in the API's registry (``ApiMetrics.registry``).

``skipped`` is the read path's ``feed_items_skipped_total``: an event the log holds back
right before its write is counted there, under ``fenced``, as a page's entry would be.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class StreamMetrics:
    def __init__(self, registry: CollectorRegistry, skipped: Counter) -> None:
        self.skipped = skipped
        self.streams = Gauge("feed_streams_open", "Open SSE streams in this process",
                             registry=registry)
        self.stream_events = Counter("feed_stream_events_total", "new_item events by outcome",
                                     ("outcome",), registry=registry)
        self.stream_late_writes = Counter(
            "feed_stream_late_writes_total",
            "new_item events whose write came more than the margin after their last check: "
            "refused (resync sent instead) or overran (written past it; should stay 0)",
            ("outcome",), registry=registry)
        for outcome in ("refused", "overran"):  # at 0: a rate of none is no data
            self.stream_late_writes.labels(outcome)
        self.stream_cap_unchecked = Counter(
            "feed_stream_cap_unchecked_total",
            "Streams admitted on this process's own count: the shared cap could not be read",
            registry=registry)
        self.stream_consumer_errors = Counter("feed_stream_consumer_errors_total",
                                              "Errors of the stream's Kafka consumer",
                                              registry=registry)
        self.stream_consumer_restarts = Counter(
            "feed_stream_consumer_restarts_total",
            "Stream consumer restarts by outcome: replayed (the gap) or resync (streams told)",
            ("outcome",), registry=registry)
