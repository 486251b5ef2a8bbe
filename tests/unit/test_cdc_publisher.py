"""The relay's delivery reports: only a report with an offset lets a transaction retire."""
from __future__ import annotations

import json

from services.cdc import publisher as pub
from services.cdc.envelope import OutRecord
from services.shared.settings import Settings


class _Msg:
    def __init__(self, partition: int, offset: int | None) -> None:
        self._partition, self._offset = partition, offset

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int | None:
        return self._offset


class _Producer:
    """Keeps the delivery callbacks; the test plays Kafka's answers."""

    def __init__(self, _conf: dict) -> None:
        self.callbacks: list = []

    def produce(self, topic, value=None, key=None, on_delivery=None) -> None:  # noqa: ANN001
        self.callbacks.append(on_delivery)

    def poll(self, _timeout: float = 0.0) -> int:
        return 0


def _publisher(monkeypatch, tmp_path, trace: bool = True) -> pub.KafkaPublisher:  # noqa: ANN001
    # The relay's producer comes from the client factory: the fake stands in for it.
    monkeypatch.setattr(pub.kafka, "producer", lambda _settings, conf=None, **_kw: _Producer(conf or {}))
    path = str(tmp_path / "trace.jsonl") if trace else ""
    return pub.KafkaPublisher(Settings(cdc_delivery_trace=path))


def _record() -> OutRecord:
    return OutRecord(topic="feed.public.follows", key=b"k", value=b"v")


def test_a_report_with_an_offset_acks_and_is_traced(monkeypatch, tmp_path) -> None:
    p = _publisher(monkeypatch, tmp_path)
    acked: list[int] = []
    p.send(_record(), lambda: acked.append(1), (5698, 123))
    p._producer.callbacks[0](None, _Msg(0, 161))
    p.raise_on_failure()
    p.close_trace()
    assert acked == [1]
    (line,) = [json.loads(x) for x in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert line == {"xid": 5698, "lsn": 123, "topic": "feed.public.follows", "partition": 0,
                    "offset": 161, "error": None}


def test_an_implicit_ack_without_an_offset_fails_the_relay_instead_of_retiring(monkeypatch,
                                                                             tmp_path) -> None:
    p = _publisher(monkeypatch, tmp_path, trace=False)
    acked: list[int] = []
    p.send(_record(), lambda: acked.append(1))
    p._producer.callbacks[0](None, _Msg(0, -1001))  # RD_KAFKA_OFFSET_INVALID
    assert acked == []
    try:
        p.raise_on_failure()
    except pub.DeliveryFailed as exc:
        assert "implicit ack" in str(exc)
    else:
        raise AssertionError("a report without an offset must fail the relay")
