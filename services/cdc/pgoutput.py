"""Decoder for pgoutput protocol version 1: bytes of one XLogData payload -> one message.

Pure and I/O-free. Layouts are PostgreSQL's "Logical Replication Message Formats":
big-endian integers, NUL-terminated strings. Column values stay in Postgres's text output
form (``str``), ``None`` for SQL NULL, or ``UNCHANGED_TOAST`` for a TOASTed value the
server did not send because the update did not touch it; rendering them is the envelope
mapping's job, so snapshot rows (read as text) and streamed rows go through the same code.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final, Union

# Postgres timestamps count microseconds from 2000-01-01; Unix time from 1970-01-01.
PG_EPOCH_OFFSET_US: Final = 946_684_800 * 1_000_000


class UnchangedToast:
    """Marker for pgoutput's 'u' column kind (an unchanged TOASTed value, not sent)."""

    _instance: "UnchangedToast | None" = None

    def __new__(cls) -> "UnchangedToast":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST: Final = UnchangedToast()
ColumnValue = Union[str, None, UnchangedToast]
Row = tuple[ColumnValue, ...]


class ProtocolError(ValueError):
    """The payload is not a well-formed pgoutput v1 message."""


@dataclass(frozen=True)
class Column:
    name: str
    type_oid: int
    typmod: int
    is_key: bool


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    commit_ts_us: int  # Unix microseconds
    xid: int


@dataclass(frozen=True)
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts_us: int


@dataclass(frozen=True)
class Origin:
    commit_lsn: int
    name: str


@dataclass(frozen=True)
class Relation:
    rel_id: int
    namespace: str
    name: str
    replica_identity: str  # d default, n nothing, f full, i index
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class TypeInfo:
    type_oid: int
    namespace: str
    name: str


@dataclass(frozen=True)
class Insert:
    rel_id: int
    new: Row


@dataclass(frozen=True)
class Update:
    rel_id: int
    old: Row | None  # present with REPLICA IDENTITY FULL ('O') or a changed key ('K')
    old_is_key_only: bool
    new: Row


@dataclass(frozen=True)
class Delete:
    rel_id: int
    old: Row
    old_is_key_only: bool


@dataclass(frozen=True)
class Truncate:
    options: int  # bit 1 CASCADE, bit 2 RESTART IDENTITY
    rel_ids: tuple[int, ...]


@dataclass(frozen=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


Message = Union[Begin, Commit, Origin, Relation, TypeInfo, Insert, Update, Delete, Truncate,
                LogicalMessage]


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def _take(self, fmt: str, size: int) -> int:
        if self.pos + size > len(self.buf):
            raise ProtocolError(f"message truncated at byte {self.pos} (needs {size} more)")
        value: int  # every format read here is one integer
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def int8(self) -> int:
        return self._take(">b", 1)

    def byte(self) -> str:
        return chr(self._take(">B", 1))

    def int16(self) -> int:
        return self._take(">h", 2)

    def int32(self) -> int:
        return self._take(">i", 4)

    def uint32(self) -> int:
        return self._take(">I", 4)

    def int64(self) -> int:
        return self._take(">q", 8)

    def lsn(self) -> int:
        return self._take(">Q", 8)

    def string(self) -> str:
        end = self.buf.find(b"\0", self.pos)
        if end < 0:
            raise ProtocolError(f"unterminated string at byte {self.pos}")
        value = self.buf[self.pos:end].decode("utf-8")
        self.pos = end + 1
        return value

    def raw(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.buf):
            raise ProtocolError(f"value of {size} bytes overruns the message at byte {self.pos}")
        value = self.buf[self.pos:self.pos + size]
        self.pos += size
        return bytes(value)

    def tuple_data(self) -> Row:
        count = self.int16()
        values: list[ColumnValue] = []
        for _ in range(count):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED_TOAST)
            elif kind == "t":
                values.append(self.raw(self.int32()).decode("utf-8"))
            elif kind == "b":
                raise ProtocolError("binary column values need proto option binary, not used")
            else:
                raise ProtocolError(f"unknown TupleData column kind {kind!r}")
        return tuple(values)


def _ts(pg_us: int) -> int:
    return pg_us + PG_EPOCH_OFFSET_US


def decode(payload: bytes) -> Message:
    """Decode one pgoutput v1 message (the payload of one XLogData)."""
    if not payload:
        raise ProtocolError("empty message")
    r = _Reader(payload)
    tag = r.byte()
    if tag == "B":
        return Begin(final_lsn=r.lsn(), commit_ts_us=_ts(r.int64()), xid=r.uint32())
    if tag == "C":
        return Commit(flags=r.int8(), commit_lsn=r.lsn(), end_lsn=r.lsn(),
                      commit_ts_us=_ts(r.int64()))
    if tag == "O":
        return Origin(commit_lsn=r.lsn(), name=r.string())
    if tag == "R":
        rel_id, namespace, name = r.uint32(), r.string(), r.string()
        identity = r.byte()
        columns = []
        for _ in range(r.int16()):
            flags = r.int8()
            columns.append(Column(name=r.string(), type_oid=r.uint32(), typmod=r.int32(),
                                  is_key=bool(flags & 1)))
        return Relation(rel_id, namespace or "pg_catalog", name, identity, tuple(columns))
    if tag == "Y":
        return TypeInfo(type_oid=r.uint32(), namespace=r.string(), name=r.string())
    if tag == "I":
        rel_id = r.uint32()
        if r.byte() != "N":
            raise ProtocolError("Insert without a new tuple")
        return Insert(rel_id, r.tuple_data())
    if tag == "U":
        rel_id = r.uint32()
        kind = r.byte()
        old: Row | None = None
        key_only = False
        if kind in ("K", "O"):
            key_only = kind == "K"
            old = r.tuple_data()
            kind = r.byte()
        if kind != "N":
            raise ProtocolError(f"Update: expected new tuple 'N', got {kind!r}")
        return Update(rel_id, old, key_only, r.tuple_data())
    if tag == "D":
        rel_id = r.uint32()
        kind = r.byte()
        if kind not in ("K", "O"):
            raise ProtocolError(f"Delete: expected 'K' or 'O', got {kind!r}")
        return Delete(rel_id, r.tuple_data(), kind == "K")
    if tag == "T":
        count = r.int32()
        options = r.int8()
        return Truncate(options, tuple(r.uint32() for _ in range(count)))
    if tag == "M":
        flags = r.int8()
        lsn = r.lsn()
        prefix = r.string()
        return LogicalMessage(bool(flags & 1), lsn, prefix, r.raw(r.int32()))
    raise ProtocolError(f"unknown pgoutput message type {tag!r}")


def lsn_to_str(lsn: int) -> str:
    """Postgres's textual LSN form, e.g. ``0/16B3748``."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def lsn_from_str(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)
