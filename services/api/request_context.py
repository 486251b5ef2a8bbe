"""ASGI middleware: X-Request-ID, the access log line, and the request-body size limit.

Pure ASGI (not ``BaseHTTPMiddleware``) so that streaming responses such as the feed's
server-sent events pass through unbuffered, and a request pays no extra task or queue.

The access log (logger ``services.api.access``) writes a line for every request only when
that logger is enabled for INFO (``configure_logging(access_log=True)``, or a test's
``caplog``); responses with a 5xx status are always logged, at ERROR. The check comes
before the line is built: building and writing a JSON line per request cost ~25% of a
``/healthz`` request's CPU (0.40 -> 0.29-0.35 CPU-s per 1000 requests at 16 connections).
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import re
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .logs import ACCESS_LOGGER, request_id_var
from .problems import BODY_TOO_LARGE, ProblemError, problem_body

log = logging.getLogger(ACCESS_LOGGER)

# A client-sent id is kept only if it is short and plain, so it is safe in logs and headers.
_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


class RequestIdSource:
    """Fresh request ids with no syscall per request: a random process prefix and a counter.

    An id is 32 hex characters, like the ``uuid4().hex`` it replaces (``uuid4`` reads
    ``os.urandom`` per call: ~3% of the API's CPU under load): 64 random bits drawn once
    per process (and again in a forked child), then a 64-bit counter. Two processes, or
    one process before and after a restart, share a prefix with odds of about 2**-64 per
    pair, so ids stay unique across processes and restarts; the counter cannot wrap in
    practice (2**64 requests).
    """

    def __init__(self, prefix: str | None = None) -> None:
        self._prefix = ""
        self._counter = itertools.count()
        self.reseed(prefix)

    def reseed(self, prefix: str | None = None) -> None:
        """Start a new sequence under ``prefix`` (16 hex characters; random by default)."""
        if prefix is not None and not re.fullmatch(r"[0-9a-f]{16}", prefix):
            raise ValueError("prefix must be 16 lowercase hex characters")
        self._prefix = prefix if prefix is not None else os.urandom(8).hex()
        self._counter = itertools.count()

    @property
    def prefix(self) -> str:
        return self._prefix

    def next_id(self) -> str:
        return f"{self._prefix}{next(self._counter):016x}"


_request_ids = RequestIdSource()
# A forked child (a pre-fork server) must not repeat its parent's sequence.
os.register_at_fork(after_in_child=_request_ids.reseed)


def choose_request_id(client_value: str | None) -> str:
    """The client's X-Request-ID when it is acceptable, otherwise a fresh one."""
    if client_value and _CLIENT_REQUEST_ID.match(client_value):
        return client_value
    return _request_ids.next_id()


def scope_header(scope: Scope, name: bytes) -> str | None:
    """The first value of header ``name`` (lower-case bytes) in an ASGI scope."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


class RequestContextMiddleware:
    """Accept or generate X-Request-ID, echo it, log the request (see the module doc)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = choose_request_id(scope_header(scope, b"x-request-id"))
        scope.setdefault("state", {})["request_id"] = request_id
        token = request_id_var.set(request_id)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", ())
                           if k.lower() != b"x-request-id"]
                headers.append((b"x-request-id", request_id.encode("latin-1")))
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            level = logging.ERROR if status >= 500 else logging.INFO
            if log.isEnabledFor(level):
                route = scope.get("route")
                log.log(level, "request", extra={
                    "request_id": request_id, "method": scope.get("method"),
                    "path": scope.get("path"), "route": getattr(route, "path", None),
                    "status": status,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 3),
                    "user_id": scope.get("state", {}).get("user_id")})
            request_id_var.reset(token)


class BodyLimitMiddleware:
    """Refuse request bodies over ``max_bytes`` with 413, declared or streamed."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = scope_header(scope, b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(send)
            return
        seen = 0

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise ProblemError(BODY_TOO_LARGE, f"at most {self.max_bytes} bytes")
            return message

        await self.app(scope, counting_receive, send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(problem_body(BODY_TOO_LARGE, f"at most {self.max_bytes} bytes")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/problem+json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
