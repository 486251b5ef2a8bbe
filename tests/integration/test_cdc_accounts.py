"""What data teams see of an account deletion and a suspension on the CDC topics (real
Postgres, the real relay, Kafka): the deletion's transaction is a Debezium delete of the
users row with its tombstone, the removals of its follows and likes (each with its
tombstone) and an ``account_states`` create; a suspension is an ``account_states``
create, an unsuspend its delete and tombstone."""
from __future__ import annotations

import asyncio

from services.api.stores import accounts
from services.shared.clients import pg
from services.shared.settings import Settings
from tests.support.cdc_relay import changes, consume, wait_streaming


async def _delete(source: Settings, user_id: int) -> None:
    conn = await pg.async_connect(source, autocommit=True)
    try:
        async with conn.transaction():
            assert await accounts.delete_account(conn, user_id)
    finally:
        await conn.close()


def test_a_deletion_is_a_users_delete_with_its_tombstone_and_a_suspension_an_account_row(
        source: Settings, relays) -> None:
    relays(source)
    wait_streaming(source)
    with pg.connect(source, autocommit=True) as conn:
        conn.execute("INSERT INTO users (user_id) VALUES (1), (2), (3)")
        conn.execute("INSERT INTO posts (post_id, author_id, created_at, text) VALUES (100, 1, now(), 'x')")
        conn.execute("INSERT INTO follows VALUES (2, 1, now()), (1, 3, now())")
        conn.execute("INSERT INTO likes (post_id, user_id) VALUES (100, 1)")
        conn.execute("INSERT INTO account_states (user_id, state, moderator_id) VALUES (3, 'suspended', 2)")
        conn.execute("DELETE FROM account_states WHERE user_id = 3")
    asyncio.run(_delete(source, 1))
    # 3 users + 1 post + 2 follows + 1 like + suspend + unsuspend (+tombstone)
    # + deletion: account row, 2 follow deletes, 1 like delete, 1 user delete (+4 tombstones)
    events = consume(source, lambda ev: len(ev) >= 19)
    mine = [(e.table, e.value["op"] if e.value else None) for e in events]
    assert ("users", "d") in mine and mine.count(("users", None)) == 1, mine
    [user_delete] = [e for e in changes(events) if e.table == "users" and e.value["op"] == "d"]
    assert user_delete.key == {"user_id": 1}
    assert user_delete.value["before"]["user_id"] == 1 and user_delete.value["after"] is None
    tomb = [i for i, e in enumerate(events) if e.table == "users" and e.value is None]
    assert tomb and events[tomb[0]].key == {"user_id": 1}
    account_ops = [(e.key["user_id"], e.value["op"] if e.value else None,
                    (e.value["after"] or {}).get("state") if e.value else None)
                   for e in events if e.table == "account_states"]
    assert account_ops == [(3, "c", "suspended"), (3, "d", None), (3, None, None), (1, "c", "deleted")]
    assert sorted((e.table, e.value["op"]) for e in changes(events)
                  if e.table in ("follows", "likes") and e.value["op"] == "d") == [
        ("follows", "d"), ("follows", "d"), ("likes", "d")]
