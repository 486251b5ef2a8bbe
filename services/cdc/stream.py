"""Streamed pgoutput messages -> Kafka records, with ack tracking per transaction.

``ChangeStreamer`` holds what the stream needs between messages (relation cache, the
open transaction, the previous commit's LSN) and hands each record to the publisher
with a callback that retires it in the ``AckFrontier``.
"""
from __future__ import annotations

import logging
from typing import Callable

from . import metrics
from .ack_frontier import AckFrontier, OpenTransaction
from .envelope import (CapturedTable, MappingOptions, OutRecord, SourcePosition,
                       row_change_records, truncate_record)
from .pgoutput import (Begin, Commit, Delete, Insert, LogicalMessage, Origin, Relation, Row,
                       Truncate, TypeInfo, Update, decode)
from .publisher import KafkaPublisher

log = logging.getLogger(__name__)


class ChangeStreamer:
    def __init__(self, publisher: KafkaPublisher, frontier: AckFrontier,
                 table_for: Callable[[Relation], CapturedTable], options: MappingOptions,
                 clock_us: Callable[[], int], emit_truncate: bool = False) -> None:
        self._publisher = publisher
        self._frontier = frontier
        self._table_for = table_for
        self._options = options
        self._clock_us = clock_us
        self._emit_truncate = emit_truncate
        self._tables: dict[int, CapturedTable] = {}
        self._tx: OpenTransaction | None = None
        self._begin: Begin | None = None
        self._last_commit_lsn: int | None = None

    def on_payload(self, data_start: int, payload: bytes) -> None:
        """Handle one XLogData payload; ``data_start`` is its WAL position."""
        msg = decode(payload)
        if isinstance(msg, Begin):
            self._begin = msg
            self._tx = self._frontier.begin(msg.commit_ts_us)
        elif isinstance(msg, Commit):
            assert self._tx is not None, "Commit without Begin"
            self._frontier.commit(self._tx, msg.end_lsn)
            self._last_commit_lsn = data_start
            self._tx, self._begin = None, None
        elif isinstance(msg, Relation):
            self._tables[msg.rel_id] = self._table_for(msg)
        elif isinstance(msg, Insert):
            self._row(msg.rel_id, "c", None, msg.new, data_start)
        elif isinstance(msg, Update):
            self._row(msg.rel_id, "u", None if msg.old_is_key_only else msg.old, msg.new,
                      data_start)
        elif isinstance(msg, Delete):
            self._row(msg.rel_id, "d", msg.old, None, data_start)
        elif isinstance(msg, Truncate):
            self._truncate(msg, data_start)
        elif isinstance(msg, (TypeInfo, Origin, LogicalMessage)):
            pass  # custom type names, replication origins, messages: not part of the envelope

    def _position(self, data_start: int) -> SourcePosition:
        assert self._begin is not None, "row change outside a transaction"
        return SourcePosition(ts_us=self._begin.commit_ts_us, snapshot="false",
                              tx_id=self._begin.xid, lsn=data_start,
                              last_commit_lsn=self._last_commit_lsn)

    def _send(self, record: OutRecord, table: CapturedTable, op: str, data_start: int) -> None:
        tx, begin = self._tx, self._begin
        assert tx is not None and begin is not None
        self._frontier.sent(tx)
        self._publisher.send(record, lambda: self._frontier.acked(tx), (begin.xid, data_start))
        if record.value is not None:
            metrics.EVENTS.labels(table.name, op).inc()

    def _row(self, rel_id: int, op: str, before: Row | None, after: Row | None,
             data_start: int) -> None:
        table = self._tables[rel_id]
        records = row_change_records(table, op, before, after, self._position(data_start),
                                     self._options, self._clock_us())
        for record in records:
            self._send(record, table, op, data_start)

    def _truncate(self, msg: Truncate, data_start: int) -> None:
        for rel_id in msg.rel_ids:
            table = self._tables[rel_id]
            if not self._emit_truncate:
                metrics.TRUNCATES_SKIPPED.inc()
                log.warning("TRUNCATE of %s.%s not emitted (FEED_CDC_EMIT_TRUNCATE=false)",
                            table.schema, table.name)
                continue
            self._send(truncate_record(table, self._position(data_start), self._options,
                                       self._clock_us()), table, "t", data_start)
