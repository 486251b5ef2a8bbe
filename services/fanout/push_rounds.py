"""``PushRounds``: the inbox rows of a posts batch's recent posts, written together and
grouped by reader (docs/fanout.md, "The backlog intake").

Each recent post of a batch reaches its push after its own steps (copy, key, mark,
audience), and waits for its rows to be stored before it checks the cap and announces
the post. A push here joins the current round instead of leaving on its own. The round
leaves once every change being applied (``applying``) has joined it or finished, since
nothing else could still join it; then its rows go out sorted by reader
(``InboxPort.push_many``). A reader's rows of all those posts travel in one batch, so
the node applies them as one partition mutation instead of one per row. Rows shaped like
the month of history's (233 recent posts of a batch, 100 of 6,250 readers each) cost the
node 4.4-6.1 µs a row this way, against 11.4-11.5 post by post.

What stays as it was:
- the rows: the same statements, values and write times as each ``push`` alone;
- the order of steps: a post resumes only once its rows are stored, so its cap check and
  its announcement still come after them;
- failures: a round that fails fails every push in it with the same error. Each post
  retries its page as before (``StoreRetry``), and that one timeout halves the capacity
  estimate once (``PostFanout._store_timed_out``).

No post waits for one that never pushes: the round also leaves ``max_wait_s`` after its
first push, or at once past ``max_rows``. A push outside ``applying`` (nothing counted,
so nothing to wait for) is written alone. At low load a batch holds one post, which is
the whole round, so it waits for nothing.
"""
from __future__ import annotations

import asyncio
from contextlib import contextmanager
from typing import Iterator, Sequence

from .inbox import InboxPort, InboxRow
from .metrics import PUSH_ROUND_POSTS

# A round's rows at most (memory, and a bound on what one failure redoes): the history's
# batches carry ~23,000.
MAX_ROWS = 50_000
# Seconds a round waits at most after its first push for the other changes being applied.
MAX_WAIT_S = 1.0


class PushRounds:
    """One per posts agent: the changes its batches apply, counted, and their pushes."""

    def __init__(self, inbox: InboxPort, *, max_rows: int = MAX_ROWS,
                 max_wait_s: float = MAX_WAIT_S) -> None:
        self._inbox = inbox
        self._max_rows = max(1, max_rows)
        self._max_wait_s = max_wait_s
        self._active = 0  # changes being applied
        self._joined: list[tuple[Sequence[int], InboxRow, asyncio.Future[int]]] = []
        self._rows = 0
        self._timer: asyncio.TimerHandle | None = None
        self._check_queued = False
        self._sending: set[asyncio.Task[None]] = set()  # the loop keeps only weak references
        self.rounds = 0  # rounds sent (the tests read it)

    @contextmanager
    def applying(self) -> Iterator[None]:
        """Around one change being applied: a round waits for it to push or finish."""
        self._active += 1
        try:
            yield
        finally:
            self._active -= 1
            self._check_soon()

    async def push(self, readers: Sequence[int], row: InboxRow) -> int:
        """``InboxPort.push`` of ``row`` to ``readers``, in the current round; rows written."""
        if self._active <= 0:
            return await self._inbox.push_many([(readers, row)])
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()
        self._joined.append((readers, row, done))
        self._rows += len(readers)
        if self._timer is None:
            self._timer = loop.call_later(self._max_wait_s, self._send)
        if self._rows >= self._max_rows:
            self._send()
        else:
            self._check_soon()
        # Shielded: a push given up (its batch stopped) leaves the round's outcome to the rest.
        return await asyncio.shield(done)

    def _check_soon(self) -> None:
        """Whether the round may leave, decided on the next turn of the loop: a change that
        is about to enter (the key's next change, the pool's next key, a task started in
        the same turn) enters before it, without a wait in between, and a round that
        left now would leave it out."""
        if self._joined and not self._check_queued:
            self._check_queued = True
            asyncio.get_running_loop().call_soon(self._check)

    def _check(self) -> None:
        self._check_queued = False
        if self._joined and len(self._joined) >= self._active:
            self._send()

    def _send(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        joined, self._joined, self._rows = self._joined, [], 0
        if not joined:
            return
        self.rounds += 1
        PUSH_ROUND_POSTS.observe(len(joined))
        task = asyncio.ensure_future(self._write(joined))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _write(self, joined: list[tuple[Sequence[int], InboxRow, asyncio.Future[int]]]) -> None:
        try:
            await self._inbox.push_many([(readers, row) for readers, row, _ in joined])
        except BaseException as exc:  # every push of the round fails with it
            for _readers, _row, done in joined:
                if not done.done():
                    done.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for readers, row, done in joined:
            if not done.done():
                done.set_result(len(readers) if row.ttl_s > 0 else 0)
