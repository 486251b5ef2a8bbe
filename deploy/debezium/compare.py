"""Field-by-field comparison of the relay's records with Debezium's. Pure.

Records are paired per (table, key) in arrival order (both keep per-key order). Each
differing leaf is a ``Difference``; the ones explained in docs/cdc.md are ``documented``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypedDict

# path -> why the values differ by construction (docs/cdc.md, "Differences from Debezium").
DOCUMENTED: dict[str, str] = {
    "value.source.version": "the relay names its own version (3.6.1.Final+feed-relay)",
    "value.source.name": "each side has its own topic prefix in the check",
    "value.ts_ms": "processing time of each process",
    "value.ts_us": "processing time of each process",
    "value.ts_ns": "processing time of each process",
}
# Differences documented only for snapshot reads (op r): each side has its own slot, so
# its own consistent point, and reads at its own time.
DOCUMENTED_SNAPSHOT: dict[str, str] = {
    "value.source.ts_ms": "snapshot read time of each process",
    "value.source.ts_us": "snapshot read time of each process",
    "value.source.ts_ns": "snapshot read time of each process",
    "value.source.lsn": "each side's own slot consistent point",
    "value.source.sequence": "each side's own slot consistent point",
    "value.source.txId": "each side's own snapshot transaction",
}


@dataclass(frozen=True)
class Difference:
    table: str
    key: str
    index: int
    path: str
    relay: Any
    debezium: Any
    documented: bool

    def describe(self) -> str:
        return (f"{self.table} {self.key} #{self.index} {self.path}: "
                f"relay={json.dumps(self.relay)[:80]} debezium={json.dumps(self.debezium)[:80]}")


class Record(TypedDict):
    """One consumed change event (deploy/debezium/check.py ``_consume``)."""

    table: str  # the topic's last part, e.g. "posts"
    partition: int | None  # confluent_kafka types it optional; a consumed message has one
    key: Any  # decoded JSON (None when the message has no key)
    value: Any  # decoded JSON (None for a tombstone)


def _leaves(value: Any, path: str) -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {f"{path}.__keys__": list(value)}
        for k, v in value.items():
            out.update(_leaves(v, f"{path}.{k}"))
        return out
    return {path: value}


def _group(records: list[Record]) -> dict[tuple[str, str], list[Record]]:
    groups: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        groups.setdefault((r["table"], json.dumps(r["key"], sort_keys=True)), []).append(r)
    return groups


def compare_streams(relay: list[Record], debezium: list[Record]) -> list[Difference]:
    out: list[Difference] = []
    ours, theirs = _group(relay), _group(debezium)
    for table_key in sorted(set(ours) | set(theirs)):
        a, b = ours.get(table_key, []), theirs.get(table_key, [])
        table, key = table_key
        if len(a) != len(b):
            out.append(Difference(table, key, -1, "record count", len(a), len(b), False))
        for i, (ra, rb) in enumerate(zip(a, b)):
            la = _leaves({"partition": ra["partition"], "value": ra["value"]}, "")
            lb = _leaves({"partition": rb["partition"], "value": rb["value"]}, "")
            snapshot = (ra["value"] or {}).get("op") == "r"
            for path in sorted(set(la) | set(lb)):
                va, vb = la.get(path, "<absent>"), lb.get(path, "<absent>")
                if va == vb:
                    continue
                p = path.lstrip(".")
                documented = p in DOCUMENTED or (snapshot and p in DOCUMENTED_SNAPSHOT)
                out.append(Difference(table, key, i, p, va, vb, documented))
    return out
