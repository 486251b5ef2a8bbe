"""Prometheus metrics of the API: request counts and latency by route template and status.

Each app gets its own registry, so several apps in one process (tests) do not collide;
``GET /metrics`` renders it.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import Scope

# Buckets around the page targets (p95 15 ms next, 30 ms first: docs/architecture.md,
# "What the specification fixes") and slow writes.
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.015, 0.025, 0.03, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ApiMetrics:
    """The API's collectors, registered in one registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("feed_api_requests_total", "HTTP requests served",
                                ("method", "route", "status"), registry=self.registry)
        self.latency = Histogram("feed_api_request_duration_seconds",
                                 "Time to the end of the response",
                                 ("method", "route"), buckets=LATENCY_BUCKETS,
                                 registry=self.registry)
        self.ids_issued = Counter("feed_api_ids_issued_total", "Snowflake ids issued",
                                  registry=self.registry)
        self.id_errors = Counter("feed_api_id_errors_total",
                                 "Id requests refused (clock drift, lost lease)", ("reason",),
                                 registry=self.registry)
        self.idempotent_replays = Counter("feed_api_idempotent_replays_total",
                                          "POST /v1/posts answered from a stored response",
                                          registry=self.registry)
        self.id_node = Gauge("feed_api_id_node", "Leased Snowflake node id",
                             registry=self.registry)


def route_label(scope: Scope) -> str:
    """The route template (``/v1/posts/{post_id}``), never the raw path (unbounded labels)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


class RequestSeries:
    """The labelled request counter and latency children, per (method, route, status).

    ``labels()`` checks and stringifies its arguments and takes a lock on every call, twice
    per request; this keeps the children it returned. It holds no more entries than the
    metrics already have series (routes are templates, ``route_label``)."""

    def __init__(self, metrics: ApiMetrics) -> None:
        self.metrics = metrics
        self._children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    def of(self, method: str, route: str, status: int) -> tuple[Counter, Histogram]:
        key = (method, route, status)
        series = self._children.get(key)
        if series is None:
            series = (self.metrics.requests.labels(method, route, str(status)),
                      self.metrics.latency.labels(method, route))
            self._children[key] = series
        return series
