"""The window check: what Postgres says now of one page window, for window mode.

When the visibility log holds more entries than ``FEED_VISIBILITY_MAX_ENTRIES`` (the
verifier has been stopped for long: docs/read-path.md), the fence drops its fold and each
page asks Postgres for its own window instead: one prepared statement over the window's
post ids and authors against ``posts``, ``follows``, ``blocks``, ``mutes`` and
``account_states``. Its answer is a
``ReaderChanges`` like the fold's, so ``judge`` is unchanged: a post deleted or removed,
an author not followed (or followed only after the post), an author blocked either way
or muted by the reader is hidden from the home feed, whatever the copies say (an author's
timeline and lists consult its blocks only: ``ReaderChanges.hides_post``, ``.blocked``).
It goes out after the page arrived, so it honours
every write acknowledged before, as the fence's read does.

Cost: one round trip and a few index probes per window (~30 ids), instead of one shared
read per group of concurrent pages; the fence's normal mode exists because this is
dearer under load.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Sequence

from psycopg_pool import AsyncConnectionPool

from .recent_changes import FollowState, ReaderChanges

# kind 'p': a hidden post; 'f': a follow of a window author (its since, Unix ms); 'b': an
# kind 'p': a hidden post; 'f': a follow of a window author (its since, Unix ms); 'b': an
# author blocked either way; 'm': an author muted by the reader (one way: the muted
# author's pages still show the muter); 'a': an author whose account is suspended or
# deleted.
WINDOW_SQL = """
SELECT 'p', post_id, NULL::bigint FROM posts
 WHERE post_id = ANY(%(posts)s) AND (deleted_at IS NOT NULL OR visibility <> 1)
UNION ALL
SELECT 'f', followed_id, floor(extract(epoch FROM following_since) * 1000)::bigint FROM follows
 WHERE follower_id = %(reader)s AND followed_id = ANY(%(authors)s)
UNION ALL
SELECT 'b', blocked_id, NULL FROM blocks WHERE blocker_id = %(reader)s AND blocked_id = ANY(%(authors)s)
UNION ALL
SELECT 'b', blocker_id, NULL FROM blocks WHERE blocked_id = %(reader)s AND blocker_id = ANY(%(authors)s)
UNION ALL
SELECT 'm', muted_id, NULL FROM mutes WHERE muter_id = %(reader)s AND muted_id = ANY(%(authors)s)
UNION ALL
SELECT 'a', user_id, NULL FROM account_states WHERE user_id = ANY(%(authors)s)
"""


def window_changes(authors: Sequence[int], rows: Sequence[tuple[str, int, int | None]]) -> ReaderChanges:
    """The answer as the view ``judge`` consults: every window author has a follow state
    (None: not followed now), hidden posts, blocked and muted authors as found. Pure."""
    hidden: dict[int, int] = {}
    follows: dict[int, FollowState] = dict.fromkeys(authors)
    blocked: set[int] = set()
    muted: set[int] = set()
    accounts: set[int] = set()
    for kind, key, since in rows:
        if kind == "p":
            hidden[key] = 0
        elif kind == "f":
            follows[key] = since or 0
        elif kind == "m":
            muted.add(key)
        elif kind == "a":
            accounts.add(key)
        else:
            blocked.add(key)
    return ReaderChanges(hidden, follows, frozenset(blocked), frozenset(muted),
                         hidden_authors=frozenset(accounts))


def pool_window_check(pool: AsyncConnectionPool[Any],
                      ) -> Callable[[int, Sequence[tuple[int, int]]], Awaitable[ReaderChanges]]:
    """``VisibilityFence``'s window check on the API's Postgres pool."""
    async def check(reader_id: int, items: Sequence[tuple[int, int]]) -> ReaderChanges:
        post_ids = [p for p, _a in items]
        authors = list(dict.fromkeys(a for _p, a in items))
        async with pool.connection() as conn:
            cur = await conn.execute(WINDOW_SQL, {"posts": post_ids, "authors": authors,
                                                  "reader": reader_id}, prepare=True)
            rows = await cur.fetchall()
        return window_changes(authors, rows)
    return check
