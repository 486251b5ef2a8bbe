"""Every schema example reaches the fan-out and ranker decision code, and what the
fan-out publishes conforms to its schemas (schemas/README.md)."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from services.fanout.audience import post_action, post_fields
from services.fanout.cleanup import purges_for_block, purges_for_unfollow
from services.ranker.features import parse_feature_event
from services.shared.contracts import edge_counts, rank_moves, reader_events
from services.shared.contracts.envelope import parse_change
from services.shared.contracts.feed_events import AuthorPosted
from services.shared.contracts.feed_events import encode as encode_event
from tests.support.schemas import examples_for, validation_errors

# inbox-events too: retired, its examples still conform to its (deprecated) schema.
OWN_TOPICS = ("inbox-events", "author-events", "rank-features", "rank-key-moves", "follow-counts",
              "like-counts", "reader-events")


def _raw(x):
    return None if x is None else json.dumps(x).encode()


@pytest.mark.parametrize("suffix", ["public.posts", "public.follows", "public.blocks", "public.likes"])
def test_every_cdc_example_is_understood_by_the_consumers(suffix):
    examples = examples_for(suffix)
    assert examples, f"no examples for {suffix}"
    for ex in examples:
        change = parse_change(_raw(ex.key), _raw(ex.value))
        if ex.value is None:
            assert change is None, ex.name
            continue
        if suffix == "public.posts":
            post_action(change)
            fields = post_fields(change.row, deleted_row=change.is_delete)
            assert fields.text != "__debezium_unavailable_value"
        elif suffix == "public.follows":
            purges_for_unfollow(change)
        elif suffix == "public.blocks":
            purges_for_block(change)
        assert change.lsn > 0, ex.name


@pytest.mark.parametrize("suffix", OWN_TOPICS)
def test_own_examples_conform_to_their_schemas(suffix):
    examples = examples_for(suffix)
    assert examples
    for ex in examples:
        assert validation_errors(suffix, ex.key, ex.value) == [], ex.name


def test_every_rank_features_example_is_parsed_by_the_ranker():
    for ex in examples_for("rank-features"):
        update = parse_feature_event(_raw(ex.value))
        assert update is not None and str(update.post_id) == ex.value["post_id"]


def test_published_events_conform_to_their_schemas():
    ts = datetime(2026, 11, 29, 10, 1, 0, 500000, tzinfo=timezone.utc)
    key, value = encode_event(AuthorPosted(3, 1311768467294912, ts))
    assert validation_errors("author-events", json.loads(key), json.loads(value)) == []


def test_rank_key_moves_round_trip_and_their_examples_are_parsed_by_the_fanout():
    for ex in examples_for("rank-key-moves"):
        move = rank_moves.parse(_raw(ex.value))
        assert move is not None and str(move.post_id) == ex.value["post_id"]
        key, value = rank_moves.encode(move)
        assert rank_moves.parse(value) == move
        assert validation_errors("rank-key-moves", json.loads(key), json.loads(value)) == []


@pytest.mark.parametrize("suffix", ["follow-counts", "like-counts"])
def test_count_records_round_trip_and_their_examples_are_parsed_by_the_owners(suffix):
    for ex in examples_for(suffix):
        record = edge_counts.parse(_raw(ex.value))
        assert record is not None and str(record.counted) == ex.key == ex.value["counted_id"]
        key, value = edge_counts.encode(record)
        assert edge_counts.parse(value) == record
        assert validation_errors(suffix, json.loads(key), json.loads(value)) == []


def test_reader_events_round_trip_and_their_examples_are_parsed_by_the_fanout():
    for ex in examples_for("reader-events"):
        event = reader_events.parse(_raw(ex.value))
        assert event is not None and str(event.reader_id) == ex.key == ex.value["reader_id"]
        key, value = reader_events.encode(event)
        assert reader_events.parse(value) == event
        assert validation_errors("reader-events", json.loads(key), json.loads(value)) == []


def test_a_reader_event_of_a_kind_the_fanout_does_not_know_is_skipped():
    assert reader_events.parse(b'{"type":"reader_left","reader_id":"7"}') is None
    assert reader_events.parse(None) is None


MALFORMED = {
    "rank-key-moves": (rank_moves.parse, [
        b"[]", b'{"post_id": "1"}', b"not json",
        b'{"post_id":"1","author_id":"2","created_at":"2026-11-29T10:00:00Z",'
        b'"from_keys":[],"to_key":1.0,"key_ts":5}']),
    "follow-counts": (edge_counts.parse, [
        b"[]", b"not json", b'{"counted_id":"1","edge_id":"2","active":1,"lsn":5}',
        b'{"counted_id":"1","edge_id":"2","active":true,"lsn":0}',
        b'{"counted_id":"x","edge_id":"2","active":true,"lsn":5}',
        b'{"counted_id":"1","edge_id":"2","active":true,"lsn":true}']),
    "reader-events": (reader_events.parse, [
        b"[]", b"not json", b'{"reader_id":"7","at":"2026-12-04T20:00:00Z"}',
        b'{"type":"reader_returned","reader_id":"7"}',
        b'{"type":"reader_returned","reader_id":7,"at":"2026-12-04T20:00:00Z"}',
        b'{"type":"reader_returned","reader_id":"7","at":"yesterday"}']),
}


@pytest.mark.parametrize("topic,bad", [(t, b) for t, (_p, bads) in MALFORMED.items() for b in bads])
def test_a_malformed_record_of_an_own_topic_is_refused_for_the_dead_letter_queue(topic, bad):
    from services.shared.contracts.envelope import MalformedEnvelope
    parse = MALFORMED[topic][0]
    with pytest.raises(MalformedEnvelope):
        parse(bad)
