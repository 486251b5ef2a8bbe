"""How many retries a worker may send: a token bucket earned by successes. Pure.

Retrying a timed-out statement is right when the timeout was a blip and wrong when the
store is overloaded: then every retry is more of the load that made it time out (issue
37: 1,671 retries in five minutes of a backlog on three nodes). A ``RetryBudget`` lets
retries add at most a share of the work that succeeds (Finagle's and gRPC's retry
budgets): each success deposits ``per_success`` of a token, each retry withdraws a whole
one, and the bucket holds at most ``max_tokens`` (a burst: one node restarting fails a
round of statements at once, and they may all retry). When the store fails everything
there are no successes to earn from, so the bucket also earns ``per_second`` tokens a
second: a worker then still retries, slowly, and learns when the store is back.

An empty bucket is a reason to wait, never to drop: the caller holds the message (not
acked, not committed) until ``seconds_until_token`` has passed or a success refilled it.
The clock is the caller's (``now``: seconds of any monotonic clock).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RetryBudget:
    """Tokens for retries: ``on_success`` earns, ``try_withdraw`` spends one."""

    per_success: float
    per_second: float
    max_tokens: float
    tokens: float = -1.0  # -1: start full
    refilled_at: float | None = None

    def __post_init__(self) -> None:
        self.max_tokens = max(1.0, self.max_tokens)
        self.per_second = max(0.0, self.per_second)
        if self.tokens < 0:
            self.tokens = self.max_tokens

    def on_success(self) -> None:
        """A unit of work (a message, a page) succeeded: earn ``per_success``."""
        self.tokens = min(self.max_tokens, self.tokens + self.per_success)

    def try_withdraw(self, now: float) -> bool:
        """Spend one token for a retry at ``now``; False (and nothing spent) when the
        bucket holds less than one."""
        self._refill(now)
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True

    def available(self, now: float) -> float:
        """Tokens in the bucket at ``now`` (what the dashboard shows)."""
        self._refill(now)
        return self.tokens

    def seconds_until_token(self, now: float) -> float:
        """How long until the bucket holds a token by time alone (successes may fill
        it sooner); 0 when it holds one now."""
        self._refill(now)
        missing = 1.0 - self.tokens
        if missing <= 0:
            return 0.0
        if self.per_second <= 0:
            return float("inf")
        return missing / self.per_second

    def _refill(self, now: float) -> None:
        if self.refilled_at is not None and now > self.refilled_at:
            self.tokens = min(self.max_tokens, self.tokens + (now - self.refilled_at) * self.per_second)
        if self.refilled_at is None or now > self.refilled_at:
            self.refilled_at = now
