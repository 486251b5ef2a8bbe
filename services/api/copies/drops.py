"""Which ids the serving-changes notices named, and when: for the copies kept apart from
the serving cache (names.py, likes.py, accounts.py), so that a read which started before
a notice about its id and ended after it is used for its page but not kept (a late fill
would undo the notice)."""
from __future__ import annotations

from typing import Iterable

# Ids remembered one by one; past it, every read that started before the overflow is
# refused wholesale (a burst of notices costs a re-read).
REMEMBERED = 10_000


class Drops:
    """``epoch`` is taken when a read starts; ``untouched(key, epoch)`` when it ends."""

    __slots__ = ("epoch", "_named", "_floor", "_remembered")

    def __init__(self, remembered: int = REMEMBERED) -> None:
        self.epoch = 0
        self._named: dict[int, int] = {}   # id -> epoch of the last notice naming it
        self._floor = 0                     # reads started before it are not kept
        self._remembered = remembered

    def named(self, keys: Iterable[int] | None) -> None:
        """A notice named ``keys`` (None: everything, a cleared serving cache)."""
        self.epoch += 1
        if keys is None:
            self._named.clear()
            self._floor = self.epoch
            return
        for key in keys:
            self._named[key] = self.epoch
        if len(self._named) > self._remembered:
            self._named.clear()
            self._floor = self.epoch

    def untouched(self, key: int, epoch: int) -> bool:
        """No notice named ``key`` since a read that started in ``epoch``."""
        return epoch >= self._floor and self._named.get(key, -1) <= epoch
