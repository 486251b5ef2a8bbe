"""``GET /v1/feed`` for well-formed requests, without FastAPI's routing and dependency solving.

A feed page is the request the product exists for (~1,000 per post), and at 16
connections the framework around it cost more than the page: py-spy on a first page put
dependency solving (the bearer scheme, ``CurrentUser``, two query parameters) at ~10 %
of the API's samples, route matching and the exception/exit-stack layers at another
~8 %. This ASGI layer, right inside ``edge.Edge`` and outside FastAPI's own stack
(``app.FeedApi``), answers a request itself only when everything FastAPI would check
is already settled:

- the method is GET and the path exactly ``/v1/feed``;
- the bearer token is one this app verified before and is still valid: not expired,
  its JWKS key (if any) still published (``auth.known_principal``), and its user is
  known to exist (``KnownUsers``);
- the query holds ``limit`` (1-3 digits within 1..MAX_LIMIT), ``cursor`` (1 to
  MAX_CURSOR_CHARS characters) and ``order`` (``ranked`` or ``latest``) at most once
  each; other parameters are ignored, as FastAPI ignores them.

Anything else (no or new token, an unknown user, a bad or repeated parameter, no feed
reader) goes on to the FastAPI route, which gives the documented answer or problem. The
page itself is ``routes.feed.serve``, the route's own code, so a response does not
depend on which way it went; the route object is put in the scope, so metrics and the
access log label the request ``/v1/feed`` as usual, and an unexpected error is the same
500 problem FastAPI's handler gives (``problems.unexpected_response``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from services.api.http.auth import known_principal
from services.api.http.problems import ProblemError, problem_response, unexpected_response
from services.api.http.request_context import scope_header
from services.api.snapshots.cursor import MAX_CURSOR_CHARS, ORDERS

from .feed import DEFAULT_LIMIT, FEED_PATH, MAX_LIMIT, router, serve

if TYPE_CHECKING:
    from services.api.feed.reader import FeedReader

_JSON_HEADERS = [(b"content-type", b"application/json")]


def feed_query(query_string: bytes) -> tuple[int, str | None, str | None] | None:
    """``(limit, cursor, order)`` when the query is one the route would accept as is;
    None when the route must decide (it then answers 422, or takes the value its own way)."""
    limit, cursor, order = DEFAULT_LIMIT, None, None
    seen: set[str] = set()
    for key, value in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True):
        if key not in ("limit", "cursor", "order"):
            continue
        if key in seen:
            return None
        seen.add(key)
        if key == "limit":
            if not (value.isascii() and value.isdigit() and len(value) <= 3):
                return None
            limit = int(value)
            if not 1 <= limit <= MAX_LIMIT:
                return None
        elif key == "order":
            if value not in ORDERS:
                return None
            order = value
        else:
            if not 1 <= len(value) <= MAX_CURSOR_CHARS:
                return None
            cursor = value
    return limit, cursor, order


def bearer_token(scope: Scope) -> str | None:
    scheme, _, token = (scope_header(scope, b"authorization") or "").partition(" ")
    return token if scheme.lower() == "bearer" and token else None


class FeedFastPath:
    """See the module docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._route = next(r for r in router.routes
                           if isinstance(r, APIRoute) and r.path == FEED_PATH
                           and r.methods is not None and "GET" in r.methods)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != FEED_PATH or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        state = scope["app"].state
        reader: FeedReader | None = getattr(state, "feed", None)
        token = bearer_token(scope)
        query = feed_query(scope["query_string"])
        principal = None
        if reader is not None and token is not None and query is not None:
            principal = known_principal(token, state)
        if principal is None or not state.known_users.touch(principal.user_id):
            await self.app(scope, receive, send)
            return
        assert reader is not None and query is not None  # a principal is looked up only with both
        scope["route"] = self._route
        scope.setdefault("state", {})["user_id"] = str(principal.user_id)
        try:
            body = await serve(reader, principal.user_id, *query)
        except ProblemError as exc:
            response = problem_response(exc.kind, exc.detail, request=Request(scope),
                                        headers=exc.headers, **exc.extra)
            await response(scope, receive, send)
            return
        except Exception as exc:  # noqa: BLE001 - outside FastAPI's server-error layer
            await unexpected_response(Request(scope), exc)(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode()), *_JSON_HEADERS]})
        await send({"type": "http.response.body", "body": body})
