"""The workers' adaptive in-flight limit on the session's Cassandra: a ``CqlRunner`` whose
statements time out (a request timeout no node can meet) halves its limit once per
round, down to its minimum and no further, and grows it again once the same node
answers in time; every statement is accounted for (nothing left in flight)."""
from __future__ import annotations

import asyncio

import pytest
from cassandra import OperationTimedOut
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Session

from services.shared.clients import cql
from services.shared.stores.cql_async import CqlRunner
from services.shared.stores.store_pressure import adaptive_permits

pytestmark = pytest.mark.integration

MIN, MAX = 4, 64
# Far below any node's answer time (a loopback round trip alone is tens of microseconds):
# every statement times out in the driver, as they did on the overloaded three nodes.
IMPOSSIBLE_TIMEOUT_S = 1e-6


def _set_timeout(session: Session, seconds: float) -> None:
    session.cluster.profile_manager.profiles[EXEC_PROFILE_DEFAULT].request_timeout = seconds


def test_the_limit_halves_on_real_timeouts_to_its_minimum_and_grows_back_once_the_node_answers(
        cassandra: Session) -> None:
    read = cassandra.prepare("SELECT tier FROM author_tiers WHERE author_id=?")
    runner = CqlRunner(cassandra, permits=adaptive_permits(MIN, MAX))
    runner.permits.limit.limit = MAX

    async def round_of(statements: int) -> int:
        """Statements at once through the runner; returns how many timed out."""
        results = await asyncio.gather(*(runner.execute(read, (i,)) for i in range(statements)),
                                       return_exceptions=True)
        unexpected = [r for r in results if isinstance(r, BaseException)
                      and not isinstance(r, OperationTimedOut)]
        assert not unexpected, unexpected[:3]
        return sum(isinstance(r, OperationTimedOut) for r in results)

    async def main() -> tuple[list[int], list[int], int]:
        _set_timeout(cassandra, IMPOSSIBLE_TIMEOUT_S)
        limits: list[int] = []
        timed_out: list[int] = []
        try:
            for _ in range(6):  # each round: as many statements as the limit allows at once
                sent = runner.permits.limit.permits
                # Next to nothing answers in a microsecond: on a loaded machine the driver's
                # timer wheel lets a statement or two through (2 of 64 in one CI run).
                assert await round_of(sent) > 0
                timed_out.append(sent)
                limits.append(runner.permits.limit.permits)
        finally:
            _set_timeout(cassandra, cql.DEFAULT_TIMEOUT_S)
        assert runner.permits.in_flight == 0
        for _ in range(10):  # the node answers again: rounds of fast reads
            assert await round_of(2 * MAX) == 0
        return limits, timed_out, runner.permits.limit.permits

    limits, timed_out, recovered = asyncio.run(main())
    assert timed_out[:4] == [MAX, 32, 16, 8]
    # One halving per round (the statements of a round share its congestion), never below MIN.
    assert limits[:4] == [32, 16, 8, 4] and limits[4:] == [MIN, MIN]
    assert recovered > MIN
