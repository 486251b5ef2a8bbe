"""Request ids, and reading a header from an ASGI scope.

``edge.Edge`` gives every request its id (``choose_request_id``); the access log line and
the body limit are there too.
"""
from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable

from starlette.types import Scope

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
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", ())
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None
