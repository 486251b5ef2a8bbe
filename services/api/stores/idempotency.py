"""The ``idempotency_keys`` table: claim, complete, release and purge."""
from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from services.api.write.idempotency import ABANDONED_CLAIM_SECONDS, KEY_TTL_SECONDS, StoredKey

log = logging.getLogger("services.api.write.idempotency")

# Expired keys are ignored on lookup at once; the purge only reclaims space. Hourly in
# batches keeps each delete short (no long locks, small WAL bursts for the CDC slot).
PURGE_INTERVAL_SECONDS = 3600
PURGE_BATCH = 5000

_CLAIM = """
INSERT INTO idempotency_keys (author_id, key, request_hash, expires_at)
VALUES (%(author)s, %(key)s, %(hash)s, now() + make_interval(secs => %(ttl)s))
ON CONFLICT (author_id, key) DO UPDATE
   SET request_hash = EXCLUDED.request_hash, status_code = NULL, response_body = NULL,
       created_at = now(), expires_at = EXCLUDED.expires_at
 WHERE idempotency_keys.expires_at <= now()
    OR (idempotency_keys.status_code IS NULL
        AND idempotency_keys.created_at < now() - make_interval(secs => %(abandoned)s))
RETURNING created_at
"""
_LOOKUP = """
SELECT request_hash, status_code, response_body, created_at FROM idempotency_keys
WHERE author_id = %s AND key = %s AND expires_at > now()
"""


async def claim(pool: AsyncConnectionPool, author_id: int, key: str,
                request_hash: str) -> datetime | StoredKey:
    """Claim the key (returns the claim's timestamp) or return the row that holds it."""
    params = {"author": author_id, "key": key, "hash": request_hash, "ttl": KEY_TTL_SECONDS,
              "abandoned": ABANDONED_CLAIM_SECONDS}
    while True:
        async with pool.connection() as conn:
            row = await (await conn.execute(_CLAIM, params)).fetchone()
            if row is not None:
                claimed_at: datetime = row[0]
                return claimed_at
            held = await (await conn.execute(_LOOKUP, (author_id, key))).fetchone()
        if held is not None:
            return StoredKey(*held)
        # Expired between the two statements: the next claim takes it over.


async def complete(conn: AsyncConnection, author_id: int, key: str, claimed_at: datetime,
                   status_code: int, body: dict[str, Any]) -> Any | None:
    """Store the response inside the caller's transaction; None if our claim is gone."""
    row = await (await conn.execute(
        "UPDATE idempotency_keys SET status_code = %s, response_body = %s "
        "WHERE author_id = %s AND key = %s AND created_at = %s AND status_code IS NULL "
        "RETURNING response_body",
        (status_code, Jsonb(body), author_id, key, claimed_at))).fetchone()
    return None if row is None else row[0]


async def release(pool: AsyncConnectionPool, author_id: int, key: str,
                  claimed_at: datetime) -> None:
    """Give up an unfinished claim so that a retry can proceed."""
    async with pool.connection() as conn:
        await conn.execute("DELETE FROM idempotency_keys WHERE author_id = %s AND key = %s "
                           "AND created_at = %s AND status_code IS NULL",
                           (author_id, key, claimed_at))


async def purge_expired(pool: AsyncConnectionPool, batch: int = PURGE_BATCH) -> int:
    """Delete expired keys in batches; return how many were deleted."""
    total = 0
    while True:
        async with pool.connection() as conn:
            cur = await conn.execute(
                "DELETE FROM idempotency_keys WHERE (author_id, key) IN ("
                "SELECT author_id, key FROM idempotency_keys WHERE expires_at <= now() "
                "LIMIT %s)", (batch,))
            deleted = cur.rowcount
        total += deleted
        if deleted < batch:
            return total


async def purge_expired_periodically(app: Any) -> None:
    """Background task of the app: purge expired keys every ``PURGE_INTERVAL_SECONDS``."""
    while True:
        try:
            deleted = await purge_expired(app.state.pg)
            if deleted:
                log.info("expired idempotency keys purged", extra={"deleted": deleted})
        except Exception:  # noqa: BLE001 - a failed purge must not stop the loop
            log.warning("idempotency key purge failed", exc_info=True)
        await asyncio.sleep(PURGE_INTERVAL_SECONDS)
