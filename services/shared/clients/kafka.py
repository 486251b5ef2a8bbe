"""Kafka clients, every one built here from ``KafkaSettings``: librdkafka's
(confluent-kafka) configuration, aiokafka's keyword arguments and faust's broker
credentials (and faust apps) all say the same security protocol, SASL mechanism and
trust."""
from __future__ import annotations

import logging
import ssl
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.shared.settings import KafkaSettings

if TYPE_CHECKING:
    import faust
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient


def _sasl(k: KafkaSettings) -> bool:
    return k.kafka_security_protocol.startswith("SASL")


def _tls(k: KafkaSettings) -> bool:
    return k.kafka_security_protocol in ("SSL", "SASL_SSL")


def librdkafka_config(k: KafkaSettings) -> dict[str, Any]:
    """The connection part of a confluent-kafka client's configuration."""
    conf: dict[str, Any] = {"bootstrap.servers": k.kafka_bootstrap,
                            "security.protocol": k.kafka_security_protocol.lower()}
    if _sasl(k):
        conf.update({"sasl.mechanisms": k.kafka_sasl_mechanism,
                     "sasl.username": k.kafka_sasl_username,
                     "sasl.password": k.kafka_sasl_password.get_secret_value()})
    if _tls(k):
        if k.kafka_ssl_ca_file:
            conf["ssl.ca.location"] = k.kafka_ssl_ca_file
        if k.kafka_ssl_cert_file:
            conf["ssl.certificate.location"] = k.kafka_ssl_cert_file
        if k.kafka_ssl_key_file:
            conf["ssl.key.location"] = k.kafka_ssl_key_file
        if k.kafka_ssl_key_password.get_secret_value():
            conf["ssl.key.password"] = k.kafka_ssl_key_password.get_secret_value()
        conf["ssl.endpoint.identification.algorithm"] = "https" if k.kafka_ssl_check_hostname else "none"
    return conf


def producer(k: KafkaSettings, conf: dict[str, Any] | None = None, **kwargs: Any) -> "Producer":
    from confluent_kafka import Producer
    return Producer({**librdkafka_config(k), **(conf or {})}, **kwargs)


def consumer(k: KafkaSettings, conf: dict[str, Any] | None = None, **kwargs: Any) -> "Consumer":
    from confluent_kafka import Consumer
    return Consumer({**librdkafka_config(k), **(conf or {})}, **kwargs)


def admin(k: KafkaSettings, conf: dict[str, Any] | None = None, **kwargs: Any) -> "AdminClient":
    from confluent_kafka.admin import AdminClient
    return AdminClient({**librdkafka_config(k), **(conf or {})}, **kwargs)


def ssl_context(k: KafkaSettings) -> ssl.SSLContext | None:
    """The TLS context of the asyncio clients (aiokafka, faust); None without TLS."""
    if not _tls(k):
        return None
    ctx = ssl.create_default_context(cafile=k.kafka_ssl_ca_file or None)
    if k.kafka_ssl_cert_file:
        ctx.load_cert_chain(k.kafka_ssl_cert_file, k.kafka_ssl_key_file or None,
                            k.kafka_ssl_key_password.get_secret_value() or None)
    ctx.check_hostname = k.kafka_ssl_check_hostname
    return ctx


def aiokafka_kwargs(k: KafkaSettings) -> dict[str, Any]:
    """The connection part of an aiokafka client's keyword arguments."""
    kw: dict[str, Any] = {"bootstrap_servers": k.kafka_bootstrap,
                          "security_protocol": k.kafka_security_protocol}
    if _sasl(k):
        kw.update(sasl_mechanism=k.kafka_sasl_mechanism, sasl_plain_username=k.kafka_sasl_username,
                  sasl_plain_password=k.kafka_sasl_password.get_secret_value())
    context = ssl_context(k)
    if context is not None:
        kw["ssl_context"] = context
    return kw


def aio_producer(k: KafkaSettings, **kwargs: Any) -> "AIOKafkaProducer":
    from aiokafka import AIOKafkaProducer
    return AIOKafkaProducer(**aiokafka_kwargs(k), **kwargs)


def aio_consumer(k: KafkaSettings, *topics: str, **kwargs: Any) -> "AIOKafkaConsumer":
    from aiokafka import AIOKafkaConsumer
    return AIOKafkaConsumer(*topics, **aiokafka_kwargs(k), **kwargs)


def faust_broker(k: KafkaSettings) -> dict[str, Any]:
    """faust.App's ``broker`` and ``broker_credentials`` keyword arguments."""
    import faust

    out: dict[str, Any] = {"broker": [f"kafka://{h.strip()}" for h in k.kafka_bootstrap.split(",") if h.strip()]}
    context = ssl_context(k)
    if _sasl(k):
        out["broker_credentials"] = faust.SASLCredentials(
            username=k.kafka_sasl_username, password=k.kafka_sasl_password.get_secret_value(),
            mechanism=k.kafka_sasl_mechanism, ssl_context=context)
    elif context is not None:
        out["broker_credentials"] = faust.SSLCredentials(context)
    return out


def faust_app(k: KafkaSettings, app_id: str, **kwargs: Any) -> "faust.App":
    """A faust app on these settings' brokers, with their credentials (``faust_broker``);
    ``kwargs`` are the app's other options. Its data directory is under the system's
    temporary directory unless ``datadir`` says otherwise: the workers keep no faust
    tables, and faust's default (``<app id>-data`` in the working directory) left a
    folder per app id wherever a worker or a test ran."""
    import faust

    kwargs.setdefault("datadir", str(Path(tempfile.gettempdir()) / "feed-faust.{conf.name}"))
    return faust.App(app_id, **faust_broker(k), **kwargs)


def quiet_logger(name: str) -> logging.Logger:
    """A logger that drops librdkafka's lines (readiness probes expect refused connections)."""
    quiet = logging.getLogger(name)
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    return quiet
