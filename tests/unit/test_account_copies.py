"""The read path's account copy (services/api/copies/accounts.py): answers kept ``ttl_s``
but used past 2 s only while the notices are heard, dropped at once by a serving-changes
notice naming the user (``accounts``, passed on by the serving cache), and never kept
from a read that overlapped such a notice."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.api.copies.accounts import AccountCopies, AccountsUnavailable
from services.shared.contracts.serving_changes import ServingChange
from tests.support.serving_cache_fakes import make

HIDDEN, SHOWN = 11, 12


class _Copy:
    """Cassandra's ``account_states`` as the read sees it: the hidden users' rows."""

    def __init__(self, hidden: set[int]) -> None:
        self.hidden = hidden
        self.reads = 0
        self.during: Any = None   # called while a read is on the wire
        self.fail = False

    async def run(self, _statement: Any, params: tuple[list[int]], hedge: bool = False) -> list[tuple]:
        self.reads += 1
        if self.during is not None:
            self.during()
        if self.fail:
            raise TimeoutError("read timed out")
        return [(u, "suspended") for u in params[0] if u in self.hidden]


def _accounts(copy: _Copy, ttl_s: float, clock: list[float], live: list[bool] | None = None) -> AccountCopies:
    heard = live if live is not None else [True]
    return AccountCopies(_Session(), copy, ttl_s, clock=lambda: clock[0],  # type: ignore[arg-type]
                         live=lambda: heard[0])


class _Session:
    def prepare(self, _cql: str) -> object:
        return object()


@pytest.fixture
def clock() -> list[float]:
    return [100.0]


def test_answers_are_kept_ttl_s_then_read_again(clock: list[float]) -> None:
    copy = _Copy({HIDDEN})
    accounts = _accounts(copy, 60.0, clock)
    assert asyncio.run(accounts.hidden_among([HIDDEN, SHOWN, None])) == {HIDDEN}
    assert accounts.held([HIDDEN, SHOWN]) == {HIDDEN}
    clock[0] += 59.0
    assert asyncio.run(accounts.hidden_among([HIDDEN, SHOWN])) == {HIDDEN}
    assert copy.reads == 1
    clock[0] += 1.0
    assert accounts.held([SHOWN]) is None
    asyncio.run(accounts.hidden_among([SHOWN]))
    assert copy.reads == 2


def test_past_two_seconds_an_answer_is_used_only_while_the_notices_are_heard(clock: list[float]) -> None:
    copy = _Copy({HIDDEN})
    live = [True]
    accounts = _accounts(copy, 60.0, clock, live)
    asyncio.run(accounts.hidden_among([HIDDEN, SHOWN]))
    clock[0] += 1.0
    live[0] = False                  # the notice consumer went silent
    assert accounts.held([HIDDEN, SHOWN]) == {HIDDEN}   # within 2 s: used anyway
    clock[0] += 1.5
    assert accounts.held([SHOWN]) is None               # past 2 s: not without notices
    copy.hidden = set()
    assert asyncio.run(accounts.hidden_among([HIDDEN])) == frozenset()   # read again
    assert copy.reads == 2
    live[0] = True                   # heard again: the kept answers count once more
    clock[0] += 30.0
    assert accounts.held([HIDDEN, SHOWN]) == frozenset()


def test_a_notice_drops_a_user_at_once_and_a_clear_drops_everyone(clock: list[float]) -> None:
    copy = _Copy({HIDDEN})
    accounts = _accounts(copy, 60.0, clock)
    asyncio.run(accounts.hidden_among([HIDDEN, SHOWN]))
    copy.hidden = set()       # the unsuspend's delete landed
    accounts.drop((HIDDEN,))  # ... and its notice
    assert accounts.held([SHOWN]) == frozenset()
    assert accounts.held([HIDDEN]) is None
    assert asyncio.run(accounts.hidden_among([HIDDEN])) == frozenset()
    copy.hidden = {SHOWN}
    accounts.drop(None)
    assert accounts.held([HIDDEN]) is None and accounts.held([SHOWN]) is None
    assert asyncio.run(accounts.hidden_among([SHOWN])) == {SHOWN}


def test_a_read_that_overlapped_a_notice_is_answered_but_not_kept(clock: list[float]) -> None:
    copy = _Copy({HIDDEN})
    accounts = _accounts(copy, 60.0, clock)
    copy.during = lambda: accounts.drop((HIDDEN,))   # the notice arrives mid-read
    assert asyncio.run(accounts.hidden_among([HIDDEN, SHOWN])) == {HIDDEN}
    assert accounts.held([HIDDEN]) is None           # not kept: it may predate the change
    assert accounts.held([SHOWN]) == frozenset()     # not named: kept
    copy.during = lambda: accounts.drop(None)
    clock[0] += 61.0
    asyncio.run(accounts.hidden_among([SHOWN]))
    assert accounts.held([SHOWN]) is None


def test_a_failed_read_raises_and_keeps_nothing(clock: list[float]) -> None:
    copy = _Copy({HIDDEN})
    accounts = _accounts(copy, 60.0, clock)
    copy.fail = True
    with pytest.raises(AccountsUnavailable):
        asyncio.run(accounts.hidden_among([HIDDEN]))
    assert accounts.held([HIDDEN]) is None


def test_the_serving_cache_passes_account_notices_and_clears_on() -> None:
    _cached, _store, cache, _clock = make()
    dropped: list[Any] = []
    cache.account_listeners.append(dropped.append)
    cache.apply(ServingChange(accounts=(HIDDEN,)))
    cache.apply(ServingChange(posts=(1,)))   # names no account: not passed on
    cache.clear()
    assert dropped == [(HIDDEN,), None]
