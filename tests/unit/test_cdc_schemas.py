"""Every CDC example is fed to every consumer of its topic; schemas match the relay's output.

Consumers register in CONSUMERS (topic suffix -> callables taking key and value that
raise on a message they cannot handle). Today the CDC topics' consumer here is the schema
itself; the fan-out and ranker consumers add theirs to the same table.
"""
from __future__ import annotations

import json
from typing import Any, Callable

import pytest

from services.cdc import column_rendering as cr
from services.cdc.envelope import CapturedTable, MappingOptions, SourcePosition, row_change_records
from services.cdc.pgoutput import Column
from services.shared.contracts.topics import CAPTURED_TABLES
from tests.support.schemas import examples_for, topic_suffixes, validation_errors


def schema_consumer(topic_suffix: str) -> Callable[[Any, Any], None]:
    def consume(key: Any, value: Any) -> None:
        errors = validation_errors(topic_suffix, key, value)
        assert not errors, errors
    return consume


CONSUMERS: dict[str, list[Callable[[Any, Any], None]]] = {
    f"public.{t}": [schema_consumer(f"public.{t}")] for t in CAPTURED_TABLES}

ALL_EXAMPLES = [ex for suffix in CONSUMERS for ex in examples_for(suffix)]


def test_every_captured_table_has_schemas_and_examples() -> None:
    assert {f"public.{t}" for t in CAPTURED_TABLES} <= set(topic_suffixes())
    for table in CAPTURED_TABLES:
        names = {ex.name for ex in examples_for(f"public.{table}")}
        assert {"create", "delete", "tombstone", "read-snapshot"} <= names


@pytest.mark.parametrize("example", ALL_EXAMPLES, ids=lambda ex: f"{ex.topic_suffix}/{ex.name}")
def test_every_example_is_accepted_by_every_consumer_of_its_topic(example) -> None:
    for consumer in CONSUMERS[example.topic_suffix]:
        consumer(example.key, example.value)


def test_schema_rejects_a_broken_envelope() -> None:
    [example] = [ex for ex in examples_for("public.posts") if ex.name == "create"]
    broken = {**example.value, "op": "x"}
    assert validation_errors("public.posts", example.key, broken)
    assert validation_errors("public.posts", {"id": 1}, example.value)


def test_relay_output_for_each_example_row_matches_the_schema() -> None:
    """The examples are what the relay's mapping produces (re-render their after rows)."""
    for suffix in CONSUMERS:
        [ex] = [e for e in examples_for(suffix) if e.name == "create"]
        after = ex.value["after"]
        oids = {int: cr.INT8, str: cr.TEXT}
        table = CapturedTable("public", suffix.split(".")[1], tuple(
            Column(name, cr.TIMESTAMPTZ if name.endswith(("_at", "_since")) else
                   cr.INT2 if name == "visibility" else oids[type(v)] if v is not None
                   else cr.TIMESTAMPTZ, -1, True) for name, v in after.items()),
            tuple(ex.key))
        text_row = tuple(None if v is None else
                         v.replace("T", " ").replace("Z", "+00") if isinstance(v, str) and
                         name.endswith(("_at", "_since")) else str(v)
                         for name, v in after.items())
        pos = SourcePosition(**{"ts_us": ex.value["source"]["ts_us"], "snapshot": "false",
                                "tx_id": ex.value["source"]["txId"],
                                "lsn": ex.value["source"]["lsn"],
                                "last_commit_lsn": int(json.loads(ex.value["source"]["sequence"])[0])})
        [record] = row_change_records(table, "c", None, text_row, pos,
                                      MappingOptions("feed", "feed"), ex.value["ts_us"])
        assert json.loads(record.value) == ex.value
        assert json.loads(record.key) == ex.key
