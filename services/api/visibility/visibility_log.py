"""``LogReader``: the visibility log (migration 0003) read on libpq directly, without
awaiting: ``send`` puts the query on the wire, ``poll`` takes the answer if it is there.

Through psycopg's cursor a read cost the API ~150 µs of CPU (cursor, adaptation, row
factory, and a task of its own for ``wait_for``); this way ~50-60 µs (3,000 reads of an
empty delta, 2026-12-04). And because ``poll`` never waits, a page that did its own work
while its read was on the wire takes the answer without a turn of the event loop
(fence.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq

from services.shared.clients import pg
from services.shared.contracts.visibility_log import LOG_HEAD
from services.shared.settings import PostgresSettings

from .recent_changes import VisibilityChange

# Prepared once per connection (SQL PREPARE), executed by name. ``visibility_read``: the
# entries after ``$1``, in seq order (what every read needs). ``visibility_marks``: the
# same, and on every row (one row even when no entry is new) the log's head (the
# sequence's last number: below a process's last entry only after a restore or a reset)
# and the verifier's ``upto`` (entries at or below it have left the log: migration 0004).
# The marks are read every ``MARKS_EVERY_S`` and on a new connection (fence.py): the join
# on the sequence and the marks' row cost Postgres CPU that most reads need not pay.
_ENTRIES = ("SELECT seq, kind, subject_id, object_id, hidden,"
            " floor(extract(epoch FROM since) * 1000)::bigint AS since_ms"
            " FROM visibility_changes WHERE seq > $1 ORDER BY seq LIMIT $2")
_PREPARE = ("PREPARE visibility_read(bigint, int) AS"
            " SELECT NULL::bigint, NULL::bigint, v.* FROM (" + _ENTRIES + ") v",
            "PREPARE visibility_marks(bigint, int) AS"
            " SELECT h.head, w.upto, v.seq, v.kind, v.subject_id, v.object_id, v.hidden, v.since_ms"
            " FROM (" + LOG_HEAD + ") AS h(head)"
            " CROSS JOIN visibility_verified w"
            " LEFT JOIN LATERAL (" + _ENTRIES + ") v ON true")
_STATEMENTS = {False: b"visibility_read", True: b"visibility_marks"}


@dataclass(frozen=True, slots=True)
class LogRead:
    """One answer: the entries, and the log's head and ``upto`` when they were asked for
    (else -1)."""

    head: int
    upto: int
    entries: list[VisibilityChange]


class LogReader:
    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn
        self._pg = conn.pgconn
        self._pg.nonblocking = 1

    @classmethod
    async def open(cls, settings: PostgresSettings, timeout_s: float) -> LogReader:
        conn = await pg.async_connect(settings, autocommit=True,
                                      connect_timeout=max(1, int(timeout_s)))
        for statement in _PREPARE:
            await conn.execute(statement)
        return cls(conn)

    def fileno(self) -> int:
        return int(self._pg.socket)

    def send(self, seq: int, limit: int, marks: bool = False) -> bool:
        """Puts the read of the entries after ``seq`` (with the head and ``upto`` when
        ``marks``) on the wire; False when part of it is still to be written (the caller
        waits for the socket to be writable)."""
        self._pg.send_query_prepared(_STATEMENTS[marks], [b"%d" % seq, b"%d" % limit])
        return self._pg.flush() == 0

    def flush(self) -> bool:
        return self._pg.flush() == 0

    def poll(self) -> LogRead | None:
        """The answer when it has all arrived, else None (never blocks). Raises
        ``psycopg.OperationalError`` on a broken connection or a failed statement."""
        pg = self._pg
        pg.consume_input()
        if pg.is_busy():
            return None
        out: list[VisibilityChange] = []
        head = upto = -1
        while (res := pg.get_result()) is not None:
            if res.status != pq.ExecStatus.TUPLES_OK:
                raise psycopg.OperationalError(res.error_message.decode(errors="replace"))
            get = res.get_value
            for i in range(res.ntuples):
                if i == 0 and (marked := get(0, 0)) is not None:
                    head, upto = int(marked), int(get(0, 1) or 0)
                seq = get(i, 2)  # text format; NULL: None (an answer with no entries)
                if seq is None:
                    continue
                v: list[Any] = [get(i, j) for j in range(3, 8)]  # the entry's columns, not NULL
                out.append(VisibilityChange(int(seq), v[0].decode(), int(v[1]), int(v[2]),
                                            v[3] == b"t", None if v[4] is None else int(v[4])))
        return LogRead(head, upto, out)

    async def close(self) -> None:
        await self._conn.close()
