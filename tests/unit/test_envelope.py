"""Debezium envelope parsing shared by every CDC consumer (services/shared/contracts/envelope.py)."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from services.shared.contracts.envelope import (MalformedEnvelope, parse_change, parse_jsonb,
                                                parse_key, parse_timestamp)


def _value(op="c", before=None, after=None, lsn=24023128, **source):
    return json.dumps({"before": before, "after": after, "op": op, "ts_ms": 1,
                       "source": {"lsn": lsn, "txId": 7, "ts_ms": 1700, "table": "posts",
                                  "snapshot": "false", **source}})


def test_create_is_parsed_with_lsn_table_and_key():
    c = parse_change(b'{"post_id": 5}', _value(after={"post_id": 5}))
    assert (c.op, c.table, c.lsn, c.key, c.row, c.commit_ts_ms) == ("c", "posts", 24023128,
                                                                   {"post_id": 5}, {"post_id": 5}, 1700)
    assert not c.snapshot and not c.is_delete


def test_delete_uses_the_before_image():
    c = parse_change(b'{"post_id": 5}', _value("d", before={"post_id": 5}))
    assert c.is_delete and c.row == {"post_id": 5}


def test_tombstone_is_none():
    assert parse_change(b'{"post_id": 5}', None) is None


def test_snapshot_read_is_flagged():
    assert parse_change(None, _value("r", after={"x": 1}, snapshot="true")).snapshot


def test_envelope_with_schema_wrapper_is_accepted():
    payload = json.loads(_value(after={"post_id": 1}))
    c = parse_change(json.dumps({"schema": {}, "payload": {"post_id": 1}}),
                     json.dumps({"schema": {}, "payload": payload}))
    assert c.key == {"post_id": 1} and c.row == {"post_id": 1}


@pytest.mark.parametrize("value", [
    b"not json", b"[1,2]", _value(op="x", after={}), _value(after=None),
    _value("d", before=None), _value(after={"a": 1}, lsn=None), _value(after={"a": 1}, lsn="12"),
    json.dumps({"op": "c", "after": {}}),
])
def test_malformed_envelopes_are_poison(value):
    with pytest.raises(MalformedEnvelope):
        parse_change(b"{}", value)


def test_key_must_be_an_object():
    with pytest.raises(MalformedEnvelope):
        parse_key(b"[1]")


def test_timestamps_and_jsonb_renderings():
    assert parse_timestamp("2026-08-15T02:00:00Z") == datetime(2026, 8, 15, 2, tzinfo=timezone.utc)
    assert parse_timestamp("2026-08-15T04:00:00.5+02:00") == datetime(2026, 8, 15, 2, 0, 0, 500000,
                                                                      tzinfo=timezone.utc)
    assert parse_timestamp(None) is None
    assert parse_jsonb('["m1"]') == ["m1"] and parse_jsonb({"a": 1}) == {"a": 1}
    with pytest.raises(MalformedEnvelope):
        parse_timestamp("yesterday")
