"""Rank-key moves: the ranker moved a post's key; move its rows to match.

One ``RankKeyMoved`` (services/shared/contracts/rank_moves.py) moves the post's author-timeline row
and, when the post was fanned out, its row in each reader's inbox: per reader, the old
key's tombstone and the new row go in one single-partition batch at the move's
``key_ts``. The audience is the fan-out's own (``readers_for_post``: followers by the
time of the post, not blocked), so a reader the fan-out has not reached yet gets the
new key now and the fan-out's later write of the old key is shadowed (older timestamp).
Then the copy's ``rank_key`` takes the new key at ``key_ts`` (last write wins, so an
old move applied after a newer one changes nothing there either).

Bounded: only ordinary authors' posts have inbox rows (the tier boundary caps their
audience), and the ranker moves a post only when its key changed by
``ranking.MOVE_THRESHOLD``. A post no longer visible is not moved (its rows were
tombstoned by the removal; moving would bring them back).
"""
from __future__ import annotations

from datetime import datetime
from typing import Awaitable, Callable

from services.shared.contracts.rank_moves import RankKeyMoved

from .audience import inbox_ttl_s, readers_for_post
from .copies import CopyStore
from .inbox import InboxPort
from .metrics import RANK_MOVE_ROWS


class RankMoves:
    def __init__(self, copies: CopyStore, inbox: InboxPort, clock: Callable[[], datetime],
                 inactive: Callable[[int], Awaitable[frozenset[int]]] | None = None) -> None:
        self._copies = copies
        # Inactive followers get no inbox rows, so no moved ones either (inactive.py).
        self._inactive = inactive
        self._inbox = inbox
        self._clock = clock

    async def on_rank_key_moved(self, move: RankKeyMoved) -> int:
        """Apply one move; returns the inbox rows rewritten."""
        copy = await self._copies.read_post(move.post_id)
        if copy is None or not copy.alive:
            return 0
        from_keys = tuple(dict.fromkeys(move.from_keys + tuple(copy.row_keys)))
        await self._copies.move_author_post(move.author_id, move.post_id, from_keys,
                                            move.to_key, move.key_ts)
        rows = await self._move_inboxes(move, from_keys) if copy.fanned_out else 0
        await self._copies.set_rank_key(move.post_id, move.to_key, move.key_ts)
        if not copy.fanned_out:
            # The fan-out may have marked the post between the read above and the key
            # write: it then read the old key and pushes rows under it. Read the mark
            # again after the key write; the fan-out reads the key again after its push
            # (post_events.py), so whichever of the two writes came second, one side sees
            # the other's and moves the rows (a tested race: docs/reliability.md).
            again = await self._copies.read_post(move.post_id)
            if again is not None and again.alive and again.fanned_out:
                rows = await self._move_inboxes(move, from_keys)
        RANK_MOVE_ROWS.observe(rows)
        return rows

    async def _move_inboxes(self, move: RankKeyMoved, from_keys: tuple[float, ...]) -> int:
        rows = 0
        ttl_s = inbox_ttl_s(move.created_at, self._clock())
        blocked = await self._copies.blocked_set(move.author_id)
        if self._inactive is not None:
            blocked = blocked | await self._inactive(move.author_id)
        async for page in self._copies.follower_pages(move.author_id):
            readers = readers_for_post(move.author_id, move.created_at, page, blocked)
            if readers:
                rows += await self._inbox.move(readers, move.post_id, move.author_id,
                                               from_keys, move.to_key, move.key_ts, ttl_s)
        return rows

