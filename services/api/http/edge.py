"""``Edge``: the one ASGI layer every HTTP request passes first.

It does what each request gets whatever it asks for: an X-Request-ID (the client's, if
short and plain, or a fresh one), echoed on the response and carried into every log line
of the request (``logs.request_id_var``); the request counters and latency by route
template and status; the access log line; and the body-size limit (413 problem+json,
for a declared length or a streamed body).

Why one layer and not one middleware per concern: each pure ASGI middleware adds a call
frame on the way in and a ``send`` wrapper on the way out, for every message of every
response. Three of them (request context, metrics, body limit), inside FastAPI's own
three, cost a feed page about as much as its merge (py-spy on a first page at 16
connections, 2026-12-01: ~7 % of the API's samples between uvicorn and the route, the
send wrappers alone ~8 % inclusive). Here the headers are scanned once and ``send`` is
wrapped once. ``app.FeedApi`` puts it outside FastAPI's stack, with the feed's fast path
(``routes.feed_fast``) right inside it, so a warm feed page skips FastAPI's layers too.

The access log (logger ``services.api.access``) writes a line for every request only when
that logger is enabled for INFO (``configure_logging(access_log=True)``, or a test's
``caplog``); responses with a 5xx status are always logged, at ERROR. The check comes
before the line is built: building and writing a JSON line per request cost ~25 % of a
``/healthz`` request's CPU.
"""
from __future__ import annotations

import json
import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .logs import ACCESS_LOGGER, request_id_var
from .metrics import ApiMetrics, RequestSeries, route_label
from .problems import BODY_TOO_LARGE, ProblemError, problem_body
from .request_context import choose_request_id

log = logging.getLogger(ACCESS_LOGGER)

_REQUEST_ID = b"x-request-id"
_CONTENT_LENGTH = b"content-length"


class Edge:
    """See the module docstring. ``max_body_bytes``: the largest request body read."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self._series = RequestSeries(metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        client_id = declared = None
        for key, value in scope.get("headers", ()):
            if key == _REQUEST_ID and client_id is None:
                client_id = value.decode("latin-1")
            elif key == _CONTENT_LENGTH and declared is None:
                declared = value.decode("latin-1")
        request_id = choose_request_id(client_id)
        scope.setdefault("state", {})["request_id"] = request_id
        token = request_id_var.set(request_id)
        id_header = (_REQUEST_ID, request_id.encode("latin-1"))
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = message.get("headers", ())
                if any(k.lower() == _REQUEST_ID for k, _ in headers):
                    headers = [(k, v) for k, v in headers if k.lower() != _REQUEST_ID]
                message["headers"] = [*headers, id_header]
            await send(message)

        try:
            if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
                await self._refuse(send_with_id)
            else:
                await self.app(scope, self._counting(receive), send_with_id)
        finally:
            count, latency = self._series.of(scope.get("method", ""), route_label(scope), status)
            count.inc()
            elapsed = time.perf_counter() - started
            latency.observe(elapsed)
            level = logging.ERROR if status >= 500 else logging.INFO
            if log.isEnabledFor(level):
                route = scope.get("route")
                log.log(level, "request", extra={
                    "request_id": request_id, "method": scope.get("method"),
                    "path": scope.get("path"), "route": getattr(route, "path", None),
                    "status": status, "duration_ms": round(elapsed * 1000, 3),
                    "user_id": scope.get("state", {}).get("user_id")})
            request_id_var.reset(token)

    def _counting(self, receive: Receive) -> Receive:
        """``receive`` that refuses a streamed body once it passes the limit."""
        seen = 0
        limit = self.max_body_bytes

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise ProblemError(BODY_TOO_LARGE, f"at most {limit} bytes")
            return message

        return counting_receive

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(problem_body(BODY_TOO_LARGE, f"at most {self.max_body_bytes} bytes")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/problem+json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
