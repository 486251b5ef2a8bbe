"""Postgres text output -> the JSON value Debezium's PostgreSQL connector would send.

Pure. Debezium's defaults (time.precision.mode=adaptive, decimal.handling.mode=precise,
binary.handling.mode=bytes, JsonConverter with schemas disabled):

| Postgres type                  | JSON                                                   |
| ------------------------------ | ------------------------------------------------------ |
| bool                           | true / false                                           |
| int2, int4, int8, oid          | number                                                 |
| float4, float8                 | number                                                 |
| numeric(p,s)                   | precise: base64 of the unscaled two's-complement value;|
|                                | string: "12.50"; double: 12.5                          |
| numeric (no scale)             | precise: {"scale": s, "value": base64}                 |
| text, varchar, bpchar, name    | string                                                 |
| uuid, json, jsonb, xml         | string, exactly as Postgres prints it                  |
| bytea                          | base64 string                                          |
| date                           | days since 1970-01-01                                  |
| time                           | microseconds since midnight (milliseconds if p <= 3)   |
| timestamp                      | microseconds since epoch (milliseconds if p <= 3)      |
| timestamptz                    | ISO-8601 UTC string, fraction padded to the column's   |
|                                | precision (6 by default): 2026-01-02T03:04:05.120000Z  |
| anything else                  | ``unknown_types="fail"``: UnsupportedColumnType;       |
|                                | ``"text"``: Postgres's text output as a string         |
"""
from __future__ import annotations

import base64
import datetime as dt
import re
from decimal import Decimal
from typing import Any, Callable, Final

BOOL, BYTEA, NAME, INT8, INT2, INT4, TEXT, OID = 16, 17, 19, 20, 21, 23, 25, 26
JSON, XML, FLOAT4, FLOAT8, BPCHAR, VARCHAR = 114, 142, 700, 701, 1042, 1043
DATE, TIME, TIMESTAMP, TIMESTAMPTZ, NUMERIC, UUID, JSONB = 1082, 1083, 1114, 1184, 1700, 2950, 3802
CHAR = 18

# Debezium's placeholder for a TOASTed column an update did not change
# (unavailable.value.placeholder's default).
UNAVAILABLE_VALUE: Final = "__debezium_unavailable_value"

_EPOCH_DATE: Final = dt.date(1970, 1, 1)
_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_TS_RE: Final = re.compile(
    r"^(?P<date>\d{4,}-\d\d-\d\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)(?:\.(?P<frac>\d{1,6}))?"
    r"(?P<tz>[+-]\d\d(?::\d\d){0,2})?(?P<bc> BC)?$")


class UnsupportedColumnType(ValueError):
    """A column whose type has no rendering, with unknown types set to fail."""


def _precision(typmod: int, default: int = 6) -> int:
    return default if typmod < 0 else typmod


def _parse_ts(text: str) -> tuple[dt.datetime, str | None]:
    m = _TS_RE.match(text)
    if not m or m.group("bc"):
        raise ValueError(f"timestamp out of the rendered range: {text!r}")
    date = dt.date.fromisoformat(m.group("date"))
    micros = int((m.group("frac") or "0").ljust(6, "0"))
    value = dt.datetime(date.year, date.month, date.day, int(m.group("h")), int(m.group("m")),
                        int(m.group("s")), micros)
    return value, m.group("tz")


def _offset(tz: str) -> dt.timezone:
    sign = -1 if tz[0] == "-" else 1
    parts = [int(p) for p in tz[1:].split(":")] + [0, 0]
    return dt.timezone(sign * dt.timedelta(hours=parts[0], minutes=parts[1], seconds=parts[2]))


def _epoch_units(delta: dt.timedelta, precision: int) -> int:
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return micros // 1000 if precision <= 3 else micros


def render_timestamptz(text: str, typmod: int = -1) -> str:
    value, tz = _parse_ts(text)
    utc = value.replace(tzinfo=_offset(tz or "+00")).astimezone(dt.timezone.utc)
    width = _precision(typmod)
    base = utc.strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{utc.microsecond:06d}"[:width] if width else ""
    return f"{base}.{frac}Z" if frac else f"{base}Z"


def render_timestamp(text: str, typmod: int = -1) -> int:
    value, _ = _parse_ts(text)
    return _epoch_units(value.replace(tzinfo=dt.timezone.utc) - _EPOCH, _precision(typmod))


def render_date(text: str) -> int:
    return (dt.date.fromisoformat(text) - _EPOCH_DATE).days


def render_time(text: str, typmod: int = -1) -> int:
    h, m, rest = text.split(":")
    s, _, frac = rest.partition(".")
    delta = dt.timedelta(hours=int(h), minutes=int(m), seconds=int(s),
                         microseconds=int(frac.ljust(6, "0") or 0))
    return _epoch_units(delta, _precision(typmod))


def _unscaled_bytes(value: Decimal, scale: int) -> bytes:
    unscaled = int(value.scaleb(scale))
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return unscaled.to_bytes(size, "big", signed=True)


def render_numeric(text: str, typmod: int, mode: str) -> Any:
    if text in ("NaN", "Infinity", "-Infinity"):
        return text if mode == "string" else float(text) if mode == "double" else None
    value = Decimal(text)
    if mode == "string":
        return text
    if mode == "double":
        return float(value)
    exponent = value.as_tuple().exponent
    scale = -exponent if isinstance(exponent, int) and exponent < 0 else 0
    if typmod < 0:
        return {"scale": scale,
                "value": base64.b64encode(_unscaled_bytes(value, scale)).decode("ascii")}
    declared = (typmod - 4) & 0xFFFF
    return base64.b64encode(_unscaled_bytes(value, declared)).decode("ascii")


def render_bytea(text: str) -> str:
    if not text.startswith("\\x"):
        raise ValueError("bytea must be in hex output format (bytea_output=hex)")
    return base64.b64encode(bytes.fromhex(text[2:])).decode("ascii")


def _as_string(text: str) -> str:
    return text


_RENDERERS: Final[dict[int, Callable[[str], Any]]] = {
    BOOL: lambda t: t == "t",
    INT2: int, INT4: int, INT8: int, OID: int,
    FLOAT4: float, FLOAT8: float,
    TEXT: _as_string, VARCHAR: _as_string, BPCHAR: _as_string, NAME: _as_string,
    CHAR: _as_string, UUID: _as_string, JSON: _as_string, JSONB: _as_string, XML: _as_string,
    BYTEA: render_bytea, DATE: render_date,
}
_WITH_TYPMOD: Final[dict[int, Callable[[str, int], Any]]] = {
    TIMESTAMPTZ: render_timestamptz, TIMESTAMP: render_timestamp, TIME: render_time,
}


def render(text: str, type_oid: int, typmod: int, *, decimal_mode: str = "precise",
           unknown_types: str = "fail", where: str = "") -> Any:
    """Render one non-NULL column value given in Postgres's text output form."""
    if type_oid in _RENDERERS:
        return _RENDERERS[type_oid](text)
    if type_oid in _WITH_TYPMOD:
        return _WITH_TYPMOD[type_oid](text, typmod)
    if type_oid == NUMERIC:
        return render_numeric(text, typmod, decimal_mode)
    if unknown_types == "text":
        return text
    raise UnsupportedColumnType(
        f"{where or 'column'}: type oid {type_oid} has no rendering; set "
        f"FEED_CDC_UNKNOWN_TYPES=text to send its text form, or change the column type")
