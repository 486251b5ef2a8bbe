"""Debezium envelope mapping and column rendering: pure, no services."""
from __future__ import annotations

import base64
import json

import pytest

from services.cdc import column_rendering as cr
from services.cdc.ack_frontier import AckFrontier
from services.cdc.envelope import (CapturedTable, MappingOptions, SourcePosition,
                                   heartbeat_record, row_change_records, truncate_record)
from services.cdc.pgoutput import UNCHANGED_TOAST, Column
from services.cdc.snapshot import snapshot_mark

POSTS = CapturedTable("public", "posts", (
    Column("post_id", cr.INT8, -1, True), Column("author_id", cr.INT8, -1, True),
    Column("created_at", cr.TIMESTAMPTZ, -1, True), Column("text", cr.TEXT, -1, True),
    Column("media_ids", cr.JSONB, -1, True), Column("visibility", cr.INT2, -1, True),
    Column("deleted_at", cr.TIMESTAMPTZ, -1, True)), ("post_id",))
ROW = ("42", "7", "2026-03-01 12:00:00.5+00", "hi", '["m1"]', "1", None)
OPTS = MappingOptions(topic_prefix="feed", database="feed")
POS = SourcePosition(ts_us=1_700_000_000_123_456, snapshot="false", tx_id=900, lsn=5000,
                     last_commit_lsn=4000)
NOW = 1_700_000_001_000_000


def parse(record):
    return (None if record.key is None else json.loads(record.key),
            None if record.value is None else json.loads(record.value))


def test_insert_envelope_has_debeziums_field_order_and_values() -> None:
    [rec] = row_change_records(POSTS, "c", None, ROW, POS, OPTS, NOW)
    key, value = parse(rec)
    assert rec.topic == "feed.public.posts" and key == {"post_id": 42}
    assert list(value) == ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us",
                           "ts_ns"]
    assert list(value["source"]) == ["version", "connector", "name", "ts_ms", "snapshot", "db",
                                     "sequence", "ts_us", "ts_ns", "schema", "table", "txId",
                                     "lsn", "xmin", "origin", "origin_lsn"]
    assert value["after"] == {"post_id": 42, "author_id": 7,
                              "created_at": "2026-03-01T12:00:00.500000Z", "text": "hi",
                              "media_ids": '["m1"]', "visibility": 1, "deleted_at": None}
    src = value["source"]
    assert (src["connector"], src["name"], src["db"], src["snapshot"]) == ("postgresql", "feed",
                                                                           "feed", "false")
    assert (src["ts_ms"], src["ts_us"], src["ts_ns"]) == (1_700_000_000_123,
                                                          1_700_000_000_123_456,
                                                          1_700_000_000_123_456_000)
    assert (src["txId"], src["lsn"], src["sequence"]) == (900, 5000, '["4000","5000"]')
    assert (value["op"], value["before"], value["ts_ms"]) == ("c", None, NOW // 1000)


def test_snapshot_and_streamed_rows_render_identically() -> None:
    [read] = row_change_records(POSTS, "r", None, ROW, POS, OPTS, NOW)
    [create] = row_change_records(POSTS, "c", None, ROW, POS, OPTS, NOW)
    assert parse(read)[1]["after"] == parse(create)[1]["after"]
    assert parse(read)[1]["op"] == "r"


def test_delete_has_null_after_then_a_tombstone_by_default() -> None:
    delete, tombstone = row_change_records(POSTS, "d", ROW, None, POS, OPTS, NOW)
    assert parse(delete)[1]["after"] is None and parse(delete)[1]["op"] == "d"
    assert tombstone.key == delete.key and tombstone.value is None


def test_tombstones_can_be_switched_off() -> None:
    opts = MappingOptions("feed", "feed", tombstones_on_delete=False)
    assert len(row_change_records(POSTS, "d", ROW, None, POS, opts, NOW)) == 1


def test_primary_key_change_becomes_delete_tombstone_create() -> None:
    new = ("43",) + ROW[1:]
    records = row_change_records(POSTS, "u", ROW, new, POS, OPTS, NOW)
    assert [(parse(r)[0], parse(r)[1] and parse(r)[1]["op"]) for r in records] == [
        ({"post_id": 42}, "d"), ({"post_id": 42}, None), ({"post_id": 43}, "c")]


def test_unchanged_toast_becomes_debeziums_placeholder() -> None:
    new = ROW[:3] + (UNCHANGED_TOAST,) + ROW[4:]
    [rec] = row_change_records(POSTS, "u", ROW, new, POS, OPTS, NOW)
    assert parse(rec)[1]["after"]["text"] == "__debezium_unavailable_value"


def test_same_change_twice_gives_the_same_record() -> None:
    assert row_change_records(POSTS, "c", None, ROW, POS, OPTS, NOW) == \
        row_change_records(POSTS, "c", None, ROW, POS, OPTS, NOW)


def test_table_without_primary_key_has_null_key() -> None:
    table = CapturedTable("public", "t", (Column("a", cr.INT4, -1, True),), ())
    [rec] = row_change_records(table, "c", None, ("1",), POS, OPTS, NOW)
    assert rec.key is None


def test_truncate_and_heartbeat_records() -> None:
    key, value = parse(truncate_record(POSTS, POS, OPTS, NOW))
    assert key is None and value["op"] == "t" and value["before"] is None
    hb = heartbeat_record("__feed-heartbeat.feed", OPTS, NOW)
    assert parse(hb) == ({"serverName": "feed"}, {"ts_ms": NOW // 1000})


@pytest.mark.parametrize("oid,typmod,text,expected", [
    (cr.BOOL, -1, "t", True), (cr.BOOL, -1, "f", False),
    (cr.INT2, -1, "-3", -3), (cr.INT8, -1, "9223372036854775807", 9223372036854775807),
    (cr.FLOAT8, -1, "1.5", 1.5), (cr.TEXT, -1, "x", "x"), (cr.VARCHAR, 14, "y", "y"),
    (cr.UUID, -1, "0190a4b2-0000-7000-8000-000000000001", "0190a4b2-0000-7000-8000-000000000001"),
    (cr.JSONB, -1, '{"a": 1}', '{"a": 1}'), (cr.DATE, -1, "1970-01-11", 10),
    (cr.DATE, -1, "1969-12-31", -1),
    (cr.TIMESTAMP, -1, "1970-01-01 00:00:01.25", 1_250_000),
    (cr.TIMESTAMP, 3, "1970-01-01 00:00:01.25", 1_250),
    (cr.TIMESTAMPTZ, -1, "2026-01-02 03:04:05+00", "2026-01-02T03:04:05.000000Z"),
    (cr.TIMESTAMPTZ, -1, "2026-01-02 05:34:05.1+02:30", "2026-01-02T03:04:05.100000Z"),
    (cr.TIMESTAMPTZ, 0, "2026-01-02 03:04:05-01", "2026-01-02T04:04:05Z"),
    (cr.TIME, -1, "01:00:00.5", 3_600_500_000),
    (cr.BYTEA, -1, "\\x0102ff", base64.b64encode(b"\x01\x02\xff").decode()),
])
def test_rendering_matches_debezium_defaults(oid, typmod, text, expected) -> None:
    assert cr.render(text, oid, typmod) == expected


def test_numeric_modes() -> None:
    typmod = ((10 << 16) | 2) + 4  # numeric(10,2)
    assert cr.render("12.50", cr.NUMERIC, typmod) == base64.b64encode(bytes([0x04, 0xE2])).decode()
    assert cr.render("-1.5", cr.NUMERIC, -1) == {"scale": 1, "value": "8Q=="}
    assert cr.render("12.50", cr.NUMERIC, typmod, decimal_mode="string") == "12.50"
    assert cr.render("12.50", cr.NUMERIC, typmod, decimal_mode="double") == 12.5


def test_unknown_type_fails_clearly_or_renders_text_when_asked() -> None:
    with pytest.raises(cr.UnsupportedColumnType, match=r"public.t.addr: type oid 869"):
        cr.render("10.0.0.1", 869, -1, where="public.t.addr")
    assert cr.render("10.0.0.1", 869, -1, unknown_types="text") == "10.0.0.1"


def test_snapshot_marks_follow_debezium() -> None:
    assert snapshot_mark(True, False, True, False) == "first"
    assert snapshot_mark(False, False, True, False) == "first_in_data_collection"
    assert snapshot_mark(False, False, False, False) == "true"
    assert snapshot_mark(False, False, False, True) == "last_in_data_collection"
    assert snapshot_mark(False, False, True, True) == "last_in_data_collection"
    assert snapshot_mark(False, True, False, True) == "last"
    assert snapshot_mark(True, True, True, True) == "last"


def test_frontier_confirms_only_a_fully_acked_prefix() -> None:
    f = AckFrontier(10)
    t1, t2 = f.begin(1), f.begin(2)
    for tx in (t1, t1, t2):
        f.sent(tx)
    f.commit(t1, 100)
    f.commit(t2, 200)
    f.acked(t2)  # the later transaction is acked first (another partition)
    assert f.advance() == [] and f.confirmed == 10
    f.acked(t1)
    assert f.advance() == [] and f.confirmed == 10
    f.acked(t1)
    assert [t.end_lsn for t in f.advance()] == [100, 200] and f.confirmed == 200


def test_frontier_never_confirms_an_uncommitted_transaction() -> None:
    f = AckFrontier(10)
    tx = f.begin(1)
    f.idle_at(500)
    assert f.advance() == [] and f.confirmed == 10 and not f.is_idle
    f.commit(tx, 50)
    f.advance()
    f.idle_at(500)
    assert f.confirmed == 500
