"""Every Kafka client gives up on a silent broker after Settings.kafka_request_timeout_s;
the workers' group consumers after no less than their session timeout (faust's rule)."""
from __future__ import annotations

from services.cdc.publisher import producer_config
from services.shared.settings import Settings
from services.shared.worker.faust_app import build_faust_app


def test_the_relay_and_the_workers_use_the_request_timeout() -> None:
    settings = Settings(kafka_request_timeout_s=12.5, kafka_session_timeout_s=10.0)
    config = producer_config(settings)
    assert config["request.timeout.ms"] == config["socket.timeout.ms"] == 12_500
    app = build_faust_app(settings, "timeouts-test")
    assert app.conf.broker_request_timeout == 12.5
    assert app.conf.producer_request_timeout == 12.5


def test_a_group_consumer_never_waits_less_than_its_session() -> None:
    settings = Settings(kafka_request_timeout_s=4.0, kafka_session_timeout_s=6.0)
    app = build_faust_app(settings, "timeouts-test")
    assert app.conf.broker_session_timeout == 6.0
    assert app.conf.broker_request_timeout == 6.0
    assert app.conf.producer_request_timeout == 4.0
    assert producer_config(settings)["request.timeout.ms"] == 4_000
