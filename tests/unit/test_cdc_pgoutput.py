"""pgoutput v1 decoder: every message type, TupleData kinds, malformed input."""
from __future__ import annotations

import struct

import pytest

from services.cdc.pgoutput import (PG_EPOCH_OFFSET_US, UNCHANGED_TOAST, Begin, Commit, Delete,
                                   Insert, LogicalMessage, Origin, ProtocolError, Relation,
                                   Truncate, TypeInfo, Update, decode, lsn_from_str, lsn_to_str)


def s(text: str) -> bytes:
    return text.encode() + b"\0"


def tuple_data(*values) -> bytes:
    out = struct.pack(">h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNCHANGED_TOAST:
            out += b"u"
        else:
            raw = v.encode()
            out += b"t" + struct.pack(">i", len(raw)) + raw
    return out


def test_begin_carries_final_lsn_unix_commit_time_and_xid() -> None:
    msg = decode(b"B" + struct.pack(">QqI", 0x16B3748, 1_000_000, 4_000_000_000))
    assert msg == Begin(final_lsn=0x16B3748, commit_ts_us=1_000_000 + PG_EPOCH_OFFSET_US,
                        xid=4_000_000_000)


def test_commit_has_commit_and_end_lsn() -> None:
    msg = decode(b"C" + struct.pack(">bQQq", 0, 100, 180, 5))
    assert msg == Commit(0, 100, 180, 5 + PG_EPOCH_OFFSET_US)


def test_relation_lists_columns_with_type_oid_typmod_and_key_flag() -> None:
    body = (struct.pack(">I", 16384) + s("public") + s("posts") + b"f" + struct.pack(">h", 2)
            + struct.pack(">b", 1) + s("post_id") + struct.pack(">Ii", 20, -1)
            + struct.pack(">b", 0) + s("text") + struct.pack(">Ii", 25, -1))
    rel = decode(b"R" + body)
    assert isinstance(rel, Relation)
    assert (rel.rel_id, rel.namespace, rel.name, rel.replica_identity) == (16384, "public",
                                                                          "posts", "f")
    assert [(c.name, c.type_oid, c.is_key) for c in rel.columns] == [("post_id", 20, True),
                                                                     ("text", 25, False)]


def test_insert_tuple_with_null_text_and_unicode() -> None:
    msg = decode(b"I" + struct.pack(">I", 7) + b"N" + tuple_data("1", None, "héllo ✓"))
    assert msg == Insert(7, ("1", None, "héllo ✓"))


def test_update_with_full_old_image_and_unchanged_toast() -> None:
    body = (struct.pack(">I", 7) + b"O" + tuple_data("1", "old") + b"N"
            + tuple_data("1", UNCHANGED_TOAST))
    msg = decode(b"U" + body)
    assert msg == Update(7, ("1", "old"), False, ("1", UNCHANGED_TOAST))


def test_update_without_old_tuple() -> None:
    msg = decode(b"U" + struct.pack(">I", 7) + b"N" + tuple_data("1", "new"))
    assert msg == Update(7, None, False, ("1", "new"))


def test_update_with_key_only_old_tuple() -> None:
    msg = decode(b"U" + struct.pack(">I", 7) + b"K" + tuple_data("1", None) + b"N"
                 + tuple_data("2", "x"))
    assert isinstance(msg, Update) and msg.old_is_key_only and msg.old == ("1", None)


def test_delete_with_full_old_image() -> None:
    msg = decode(b"D" + struct.pack(">I", 7) + b"O" + tuple_data("1", "gone"))
    assert msg == Delete(7, ("1", "gone"), False)


def test_truncate_lists_relations() -> None:
    msg = decode(b"T" + struct.pack(">ibII", 2, 1, 7, 8))
    assert msg == Truncate(1, (7, 8))


def test_type_origin_and_logical_message() -> None:
    assert decode(b"Y" + struct.pack(">I", 90000) + s("public") + s("mood")) == \
        TypeInfo(90000, "public", "mood")
    assert decode(b"O" + struct.pack(">Q", 55) + s("node_a")) == Origin(55, "node_a")
    assert decode(b"M" + struct.pack(">bQ", 1, 9) + s("pfx") + struct.pack(">i", 3) + b"abc") \
        == LogicalMessage(True, 9, "pfx", b"abc")


@pytest.mark.parametrize("payload", [b"", b"Z", b"B\x00\x01", b"I" + struct.pack(">I", 1) + b"X",
                                     b"I" + struct.pack(">I", 1) + b"N" + struct.pack(">h", 1)
                                     + b"t" + struct.pack(">i", 50) + b"short",
                                     b"R" + struct.pack(">I", 1) + b"no-terminator"])
def test_malformed_messages_raise_protocol_error(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode(payload)


def test_lsn_text_form_round_trips() -> None:
    assert lsn_to_str(0x1_0000_00AB) == "1/AB"
    assert lsn_from_str("1/AB") == 0x1_0000_00AB
