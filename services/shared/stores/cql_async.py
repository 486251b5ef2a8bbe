"""Cassandra calls from the asyncio loop: driver futures bridged to asyncio, bounded fan-in.

``CqlRunner.execute`` awaits one statement (the driver's own I/O thread does the work);
``run_bounded`` keeps at most ``max_in_flight`` statements of one caller outstanding,
which is how a fan-out writes thousands of rows concurrently; ``page`` / ``pages`` read a
large partition a page at a time (bounded memory). Every statement also takes one of the
runner's adaptive permits (store_pressure.py): the many keys of a batch together never
keep more statements in flight than the store answers in good time, a limit that halves
on timeouts, shrinks on rising latency and grows while answers are fast (requests beyond
it would time out waiting in the node, not run faster).

Two costs of the driver that dominate a worker applying thousands of small statements
a second (measured with py-spy) are avoided here: completions are handed to the event
loop in bunches (``_Completions``: one loop wake-up per bunch, not one per response), and
rows are built from one cached namedtuple class per column list (``cached_row_factory``;
the driver's default defines a new class for every response), or are plain tuples
(``use_plain_tuples``). Used by the fan-out, the ranker and the inbox rebuild.
"""
from __future__ import annotations

import asyncio
import functools
import threading
from collections import deque
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Sequence, TypeAlias, TypeVar

from cassandra import OperationTimedOut, ReadTimeout, Unavailable, WriteTimeout
from cassandra.cluster import EXEC_PROFILE_DEFAULT, NoHostAvailable, Session
from cassandra.connection import ConnectionException
from cassandra.query import (BatchStatement, BoundStatement, PreparedStatement, named_tuple_factory,
                             tuple_factory)

from .store_pressure import AdaptivePermits, RetryGate, adaptive_permits


def release(response: Any) -> None:
    """Break a finished request's reference cycles, so reference counting frees it.

    The driver's ``ResponseFuture`` keeps its timer and our callbacks after it is done:
    ~50 objects a request only the cyclic collector freed (docs/read-path.md, "The
    process"). ``_timer`` is cassandra-driver 3.30's attribute. Never raises: it runs in
    the driver's completion callbacks, where an error would keep the answer from its caller."""
    try:
        response._timer = None
        response.clear_callbacks()
    except Exception:  # noqa: BLE001 - a future of another shape: left to the collector
        pass


class WriteContended(Exception):
    """A conditional write kept losing its condition to other writers of the partition;
    later, once they are done, it applies (services/shared/stores/counted_edges.py)."""


# Errors worth retrying with backoff (the node is slow, restarting or overloaded, or
# other writers hold a partition); anything else from the driver (invalid query, bad
# value) is a bug or poison data.
TRANSIENT_STORE_ERRORS: tuple[type[BaseException], ...] = (
    OperationTimedOut, ReadTimeout, WriteTimeout, Unavailable, NoHostAvailable,
    ConnectionException, WriteContended,
)

T = TypeVar("T")


def backoff_delays(attempts: int, base_s: float, cap_s: float = 5.0) -> list[float]:
    """Exponential backoff between ``attempts`` tries: base, 2*base, ... capped."""
    return [min(cap_s, base_s * (2 ** i)) for i in range(max(0, attempts - 1))]


class StoreRetry:
    """Retries one idempotent step on a transient store error, with backoff.

    For a step inside a long message (a page of a large fan-out): without it, one timed
    out row fails the message and the guard redoes every row of it, which under load
    multiplies the work exactly when the store is slowest. ``on_retry`` is told of each
    failure (the fan-out lowers its capacity estimate). With a ``gate`` (the worker's
    ``StorePressure.retries``) each retry also spends a token of the retry budget, waiting
    for one when there is none, and each success earns.
    """

    def __init__(self, attempts: int = 1, base_s: float = 0.2,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 transient: tuple[type[BaseException], ...] | Callable[[BaseException], bool]
                 = TRANSIENT_STORE_ERRORS,
                 gate: RetryGate | None = None) -> None:
        """``transient``: the error classes retried, or a test of an error."""
        self._delays = backoff_delays(attempts, base_s)
        self._sleep = sleep
        if isinstance(transient, tuple):
            classes = transient
            self._transient: Callable[[BaseException], bool] = lambda exc: isinstance(exc, classes)
        else:
            self._transient = transient
        self._gate = gate

    async def __call__(self, work: Callable[[], Awaitable[T]],
                       on_retry: Callable[[BaseException], None] | None = None) -> T:
        for delay in [*self._delays, None]:
            try:
                result = await work()
            except Exception as exc:
                if not self._transient(exc):
                    raise
                if on_retry is not None:
                    on_retry(exc)
                if delay is None:
                    raise
                await self._sleep(delay)
                if self._gate is not None:
                    await self._gate.before_retry()
                continue
            if self._gate is not None:
                self._gate.succeeded()
            return result
        raise AssertionError("unreachable")


Executable: TypeAlias = PreparedStatement | BoundStatement | BatchStatement
Statement: TypeAlias = tuple[Executable, Sequence[Any]]


# Process-wide defaults: see WorkerSettings.store_max_in_flight and store_min_in_flight.
DEFAULT_MAX_IN_FLIGHT = 256
DEFAULT_MIN_IN_FLIGHT = 8


_ROW_MAKERS: dict[tuple[str, ...], Callable[[Any], Any]] = {}


def cached_row_factory(colnames: list[str], rows: list[Any]) -> list[Any]:
    """The driver's namedtuple rows, with the class built once per column list. Each row
    is made by ``tuple.__new__`` straight from the driver's tuple (150 ns a row against
    250 through the namedtuple's own ``__new__``, which unpacks the row into arguments:
    the fan-out reads a page of 500 followers per page of rows it writes)."""
    if not rows:
        return []
    key = tuple(colnames)
    make = _ROW_MAKERS.get(key)
    if make is None:
        row_class = type(named_tuple_factory(colnames, rows[:1])[0])
        make = _ROW_MAKERS[key] = functools.partial(tuple.__new__, row_class)
    return list(map(make, rows))


def use_cached_rows(session: Session) -> None:
    """Make the session's default profile build rows with ``cached_row_factory``."""
    session.cluster.profile_manager.profiles[EXEC_PROFILE_DEFAULT].row_factory = cached_row_factory


def use_plain_tuples(session: Session) -> None:
    """Rows as plain tuples for this process's session: cheaper still than
    ``cached_row_factory``, for a store that reads columns by position (the ranker's)."""
    session.cluster.profile_manager.profiles[EXEC_PROFILE_DEFAULT].row_factory = tuple_factory


class _Completions:
    """Driver callbacks (its I/O thread) to asyncio futures, one loop wake-up per bunch."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # (future, its rows or None when there is an error, the error)
        self._done: deque[tuple[asyncio.Future[list[Any]], Any, BaseException | None]] = deque()
        self._lock = threading.Lock()
        self._wake_pending = False

    def put(self, fut: asyncio.Future[list[Any]], value: Any, exc: BaseException | None) -> None:
        self._done.append((fut, value, exc))
        with self._lock:
            if self._wake_pending:
                return  # the drain already scheduled will see this completion
            self._wake_pending = True
        self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            self._wake_pending = False  # before popping: a later put schedules again
        while self._done:
            _resolve(*self._done.popleft())


class CqlRunner:
    """Statements of one process's stores, through one set of adaptive permits:
    ``permits`` (a worker's ``StorePressure.permits``, shared by its runners), or a gate
    of its own that adapts between ``DEFAULT_MIN_IN_FLIGHT`` and ``max_in_flight``."""

    def __init__(self, session: Session, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, *,
                 permits: AdaptivePermits | None = None) -> None:
        self.session = session
        self.permits = permits or adaptive_permits(min(DEFAULT_MIN_IN_FLIGHT, max_in_flight),
                                                   max(1, max_in_flight))
        self._completions: _Completions | None = None

    def _bridge(self, loop: asyncio.AbstractEventLoop) -> _Completions:
        if self._completions is None or self._completions._loop is not loop:
            self._completions = _Completions(loop)
        return self._completions

    async def execute(self, statement: Executable, params: Sequence[Any] = ()) -> list[Any]:
        """Run one statement; returns its (first page of) rows."""
        rows, _ = await self._call(statement, params, None)
        return rows

    async def _call(self, statement: Executable, params: Sequence[Any],
                    paging_state: bytes | None) -> tuple[list[Any], bytes | None]:
        started = await self.permits.acquire()
        try:
            loop = asyncio.get_running_loop()
            done: asyncio.Future[list[Any]] = loop.create_future()
            bridge = self._bridge(loop)
            response = self.session.execute_async(statement, params, paging_state=paging_state)
            response.add_callbacks(lambda rows: bridge.put(done, list(rows or []), None),
                                   lambda exc: bridge.put(done, None, exc))
            rows = await done
        except asyncio.CancelledError:
            self.permits.release(started, sample=False)
            raise
        except BaseException as exc:
            self.permits.release(started, exc)
            raise
        self.permits.release(started)
        # The callback got this page's rows; the state of the next page is on the
        # finished future (result() does not block once it is done).
        paging_state = response.result().paging_state
        release(response)
        return rows, paging_state

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

    async def pages(self, statement: PreparedStatement, params: Sequence[Any]) -> AsyncIterator[list[Any]]:
        """Every page of a paged read in turn (bounded memory for any partition); the last
        page may be empty."""
        state: bytes | None = None
        while True:
            rows, state = await self.page(statement, params, state)
            yield rows
            if state is None:
                return


def replica_group(session: Session, routing_key: bytes | None) -> frozenset[Any] | None:
    """The replicas of the partition ``routing_key`` names in the session's keyspace: what
    the coalescers (write_coalescer.py, read_coalescer.py) group rows by, so that a
    request's coordinator is a replica of every row in it. None when every node holds
    every row (one node) or the token map does not know.

    Called once a row (py-spy: 6 % of the fan-out worker's GIL time, the host list copied
    and the token hashed every time), so answers are kept per token map
    (``_ReplicaGroups``): a new map (a node joined or left, a keyspace changed) starts a
    new cache. The answer only picks a request's coordinator; a stale one costs the
    coordinator a proxied write, never a wrong row."""
    if routing_key is None:
        return None
    metadata = session.cluster.metadata
    cache = (id(metadata), session.keyspace)
    groups = _REPLICA_GROUPS.get(cache)
    if groups is None or not groups.current(metadata, session.keyspace):
        if len(_REPLICA_GROUPS) >= 16:   # clusters a process made and shut down (tests)
            _REPLICA_GROUPS.clear()
        groups = _REPLICA_GROUPS[cache] = _ReplicaGroups(metadata, session.keyspace)
    return groups.of(routing_key)


class _ReplicaGroups:
    """One token map's answers for one keyspace, at most ``LIMIT`` of them (cleared when
    full: a fan-out's readers come round again, a cache miss costs one lookup)."""

    LIMIT = 200_000
    __slots__ = ("_metadata", "_keyspace", "_token_map", "_single", "_known")

    def __init__(self, metadata: Any, keyspace: str | None) -> None:
        self._metadata = metadata
        self._keyspace = keyspace
        self._token_map = getattr(metadata, "token_map", None)
        self._single = len(metadata.all_hosts()) <= 1
        self._known: dict[bytes, frozenset[Any] | None] = {}

    def current(self, metadata: Any, keyspace: str | None) -> bool:
        # The driver makes a new token map whenever hosts join or leave, or the ring or a
        # keyspace's replication changes (Metadata.rebuild_token_map).
        return (metadata is self._metadata and keyspace == self._keyspace
                and getattr(metadata, "token_map", None) is self._token_map)

    def of(self, routing_key: bytes) -> frozenset[Any] | None:
        if self._single:
            return None
        known = self._known
        if routing_key in known:
            return known[routing_key]
        if len(known) >= self.LIMIT:
            known.clear()
        replicas = self._metadata.get_replicas(self._keyspace, routing_key)
        group = known[routing_key] = frozenset(replicas) if replicas else None
        return group


_REPLICA_GROUPS: dict[tuple[int, str | None], _ReplicaGroups] = {}


def _resolve(fut: asyncio.Future[list[Any]], value: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)
