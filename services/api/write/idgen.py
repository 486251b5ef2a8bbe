"""Snowflake id generation with node ids leased in Postgres.

``SnowflakeGenerator`` issues ids for one node id: 4,096 per millisecond, then it waits
for the next millisecond; backwards clock steps are handled by the three levels of
``ids.classify_drift``. The clock and the sleep are injected, so tests can drive drift.

``NodeLease`` takes a free node id from ``id_node_leases`` (the row's ``expires_at`` is in
the future while a process holds it) and renews it in a thread. A process whose lease
could not be renewed in time considers it lost and its generator refuses to issue ids:
another process may take the node id once the row expires. The thread then leases a
free node id again (every second until it gets one: Postgres may still be down) and
rebinds the generator to it before ids are issued again, so a Postgres outage longer
than the lease costs posts only while it lasts, not until the process restarts. The local deadline is
``LEASE_SAFETY_MS`` before the row's expiry, which covers the 1 s an id may run ahead of
the clock (drift level 2) plus clock skew between hosts, so the next holder's ids never
collide with ours.
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol

import psycopg

from services.shared.clients import pg
from services.shared.domain.ids import MAX_NODE, MAX_SEQUENCE, Drift, classify_drift, compose
from services.shared.settings import ApiProcess

log = logging.getLogger(__name__)

Clock = Callable[[], int]           # Unix time in milliseconds
Sleep = Callable[[float], None]     # seconds
LEASE_SAFETY_MS = 2000
# Seconds between attempts while the lease is not held (Postgres down, the id lost).
RETRY_S = 1.0


def system_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class IdGenerationError(Exception):
    """No id can be issued right now."""


class ClockMovedBackwards(IdGenerationError):
    """Drift level 3: the clock went back more than the logical-drift allowance."""

    def __init__(self, behind_ms: int) -> None:
        super().__init__(f"clock moved backwards by {behind_ms} ms")
        self.behind_ms = behind_ms


class LeaseLost(IdGenerationError):
    """This process no longer holds its node id."""


class LeaseCheck(Protocol):
    def is_held(self) -> bool:
        """True while ids may be issued under this lease."""


class _Unleased:
    def is_held(self) -> bool:
        return True


class SnowflakeGenerator:
    """Thread-safe generator of 64-bit ids for one node id."""

    def __init__(self, node_id: int, *, lease: LeaseCheck | None = None,
                 clock: Clock = system_clock_ms, sleep: Sleep = time.sleep) -> None:
        if not 0 <= node_id <= MAX_NODE:
            raise ValueError(f"node id {node_id} outside 0..{MAX_NODE}")
        self.node_id = node_id
        self._lease = lease or _Unleased()
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._last_ms = -1
        self._sequence = 0

    def rebind(self, node_id: int) -> None:
        """Issue ids under ``node_id`` from now on (a lease taken again). The sequence and
        the last millisecond carry on, so ids stay increasing in this process."""
        if not 0 <= node_id <= MAX_NODE:
            raise ValueError(f"node id {node_id} outside 0..{MAX_NODE}")
        with self._lock:
            self.node_id = node_id

    def next_id(self) -> int:
        """The next id; raises ``ClockMovedBackwards`` or ``LeaseLost``."""
        with self._lock:
            if not self._lease.is_held():
                raise LeaseLost(f"node id {self.node_id} lease is not held")
            now = self._timestamp_for_next_id()
            if now == self._last_ms:
                self._sequence = (self._sequence + 1) & MAX_SEQUENCE
                if self._sequence == 0:
                    # 4,096 ids used in this millisecond: wait for the next one.
                    now = self._wait_until_after(self._last_ms)
            else:
                self._sequence = 0
            self._last_ms = now
            return compose(now, self.node_id, self._sequence)

    def _timestamp_for_next_id(self) -> int:
        now = self._clock()
        while True:
            drift = classify_drift(self._last_ms, now)
            if drift is Drift.NONE:
                return now
            if drift is Drift.WAIT:
                self._sleep((self._last_ms - now) / 1000)
                now = self._clock()
            elif drift is Drift.CONTINUE_ON_LAST:
                return self._last_ms
            else:
                raise ClockMovedBackwards(self._last_ms - now)

    def _wait_until_after(self, last_ms: int) -> int:
        now = self._clock()
        while now <= last_ms:
            # Less than a millisecond in the normal case; up to the logical drift (1 s)
            # when the clock stepped back and this millisecond is exhausted.
            self._sleep(0.0001)
            now = self._clock()
        return now


_ACQUIRE_SQL = """
INSERT INTO id_node_leases (node_id, holder, expires_at)
SELECT n, %(holder)s, now() + make_interval(secs => %(ttl)s)
FROM generate_series(0, %(max_node)s) AS n
WHERE NOT EXISTS (SELECT 1 FROM id_node_leases l WHERE l.node_id = n AND l.expires_at > now())
ORDER BY random()
LIMIT 1
ON CONFLICT (node_id) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE id_node_leases.expires_at <= now()
RETURNING node_id
"""
_RENEW_SQL = """
UPDATE id_node_leases SET expires_at = now() + make_interval(secs => %(ttl)s)
WHERE node_id = %(node)s AND holder = %(holder)s AND expires_at > now()
RETURNING node_id
"""
# Serialises acquisitions so two processes never pick the same free node id.
_ACQUIRE_LOCK_KEY = 7_210_001


def _take_free_node(settings: ApiProcess, holder: str, ttl: float, **connect: float) -> int | None:
    """A free node id leased to ``holder`` for ``ttl`` seconds (random among the free
    ones), or None when all 1,024 are held."""
    with pg.connect(settings, **connect) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_ACQUIRE_LOCK_KEY,))
        row = conn.execute(_ACQUIRE_SQL, {"holder": holder, "ttl": ttl,
                                          "max_node": MAX_NODE}).fetchone()
    return None if row is None else int(row[0])


class NodeLease:
    """A node id held in ``id_node_leases``; ``is_held()`` is checked for every id."""

    def __init__(self, settings: ApiProcess, node_id: int, holder: str, ttl_seconds: float, *,
                 valid_until: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.node_id = node_id
        self.holder = holder
        self.ttl_seconds = ttl_seconds
        self._monotonic = monotonic
        self._valid_until = valid_until
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Called with the new node id when the lease is taken again, before ids may be
        # issued under it (the generator's rebind, the node-id gauge).
        self.on_node: list[Callable[[int], None]] = []

    @classmethod
    def acquire(cls, settings: ApiProcess, *, ttl_seconds: float | None = None,
                monotonic: Callable[[], float] = time.monotonic) -> NodeLease:
        """Lease a free node id (random among the free ones); raises if all 1,024 are held."""
        ttl = settings.id_lease_ttl_seconds if ttl_seconds is None else ttl_seconds
        if ttl * 1000 <= 2 * LEASE_SAFETY_MS:
            raise ValueError("lease ttl must be well above the safety margin")
        holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        started = monotonic()
        node = _take_free_node(settings, holder, ttl)
        if node is None:
            raise IdGenerationError("all node ids are leased")
        log.info("node id leased", extra={"node_id": node, "holder": holder})
        return cls(settings, node, holder, ttl, monotonic=monotonic,
                   valid_until=started + ttl - LEASE_SAFETY_MS / 1000)

    def is_held(self) -> bool:
        return self._monotonic() < self._valid_until

    def renew(self) -> bool:
        """Extend the lease; False (and the lease is lost) if another holder has it."""
        started = self._monotonic()
        with pg.connect(self.settings, connect_timeout=5) as conn:
            row = conn.execute(_RENEW_SQL, {"ttl": self.ttl_seconds, "node": self.node_id,
                                            "holder": self.holder}).fetchone()
            conn.commit()
        if row is None:
            self._valid_until = 0.0
            log.error("node id lease lost", extra={"node_id": self.node_id})
            return False
        self._valid_until = started + self.ttl_seconds - LEASE_SAFETY_MS / 1000
        return True

    def take_again(self) -> bool:
        """Lease a free node id anew (this one was lost); False when none could be had.
        The listeners (``on_node``) hear of it before ``is_held`` turns true."""
        started = self._monotonic()
        node = _take_free_node(self.settings, self.holder, self.ttl_seconds, connect_timeout=5)
        if node is None:
            log.error("node id lease lost and no node id is free")
            return False
        self.node_id = node
        for listener in self.on_node:
            listener(node)
        self._valid_until = started + self.ttl_seconds - LEASE_SAFETY_MS / 1000
        log.warning("node id leased again", extra={"node_id": node, "holder": self.holder})
        return True

    def keep(self) -> bool:
        """One step of the renewing thread: renew the lease, or take a node id again
        when it was lost. True when it is held after the step; a Postgres error is
        logged and gives False (the next step comes sooner)."""
        try:
            # A row still ours and unexpired is renewed even past the local deadline (no
            # one else can have taken it); an expired or taken one is lost.
            return self.renew() or self.take_again()
        except psycopg.Error:
            # Postgres unreachable: keep trying; is_held() turns False at the deadline.
            log.warning("node id lease renewal failed", exc_info=True)
            return False

    def start_renewing(self) -> None:
        """Renew every third of the ttl in a daemon thread until ``release``; while the
        lease is not held, try every ``RETRY_S``."""
        self._thread = threading.Thread(target=self._renew_loop, name="id-lease", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        wait = self.ttl_seconds / 3
        while not self._stop.wait(wait):
            wait = self.ttl_seconds / 3 if self.keep() else RETRY_S

    def release(self) -> None:
        """Stop renewing and free the node id for the next process."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._valid_until = 0.0
        try:
            with pg.connect(self.settings, connect_timeout=5) as conn:
                # Free after the safety margin, not at once: our last ids may run up to
                # 1 s ahead of the clock, and the next holder must start after them.
                conn.execute("UPDATE id_node_leases SET expires_at = now() + "
                             "make_interval(secs => %s) WHERE node_id = %s AND holder = %s",
                             (LEASE_SAFETY_MS / 1000, self.node_id, self.holder))
                conn.commit()
        except psycopg.Error:
            log.warning("node id lease release failed; it expires on its own", exc_info=True)
