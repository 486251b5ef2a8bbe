"""Which WAL position may be confirmed to Postgres: pure bookkeeping of Kafka acks.

Transactions are opened in commit order (pgoutput sends each whole transaction at its
commit). Kafka acknowledges records out of order across partitions, so the confirmable
position is the end LSN of the newest transaction such that it and every transaction
before it are committed (Commit seen) and fully acknowledged. Confirming that position
is what makes the relay lose nothing: Postgres replays every later transaction.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass
class OpenTransaction:
    commit_ts_us: int
    pending: int = 0
    end_lsn: int | None = None  # set when the Commit message arrives


class AckFrontier:
    """Highest contiguous acknowledged commit LSN."""

    def __init__(self, confirmed_lsn: int = 0) -> None:
        self._confirmed = confirmed_lsn
        self._open: deque[OpenTransaction] = deque()

    def begin(self, commit_ts_us: int) -> OpenTransaction:
        tx = OpenTransaction(commit_ts_us)
        self._open.append(tx)
        return tx

    @staticmethod
    def sent(tx: OpenTransaction) -> None:
        tx.pending += 1

    @staticmethod
    def acked(tx: OpenTransaction) -> None:
        tx.pending -= 1

    def commit(self, tx: OpenTransaction, end_lsn: int) -> None:
        tx.end_lsn = end_lsn

    def advance(self) -> list[OpenTransaction]:
        """Retire the fully acknowledged prefix; returns the retired transactions."""
        done: list[OpenTransaction] = []
        while self._open and self._open[0].end_lsn is not None and self._open[0].pending == 0:
            tx = self._open.popleft()
            self._confirmed = max(self._confirmed, tx.end_lsn or 0)
            done.append(tx)
        return done

    def idle_at(self, wal_end: int) -> None:
        """Nothing is open: everything the server sent up to wal_end is handled."""
        if not self._open:
            self._confirmed = max(self._confirmed, wal_end)

    @property
    def confirmed(self) -> int:
        return self._confirmed

    @property
    def is_idle(self) -> bool:
        return not self._open

    def oldest_unconfirmed_commit_us(self) -> int | None:
        return self._open[0].commit_ts_us if self._open else None
