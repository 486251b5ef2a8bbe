"""Row change -> Kafka records with Debezium's key and change envelope. Pure, no I/O.

Snapshot reads (op ``r``) and streamed changes (``c``/``u``/``d``) both go through
``row_change_records``: one mapping, so the two can never drift (snuba's from_wal /
from_bulk idea). Field order follows Debezium 3.6.1 with JsonConverter, schemas disabled.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from services.shared.contracts.topics import cdc_topic

from . import column_rendering
from .pgoutput import UNCHANGED_TOAST, Column, Row

CONNECTOR: Final = "postgresql"
# source.version: the Debezium release whose envelope this relay reproduces, tagged so a
# consumer can tell the relay's records from Debezium's own.
ENVELOPE_VERSION: Final = "3.6.1.Final+feed-relay"


@dataclass(frozen=True)
class CapturedTable:
    """A captured table as the mapping needs it: column layout and primary key.

    pgoutput marks every column as "key" under REPLICA IDENTITY FULL, so the primary key
    comes from the catalog (as Debezium reads it over JDBC), not from the Relation flags.
    """

    schema: str
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]


@dataclass(frozen=True)
class SourcePosition:
    """The varying part of Debezium's ``source`` block for one change."""

    ts_us: int  # commit time when streaming; read time for snapshot rows
    snapshot: str  # "false" streaming; "first", "true", "last", ... in a snapshot
    tx_id: int | None
    lsn: int | None
    last_commit_lsn: int | None  # first element of ``sequence``


@dataclass(frozen=True)
class MappingOptions:
    topic_prefix: str
    database: str
    decimal_mode: str = "precise"
    unknown_types: str = "fail"
    tombstones_on_delete: bool = True


@dataclass(frozen=True)
class OutRecord:
    topic: str
    key: bytes | None
    value: bytes | None


def to_json(value: Any) -> bytes:
    """Compact UTF-8 JSON, as Kafka Connect's JsonConverter writes it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def topic_for(table: CapturedTable, options: MappingOptions) -> str:
    return cdc_topic(table.name, options.topic_prefix, table.schema)


def row_as_json(table: CapturedTable, row: Row, options: MappingOptions) -> dict[str, Any]:
    if len(row) != len(table.columns):
        raise ValueError(f"{table.schema}.{table.name}: row has {len(row)} values for "
                         f"{len(table.columns)} columns")
    out: dict[str, Any] = {}
    for column, value in zip(table.columns, row):
        if value is None:
            out[column.name] = None
        elif value is UNCHANGED_TOAST:
            out[column.name] = column_rendering.UNAVAILABLE_VALUE
        else:
            out[column.name] = column_rendering.render(
                str(value), column.type_oid, column.typmod, decimal_mode=options.decimal_mode,
                unknown_types=options.unknown_types,
                where=f"{table.schema}.{table.name}.{column.name}")
    return out


def key_of(table: CapturedTable, row_json: dict[str, Any]) -> dict[str, Any] | None:
    """The primary key as a JSON object; None for a table without one (as Debezium)."""
    if not table.primary_key:
        return None
    return {name: row_json[name] for name in table.primary_key}


def source_block(table: CapturedTable, pos: SourcePosition,
                 options: MappingOptions) -> dict[str, Any]:
    sequence = json.dumps([None if pos.last_commit_lsn is None else str(pos.last_commit_lsn),
                           None if pos.lsn is None else str(pos.lsn)], separators=(",", ":"))
    return {
        "version": ENVELOPE_VERSION,
        "connector": CONNECTOR,
        "name": options.topic_prefix,
        "ts_ms": pos.ts_us // 1000,
        "snapshot": pos.snapshot,
        "db": options.database,
        "sequence": sequence,
        "ts_us": pos.ts_us,
        "ts_ns": pos.ts_us * 1000,
        "schema": table.schema,
        "table": table.name,
        "txId": pos.tx_id,
        "lsn": pos.lsn,
        "xmin": None,
        # Replication origin of the change (pgoutput Origin message); Debezium 3.6 sends
        # both as null for changes made directly on this server, as the relay does.
        "origin": None,
        "origin_lsn": None,
    }


def _envelope(before: dict[str, Any] | None, after: dict[str, Any] | None,
              source: dict[str, Any], op: str, now_us: int) -> dict[str, Any]:
    return {"before": before, "after": after, "source": source, "transaction": None,
            "op": op, "ts_ms": now_us // 1000, "ts_us": now_us, "ts_ns": now_us * 1000}


def row_change_records(table: CapturedTable, op: str, before: Row | None, after: Row | None,
                       pos: SourcePosition, options: MappingOptions,
                       now_us: int) -> list[OutRecord]:
    """Records for one row change: op is r (snapshot), c, u or d.

    A delete is followed by a tombstone (same key, null value) when enabled. An update
    that changes the primary key becomes a delete (plus tombstone) of the old key and a
    create of the new one, as Debezium does.
    """
    topic = topic_for(table, options)
    source = source_block(table, pos, options)
    before_json = row_as_json(table, before, options) if before is not None else None
    after_json = row_as_json(table, after, options) if after is not None else None
    if op == "u" and before_json is not None and after_json is not None:
        old_key, new_key = key_of(table, before_json), key_of(table, after_json)
        if old_key != new_key:
            return (_delete(topic, old_key, before_json, source, options, now_us)
                    + [OutRecord(topic, _key_bytes(new_key),
                                 to_json(_envelope(None, after_json, source, "c", now_us)))])
    if op == "d":
        assert before_json is not None
        return _delete(topic, key_of(table, before_json), before_json, source, options, now_us)
    key_json = key_of(table, after_json if after_json is not None else before_json or {})
    return [OutRecord(topic, _key_bytes(key_json),
                      to_json(_envelope(before_json, after_json, source, op, now_us)))]


def _key_bytes(key: dict[str, Any] | None) -> bytes | None:
    return None if key is None else to_json(key)


def _delete(topic: str, key: dict[str, Any] | None, before: dict[str, Any], source: dict[str, Any],
            options: MappingOptions, now_us: int) -> list[OutRecord]:
    records = [OutRecord(topic, _key_bytes(key), to_json(_envelope(before, None, source, "d",
                                                                    now_us)))]
    if options.tombstones_on_delete and key is not None:
        records.append(OutRecord(topic, _key_bytes(key), None))
    return records


def truncate_record(table: CapturedTable, pos: SourcePosition, options: MappingOptions,
                    now_us: int) -> OutRecord:
    """Debezium's truncate event: no key, no row images, op "t"."""
    source = source_block(table, pos, options)
    return OutRecord(topic_for(table, options), None,
                     to_json(_envelope(None, None, source, "t", now_us)))


def heartbeat_record(topic: str, options: MappingOptions, now_us: int) -> OutRecord:
    """Debezium's heartbeat record: key {"serverName": prefix}, value {"ts_ms": now}."""
    return OutRecord(topic, to_json({"serverName": options.topic_prefix}),
                     to_json({"ts_ms": now_us // 1000}))
