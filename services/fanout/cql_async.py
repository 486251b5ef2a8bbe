"""Cassandra calls from the asyncio loop: driver futures bridged to asyncio, bounded fan-in.

``CqlRunner.execute`` awaits one statement (the driver's own I/O thread does the work);
``run_bounded`` keeps at most ``max_in_flight`` statements of one caller outstanding,
which is how a fan-out writes thousands of rows concurrently; ``page`` reads one page of
a large partition (bounded memory). Every statement also takes one of the runner's
``max_in_flight`` permits, so the many keys of a batch together never queue more than
that in the driver or the node (requests would time out waiting, not run faster).
"""
from __future__ import annotations

import asyncio
from typing import Any, Iterable, Sequence

from cassandra import OperationTimedOut, ReadTimeout, Unavailable, WriteTimeout
from cassandra.cluster import NoHostAvailable, Session
from cassandra.connection import ConnectionException
from cassandra.query import BatchStatement, PreparedStatement

# Errors worth retrying with backoff (the node is slow, restarting or overloaded);
# anything else from the driver (invalid query, bad value) is a bug or poison data.
TRANSIENT_STORE_ERRORS: tuple[type[BaseException], ...] = (
    OperationTimedOut, ReadTimeout, WriteTimeout, Unavailable, NoHostAvailable,
    ConnectionException,
)

Executable = PreparedStatement | BatchStatement
Statement = tuple[Executable, Sequence[Any]]


# Process-wide default: see Settings.store_max_in_flight.
DEFAULT_MAX_IN_FLIGHT = 256


class CqlRunner:
    def __init__(self, session: Session, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        self.session = session
        self._max_in_flight = max(1, max_in_flight)
        self._permits: asyncio.Semaphore | None = None  # made on the worker's loop

    def _limit(self) -> asyncio.Semaphore:
        if self._permits is None:
            self._permits = asyncio.Semaphore(self._max_in_flight)
        return self._permits

    async def execute(self, statement: Executable, params: Sequence[Any] = ()) -> list[Any]:
        """Run one statement; returns its (first page of) rows."""
        rows, _ = await self._call(statement, params, None)
        return rows

    async def _call(self, statement: Executable, params: Sequence[Any],
                    paging_state: bytes | None) -> tuple[list[Any], bytes | None]:
        async with self._limit():
            loop = asyncio.get_running_loop()
            done: asyncio.Future[list[Any]] = loop.create_future()
            response = self.session.execute_async(statement, params, paging_state=paging_state)

            def on_rows(rows: Any) -> None:
                loop.call_soon_threadsafe(_resolve, done, list(rows or []), None)

            def on_error(exc: BaseException) -> None:
                loop.call_soon_threadsafe(_resolve, done, None, exc)

            response.add_callbacks(on_rows, on_error)
            rows = await done
            # The callback got this page's rows; the state of the next page is on the
            # finished future (result() does not block once it is done).
            return rows, response.result().paging_state

    async def run_bounded(self, statements: Iterable[Statement], max_in_flight: int) -> int:
        """Run statements concurrently, at most ``max_in_flight`` at once; first error raises."""
        limit = asyncio.Semaphore(max(1, max_in_flight))
        tasks: list[asyncio.Task[list[Any]]] = []
        errors: list[BaseException] = []

        async def one(stmt: Executable, params: Sequence[Any]) -> list[Any]:
            try:
                return await self.execute(stmt, params)
            except BaseException as exc:
                errors.append(exc)
                raise
            finally:
                limit.release()

        for stmt, params in statements:
            await limit.acquire()
            if errors:
                limit.release()
                break
            tasks.append(asyncio.ensure_future(one(stmt, params)))
        await asyncio.gather(*tasks, return_exceptions=True)
        if errors:
            raise errors[0]
        return len(tasks)

    async def page(self, statement: PreparedStatement, params: Sequence[Any],
                   paging_state: bytes | None) -> tuple[list[Any], bytes | None]:
        """One page of a paged read (page size = the statement's fetch_size)."""
        return await self._call(statement, params, paging_state)


def _resolve(fut: asyncio.Future, value: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)
