"""The account copy as the read path consults it: which authors are hidden from everyone.

Cassandra's ``account_states`` (services/shared/stores/accounts.py) holds a row per
account suspended or deleted, written by the fan-out from Postgres's ``account_states``.
A page asks for its window's authors (one ``IN`` read of the ones it does not know) and
hides every post of the hidden ones, whatever the post copies say. Until the copy has
the row, the visibility log's 'account' entry hides them (recent_changes.py); the entry
is released only after the verifier found the copy right and it settled
(``visibility_settle_s``, 360 s), longer than ``ttl_s``, the time an answer is kept here
(``FEED_ACCOUNT_CACHE_S``, 60 s; the launcher warns about one not below the settle time). So
a suspension or a deletion is never missed by both.

Each write or delete of the copy is followed by a serving-changes notice naming the user
(``accounts``, services/fanout/account_events.py), which drops what this process keeps of
them (``drop``, called by the serving cache); a read that started before a notice and
ended after it is not kept. An answer older than ``UNHEARD_TTL_S`` (2 s) is used only
while the notices are heard (``live``: the serving cache's own test, every partition heard
within ``FEED_CACHE_MAX_SILENCE_S``); a process whose notice consumer is silent or
stopped, or that has none, uses an answer for 2 s as before. So an unsuspend shows the
posts again once the copy's delete and its notice have landed (the pipeline's lag), and
a kept "not hidden" is never older than the notice's way here while it is used past 2 s:
the verifier releases a suspension's entry only ``visibility_settle_s`` after it found the
copy written, and that write's notice came first. (At 2 s for every process, a page whose authors' answers
had run out read the copy again: with names kept 2 s too, a third of the stores' CPU a
page and 7-11 % of the API's on the demo graph, bench/results/2026-12-07-account-names-keep-ab/.)

A failed read raises ``AccountsUnavailable``: without it a page could show a suspended
author's posts once the log released its entry.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable

from cassandra.cluster import Session

from services.shared.stores.accounts import AccountRow, ReadPathAccounts

from .drops import Drops
from .store import StatementRunner

# Seconds an author's state is kept by a process that hears no notices.
UNHEARD_TTL_S = 2.0
CAPACITY = 100_000


class AccountsUnavailable(RuntimeError):
    """The account copy could not be read."""


class AccountCopies:
    def __init__(self, session: Session, runner: StatementRunner, ttl_s: float = UNHEARD_TTL_S,
                 capacity: int = CAPACITY, clock: Callable[[], float] = time.monotonic,
                 live: Callable[[], bool] = lambda: False) -> None:
        self._statements = ReadPathAccounts(session)
        self._run = runner
        self._ttl_s = ttl_s
        self._capacity = capacity
        self._clock = clock
        self._live = live
        # author -> (expires, hidden, expires unless notices are heard)
        self._known: dict[int, tuple[float, bool, float]] = {}
        self._drops = Drops()

    def drop(self, user_ids: Iterable[int] | None) -> None:
        """A notice named ``user_ids`` (None: everything, a cleared serving cache)."""
        self._drops.named(user_ids)
        if user_ids is None:
            self._known.clear()
            return
        for user_id in user_ids:
            self._known.pop(user_id, None)

    def held(self, authors: Iterable[int]) -> frozenset[int] | None:
        """``hidden_among`` from what is kept alone (no ``None`` among ``authors``), or
        None when an author's state must be read: a window whose authors are all known
        needs no coroutine."""
        now = self._clock()
        known = self._known
        live: bool | None = None
        hidden: list[int] = []
        for author in authors:
            held = known.get(author)
            if held is None or held[0] <= now:
                return None
            if held[2] <= now:
                if live is None:
                    live = self._live()
                if not live:
                    return None
            if held[1]:
                hidden.append(author)
        return frozenset(hidden)

    async def hidden_among(self, authors: Iterable[int | None]) -> frozenset[int]:
        """The authors among ``authors`` whose account the copy says is hidden."""
        now = self._clock()
        live: bool | None = None
        hidden: set[int] = set()
        unknown: list[int] = []
        for author in set(a for a in authors if a is not None):
            held = self._known.get(author)
            if held is not None and held[2] <= now < held[0]:
                if live is None:
                    live = self._live()
                if not live:
                    held = None
            if held is None or held[0] <= now:
                unknown.append(author)
            elif held[1]:
                hidden.add(author)
        if unknown:
            drops = self._drops
            epoch = drops.epoch
            try:
                rows = await self._run.run(self._statements.hidden_in, (sorted(unknown),), hedge=True)
            except Exception as exc:  # noqa: BLE001 - a timeout or an unreachable node
                raise AccountsUnavailable("the account copy could not be read") from exc
            found = {AccountRow._make(r).user_id for r in rows}
            hidden |= found
            if len(self._known) + len(unknown) > self._capacity:
                self._known.clear()
            expires, unheard = now + self._ttl_s, now + min(self._ttl_s, UNHEARD_TTL_S)
            for author in unknown:
                if drops.untouched(author, epoch):  # no notice since the read started
                    self._known[author] = (expires, author in found, unheard)
        return frozenset(hidden)
