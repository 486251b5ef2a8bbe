"""The ``posts`` table: insert, read with the viewer's block state, soft delete."""
from __future__ import annotations

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from services.api.write.visibility import StoredPost


async def insert(conn: AsyncConnection, post: StoredPost) -> None:
    await conn.execute(
        "INSERT INTO posts (post_id, author_id, created_at, text, media_ids) "
        "VALUES (%s, %s, %s, %s, %s)",
        (post.post_id, post.author_id, post.created_at, post.text, Jsonb(post.media_ids)))


async def fetch_for_viewer(conn: AsyncConnection, post_id: int,
                           viewer_id: int) -> tuple[StoredPost, bool] | None:
    """The post and whether it is hidden from the viewer by its author: a block either
    way, or the author's account suspended or deleted (account_states, migration 0006)."""
    row = await (await conn.execute(
        "SELECT p.post_id, p.author_id, p.text, p.media_ids, p.created_at, p.visibility, "
        "p.deleted_at, EXISTS (SELECT 1 FROM blocks b WHERE "
        "(b.blocker_id = %(viewer)s AND b.blocked_id = p.author_id) OR "
        "(b.blocker_id = p.author_id AND b.blocked_id = %(viewer)s)) "
        "OR EXISTS (SELECT 1 FROM account_states a WHERE a.user_id = p.author_id) "
        "FROM posts p WHERE p.post_id = %(post)s",
        {"post": post_id, "viewer": viewer_id})).fetchone()
    if row is None:
        return None
    return StoredPost(*row[:7]), bool(row[7])


async def lock_author(conn: AsyncConnection, post_id: int) -> tuple[int, bool] | None:
    """Lock the post row; its author and whether it is already deleted."""
    row = await (await conn.execute(
        "SELECT author_id, deleted_at IS NOT NULL FROM posts WHERE post_id = %s FOR UPDATE",
        (post_id,))).fetchone()
    return None if row is None else (row[0], row[1])


async def soft_delete(conn: AsyncConnection, post_id: int) -> None:
    await conn.execute("UPDATE posts SET deleted_at = now() "
                       "WHERE post_id = %s AND deleted_at IS NULL", (post_id,))
