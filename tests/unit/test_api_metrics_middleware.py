"""edge.Edge: every request counted and timed in its own (method, route, status)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from starlette.types import Message, Receive, Scope, Send

from services.api.http.edge import Edge
from services.api.http.metrics import ApiMetrics


def _answering(status: int, route: str | None):
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if route is not None:
            scope["route"] = SimpleNamespace(path=route)
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})
    return app


def _serve(metrics: ApiMetrics, status: int, route: str | None, method: str = "GET") -> None:
    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        return None

    middleware = Edge(_answering(status, route), metrics, 1024)
    asyncio.run(middleware({"type": "http", "method": method, "path": "/x", "headers": []},
                           receive, send))


def _count(metrics: ApiMetrics, method: str, route: str, status: str) -> float | None:
    return metrics.registry.get_sample_value(
        "feed_api_requests_total", {"method": method, "route": route, "status": status})


def test_repeated_requests_keep_adding_to_their_own_series() -> None:
    metrics = ApiMetrics()
    served = [(200, "/healthz"), (200, "/healthz"), (404, None), (200, "/healthz")]
    for status, route in served:
        _serve(metrics, status, route)
    _serve(metrics, 201, "/v1/posts", method="POST")
    assert _count(metrics, "GET", "/healthz", "200") == 3
    assert _count(metrics, "GET", "unmatched", "404") == 1
    assert _count(metrics, "POST", "/v1/posts", "201") == 1
    assert metrics.registry.get_sample_value(
        "feed_api_request_duration_seconds_count", {"method": "GET", "route": "/healthz"}) == 3


def test_one_middleware_instance_counts_every_request_it_serves() -> None:
    metrics = ApiMetrics()
    middleware = Edge(_answering(200, "/healthz"), metrics, 1024)

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        return None

    async def serve_many() -> None:
        for _ in range(50):
            await middleware({"type": "http", "method": "GET", "path": "/healthz", "headers": []},
                             receive, send)

    asyncio.run(serve_many())
    assert _count(metrics, "GET", "/healthz", "200") == 50
