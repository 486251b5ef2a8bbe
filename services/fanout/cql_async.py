"""Cassandra calls from the asyncio loop: driver futures bridged to asyncio, bounded fan-in.

``CqlRunner.execute`` awaits one statement (the driver's own I/O thread does the work);
``run_bounded`` keeps at most ``max_in_flight`` statements outstanding, which is how a
fan-out writes thousands of rows concurrently without queueing unboundedly in the
driver or the node; ``page`` reads one page of a large partition (bounded memory).
"""
from __future__ import annotations

import asyncio
from typing import Any, Iterable, Sequence

from cassandra import OperationTimedOut, ReadTimeout, Unavailable, WriteTimeout
from cassandra.cluster import NoHostAvailable, Session
from cassandra.connection import ConnectionException
from cassandra.query import PreparedStatement

# Errors worth retrying with backoff (the node is slow, restarting or overloaded);
# anything else from the driver (invalid query, bad value) is a bug or poison data.
TRANSIENT_STORE_ERRORS: tuple[type[BaseException], ...] = (
    OperationTimedOut, ReadTimeout, WriteTimeout, Unavailable, NoHostAvailable,
    ConnectionException,
)

Statement = tuple[PreparedStatement, Sequence[Any]]


class CqlRunner:
    def __init__(self, session: Session) -> None:
        self.session = session

    async def execute(self, statement: PreparedStatement, params: Sequence[Any]) -> list[Any]:
        """Run one statement; returns its (first page of) rows."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[Any]] = loop.create_future()
        response = self.session.execute_async(statement, params)

        def on_rows(rows: Any) -> None:
            loop.call_soon_threadsafe(_resolve, done, list(rows or []), None)

        def on_error(exc: BaseException) -> None:
            loop.call_soon_threadsafe(_resolve, done, None, exc)

        response.add_callbacks(on_rows, on_error)
        return await done

    async def run_bounded(self, statements: Iterable[Statement], max_in_flight: int) -> int:
        """Run statements concurrently, at most ``max_in_flight`` at once; first error raises."""
        limit = asyncio.Semaphore(max(1, max_in_flight))
        tasks: list[asyncio.Task[list[Any]]] = []
        errors: list[BaseException] = []

        async def one(stmt: PreparedStatement, params: Sequence[Any]) -> list[Any]:
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
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(
            None, lambda: self.session.execute(statement, params, paging_state=paging_state))
        return list(result.current_rows), result.paging_state


def _resolve(fut: asyncio.Future, value: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)
