"""Initial snapshot: every row of the captured tables as of the slot's exported snapshot.

Rows are read in Postgres's text output form (the same form pgoutput streams), so the
one mapping in ``envelope`` renders both. The transaction imports the snapshot exported
by CREATE_REPLICATION_SLOT, so the snapshot plus the slot's stream have no gap and no
overlap.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterator

import psycopg
from psycopg.adapt import Loader

from . import catalog
from .envelope import CapturedTable, MappingOptions, OutRecord, SourcePosition, row_change_records
from .pgoutput import Row

# Rows fetched per round trip from the server-side cursor: large enough to amortise the
# round trip, small enough to keep memory flat on big tables.
FETCH_ROWS = 2000


class _TextOutput(Loader):
    """Keep Postgres's text output untouched (what pgoutput would have sent)."""

    def load(self, data: bytes | bytearray | memoryview) -> str:
        return bytes(data).decode("utf-8")


def snapshot_mark(first_table: bool, last_table: bool, first_row: bool, last_row: bool) -> str:
    """Debezium's source.snapshot value for one snapshot row.

    As Debezium 3.6 marks them (checked by deploy/debezium): the last row of a table wins
    over its first row, so a one-row table's row is "last_in_data_collection" (or "last").
    """
    if last_row:
        return "last" if last_table else "last_in_data_collection"
    if first_row:
        return "first" if first_table else "first_in_data_collection"
    return "true"


def _scalar(conn: psycopg.Connection, query: str) -> Any:
    """The first value of a query that always returns one row."""
    row = conn.execute(query).fetchone()
    assert row is not None, query
    return row[0]


def _rows(conn: psycopg.Connection, table: CapturedTable) -> Iterator[Row]:
    names = ", ".join(f'"{c.name}"' for c in table.columns)
    with conn.cursor(name=f"cdc_snapshot_{table.name}") as cur:
        for column in table.columns:
            cur.adapters.register_loader(column.type_oid, _TextOutput)
        cur.itersize = FETCH_ROWS
        cur.execute(f'SELECT {names} FROM "{table.schema}"."{table.name}"')
        for row in cur:
            yield tuple(row)


def snapshot_records(conn: psycopg.Connection, snapshot_name: str, publication: str,
                     consistent_lsn: int, options: MappingOptions,
                     clock_us: Callable[[], int] = lambda: time.time_ns() // 1000,
                     ) -> Iterator[OutRecord]:
    """Read every captured table under the exported snapshot and yield its records."""
    conn.autocommit = False
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    conn.execute(f"SET TRANSACTION SNAPSHOT '{snapshot_name}'")
    for setting in ("DateStyle = 'ISO'", "IntervalStyle = 'postgres'", "bytea_output = 'hex'",
                    "extra_float_digits = 1"):
        conn.execute(f"SET LOCAL {setting}")
    # Debezium's snapshot records carry the snapshot transaction's id.
    tx_id = _scalar(conn, "SELECT txid_current()")
    tables = catalog.publication_tables(conn, publication)
    non_empty = [t for t in tables
                 if _scalar(conn, f'SELECT EXISTS (SELECT 1 FROM "{t.schema}"."{t.name}")')]
    started_us = clock_us()
    for t_index, table in enumerate(non_empty):
        rows = _rows(conn, table)
        current = next(rows, None)
        first = True
        while current is not None:
            following = next(rows, None)
            mark = snapshot_mark(t_index == 0, t_index == len(non_empty) - 1, first,
                                 following is None)
            pos = SourcePosition(ts_us=started_us, snapshot=mark, tx_id=tx_id,
                                 lsn=consistent_lsn, last_commit_lsn=None)
            yield from row_change_records(table, "r", None, current, pos, options, clock_us())
            current, first = following, False
    conn.rollback()
