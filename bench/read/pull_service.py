"""The pull baseline: a plain fan-out-on-read feed service on the same Postgres.

    FEED_PG_DATABASE=<db> .venv/bin/python -m bench.read.pull_service --port 8090
        [--query lateral|join] [--workers 1]

``GET /v1/feed?limit&cursor`` answered by one prepared query per page (the specified
pull query: posts JOIN follows, with text, blocks both ways, ``following_since``, ``deleted_at IS NULL``
and ``visibility = 1``, ``ORDER BY created_at DESC, post_id DESC``, keyset cursor) on the
same stack as ours: FastAPI + uvicorn (uvloop, httptools with a response's writes sent as
one: services/api/http/one_write.py, 1 worker by default), orjson
bodies, a psycopg async pool of ``Settings.api_pg_pool_max`` connections, and the same
HS256 JWT check (``services.api.http.auth.verify_token``, PyJWT). ``GET /healthz`` is its
empty endpoint. Nothing is cached: every page is one query, as a pull service is.

It is the baseline, so it gets every advantage a real one would have:

* two shapes of the same query (same rows, same order): ``join`` is the specified query
  as written (the planner walks every followed author's whole history and sorts it); ``lateral``
  reads at most ``limit`` rows per followed author from the covering index and merges
  them (cost bounded by follows x limit, flat in history length);
* ``BASELINE_INDEXES``: a partial covering index for the visible posts of an author in
  feed order with the text (index-only scans), and the reader's follows with
  ``following_since`` (created by the bench in its own database only:
  ``create_baseline_indexes``); the blocks primary key and ``blocks_reverse`` (0001_core)
  serve both block directions;
* prepared statements on every pooled connection, JIT off (a JIT compile costs more
  than a whole page here), no request logging, FastAPI's telemetry off, no middleware but
  ``FastFeed``: the same ASGI fast path for a well-formed ``GET /v1/feed`` as ours, outside
  FastAPI's own layers as ours is, and the same memory of verified tokens
  (``VerifiedTokens``).

Cursor: ``<payload>.<mac>`` base64url, payload = reader, created_at (µs), post_id; HMAC-SHA256
with the first ``Settings.cursor_keys`` secret, bound to the reader (a tampered or another
reader's cursor is a 400): the same work per next page as our signed cursor.
"""
from __future__ import annotations

import argparse
import base64
import hmac
import os
from datetime import datetime, timezone
from typing import Annotated, Any

import orjson
import psycopg
import uvicorn
from fastapi import FastAPI, Header, Query, Response
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from services.api.app import NO_OTEL
from services.api.http.auth import TokenRejected, VerifiedTokens
from services.api.http.one_write import PROTOCOL as ONE_WRITE
from services.api.routes.feed_fast import feed_query as parse_feed_query
from services.shared.clients import pg
from services.shared.domain.rules import VISIBLE
from services.shared.settings import Settings, get_settings

# Same page size and cap as ours (services/api/routes/feed.py).
DEFAULT_LIMIT, MAX_LIMIT = 20, 100
# How long a request waits for a pooled connection before it is shed with 503 +
# Retry-After (what ours does when a store is slow): well past any page's time here,
# short of wrk's 5 s request timeout, so overload shows as 503s, not client timeouts.
POOL_WAIT_S = 3.0
QUERY_SHAPES = ("lateral", "join")
# How ``main`` tells worker processes the query shape.
SHAPE_ENV = "PULL_QUERY_SHAPE"

_VISIBLE = f"p.deleted_at IS NULL AND p.visibility = {VISIBLE}"
_NOT_BLOCKED = ("NOT EXISTS (SELECT 1 FROM blocks b WHERE b.blocker_id = f.follower_id "
                "AND b.blocked_id = f.followed_id) AND NOT EXISTS (SELECT 1 FROM blocks b "
                "WHERE b.blocker_id = f.followed_id AND b.blocked_id = f.follower_id)")
_AFTER = "AND (p.created_at, p.post_id) < (%(at)s, %(pid)s)"
_ORDER = "ORDER BY p.created_at DESC, p.post_id DESC LIMIT %(limit)s"
_COLUMNS = "p.post_id, p.author_id, p.text, p.created_at"


def feed_query(shape: str, next_page: bool) -> str:
    """The page query; parameters ``reader``, ``limit`` and, for a next page, ``at``/``pid``."""
    after = _AFTER if next_page else ""
    if shape == "join":
        return (f"SELECT {_COLUMNS} FROM posts p JOIN follows f ON f.followed_id = p.author_id "
                f"WHERE f.follower_id = %(reader)s AND p.created_at >= f.following_since "
                f"AND {_VISIBLE} AND {_NOT_BLOCKED} {after} {_ORDER}")
    if shape == "lateral":
        return (f"SELECT {_COLUMNS} FROM follows f CROSS JOIN LATERAL (SELECT {_COLUMNS} "
                f"FROM posts p WHERE p.author_id = f.followed_id "
                f"AND p.created_at >= f.following_since AND {_VISIBLE} {after} {_ORDER}) p "
                f"WHERE f.follower_id = %(reader)s AND {_NOT_BLOCKED} {_ORDER}")
    raise ValueError(f"query shape must be one of {QUERY_SHAPES}")


BASELINE_INDEXES = (
    "CREATE INDEX IF NOT EXISTS pull_posts_visible_feed ON posts "
    "(author_id, created_at DESC, post_id DESC) INCLUDE (text) "
    f"WHERE deleted_at IS NULL AND visibility = {VISIBLE}",
    "CREATE INDEX IF NOT EXISTS pull_follows_reader ON follows "
    "(follower_id) INCLUDE (followed_id, following_since)",
)


def create_baseline_indexes(conn: psycopg.Connection) -> None:
    """The baseline's extra indexes, then fresh statistics and a visibility map (for
    index-only scans). Run by the bench on its own database only."""
    for ddl in BASELINE_INDEXES:
        conn.execute(ddl)
    conn.execute("VACUUM ANALYZE posts")
    conn.execute("VACUUM ANALYZE follows")
    conn.execute("VACUUM ANALYZE blocks")


class CursorCodec:
    """Signed keyset cursors bound to one reader."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _mac(self, payload: bytes) -> bytes:
        return hmac.digest(self._secret, payload, "sha256")  # OpenSSL's one-shot, as ours

    def encode(self, reader: int, created_at: datetime, post_id: int) -> str:
        micros = int(created_at.timestamp() * 1_000_000)
        payload = f"{reader}:{micros}:{post_id}".encode()
        return f"{_b64(payload)}.{_b64(self._mac(payload))}"

    def decode(self, reader: int, cursor: str) -> tuple[datetime, int]:
        """``(created_at, post_id)`` of the page's last item; ValueError if not ours."""
        try:
            payload_part, mac_part = cursor.split(".")
            payload = _unb64(payload_part)
            if not hmac.compare_digest(_unb64(mac_part), self._mac(payload)):
                raise ValueError("bad signature")
            owner, micros, post_id = (int(x) for x in payload.decode().split(":"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError("cursor is not valid") from exc
        if owner != reader:
            raise ValueError("cursor belongs to another reader")
        return datetime.fromtimestamp(micros / 1_000_000, tz=timezone.utc), post_id


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _problem(status: int, detail: str, headers: dict[str, str] | None = None
             ) -> tuple[int, bytes, str, dict[str, str]]:
    return (status, orjson.dumps({"status": status, "detail": detail}), "application/problem+json",
            headers or {})


class FastFeed:
    """``GET /v1/feed`` straight from ASGI, as ours does (``services/api/routes/feed_fast.py``):
    a well-formed query skips FastAPI's routing and parameter solving; anything else goes
    to the FastAPI route. Both call the same ``answer``."""

    def __init__(self, app: Any, answer: Any) -> None:
        self.app = app
        self.answer = answer

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        query = None
        if scope["type"] == "http" and scope["path"] == "/v1/feed" and scope["method"] == "GET":
            query = parse_feed_query(scope["query_string"])
        if query is None:
            await self.app(scope, receive, send)
            return
        authorization = next((v.decode("latin-1") for k, v in scope["headers"]
                              if k == b"authorization"), None)
        limit, cursor, _order = query  # one order only: newest first (the specified query)
        status, body, media_type, headers = await self.answer(authorization, limit, cursor)
        raw = [(b"content-length", str(len(body)).encode()), (b"content-type", media_type.encode())]
        raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body})


def create_app(settings: Settings, shape: str) -> FastAPI:
    """The pull service's app: one pool opened at startup, two prepared statements."""
    first_sql, next_sql = feed_query(shape, False), feed_query(shape, True)
    secret = settings.jwt_secret.get_secret_value()
    tokens = VerifiedTokens()  # the same verified-token memory as ours
    cursors = CursorCodec(settings.cursor_keys.get_secret_value().split(",")[0]
                          .partition(":")[2].encode())

    async def configure(conn: psycopg.AsyncConnection) -> None:
        await conn.set_autocommit(True)
        await conn.execute("SET jit = off")
        if shape == "join":  # one generic plan cannot suit readers of 10 and 2,000 follows
            await conn.execute("SET plan_cache_mode = force_custom_plan")

    pool = pg.async_pool(settings, min_size=settings.api_pg_pool_max,
                         max_size=settings.api_pg_pool_max,
                         configure=configure, timeout=POOL_WAIT_S,
                         check=AsyncConnectionPool.check_connection)

    async def lifespan(_: FastAPI):  # type: ignore[no-untyped-def]
        await pool.open(wait=True, timeout=30)
        yield
        await pool.close()

    async def answer(authorization: str | None, limit: int, cursor: str | None
                     ) -> tuple[int, bytes, str, dict[str, str]]:
        scheme, _, token = (authorization or "").partition(" ")
        try:
            reader = tokens.verify(token, secret).user_id if scheme == "Bearer" else None
        except TokenRejected as exc:
            return _problem(401, str(exc), {"WWW-Authenticate": 'Bearer realm="feed"'})
        if reader is None:
            return _problem(401, "missing bearer token", {"WWW-Authenticate": 'Bearer realm="feed"'})
        params: dict[str, Any] = {"reader": reader, "limit": limit}
        if cursor is not None:
            try:
                params["at"], params["pid"] = cursors.decode(reader, cursor)
            except ValueError as exc:
                return _problem(400, str(exc))
        try:
            async with pool.connection() as conn:
                cur = await conn.execute(next_sql if cursor else first_sql, params, prepare=True)
                rows = await cur.fetchall()
        except PoolTimeout:
            return _problem(503, "no database connection free", {"Retry-After": "1"})
        items = [{"post_id": str(r[0]), "author_id": str(r[1]), "text": r[2],
                  "created_at": r[3]} for r in rows]
        last = rows[-1] if len(rows) == limit else None
        body = {"items": items,
                "next_cursor": cursors.encode(reader, last[3], last[0]) if last else None}
        return 200, orjson.dumps(body), "application/json", {}

    class PullApi(FastAPI):
        """``FastFeed`` outside FastAPI's own stack, as ours has its fast path
        (``services.api.app.FeedApi``)."""

        def build_middleware_stack(self) -> Any:
            return FastFeed(super().build_middleware_stack(), answer=answer)

    app = PullApi(lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None,
                  telemetry=NO_OTEL)

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    @app.get("/v1/feed")
    async def feed(authorization: Annotated[str | None, Header()] = None,
                   limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
                   cursor: Annotated[str | None, Query(min_length=1, max_length=512)] = None
                   ) -> Response:
        status, body, media_type, headers = await answer(authorization, limit, cursor)
        return Response(body, status_code=status, media_type=media_type, headers=headers)

    return app


def worker_app() -> FastAPI:
    """The app of one worker process (uvicorn factory, ``--workers`` > 1)."""
    return create_app(get_settings(), os.environ.get(SHAPE_ENV, "lateral"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--query", choices=QUERY_SHAPES, default="lateral")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    common = {"host": args.host, "port": args.port, "loop": "uvloop", "http": ONE_WRITE,
              "log_config": None, "access_log": False}
    if args.workers <= 1:
        uvicorn.run(create_app(get_settings(), args.query), **common)
        return
    os.environ[SHAPE_ENV] = args.query
    uvicorn.run("bench.read.pull_service:worker_app", factory=True, workers=args.workers, **common)


if __name__ == "__main__":
    main()
