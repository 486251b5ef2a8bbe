"""One connection to each store a process needs, at its start.

A store that refuses who we are (a wrong or missing password), or that we refuse (a CA
we do not trust, a certificate for another name, a plaintext client at a TLS port), ends
the process with one line naming the store and the settings to look at: retrying
cannot mend configuration, and a traceback loop against a wrong password only locks the
account. A store that is merely not up yet is left to the process's own retries.
"""
from __future__ import annotations

import logging
import re
import ssl
import sys
import time
from typing import Callable, Iterable

from services.shared.settings import CassandraSettings, KafkaSettings, PostgresSettings

log = logging.getLogger("feed.preflight")


# sysexits.h's EX_CONFIG: a supervisor (deploy/supervise.py) does not restart a process
# that ended with it, since the same settings would be refused again.
EXIT_CONFIG = 78


class StoreRefused(SystemExit):
    """A store's configuration is wrong: the one line says which store and setting."""


# (substring of the client's error, the settings to look at)
_PG = (
    ("password authentication failed", "FEED_PG_USER / FEED_PG_PASSWORD"),
    ("no password supplied", "FEED_PG_PASSWORD"),
    ("certificate verify failed", "FEED_PG_SSLROOTCERT"),
    ("root certificate file", "FEED_PG_SSLROOTCERT"),
    ("does not match host name", "FEED_PG_HOST (the certificate's names) or FEED_PG_SSLMODE"),
    ("no encryption", "FEED_PG_SSLMODE (the server accepts only TLS)"),
    ("server does not support ssl", "FEED_PG_SSLMODE (the server has no TLS)"),
    ("no pg_hba.conf entry", "FEED_PG_USER / FEED_PG_SSLMODE (pg_hba refuses this role or this transport)"),
    ("certificate", "FEED_PG_SSLCERT / FEED_PG_SSLKEY"),
)
_KAFKA = (
    ("authentication failed", "FEED_KAFKA_SASL_USERNAME / FEED_KAFKA_SASL_PASSWORD"),
    ("invalid credentials", "FEED_KAFKA_SASL_USERNAME / FEED_KAFKA_SASL_PASSWORD"),
    # librdkafka's own check, at the client's creation: SASL without credentials.
    ("sasl.username and sasl.password must be set", "FEED_KAFKA_SASL_USERNAME / FEED_KAFKA_SASL_PASSWORD"),
    # Before "sasl": every error of a SASL_SSL client names its broker sasl_ssl://...
    # librdkafka says the same for an untrusted CA and for a name the certificate does
    # not carry.
    ("certificate verify failed", "FEED_KAFKA_SSL_CA_FILE, or FEED_KAFKA_BOOTSTRAP "
                                  "(a name the brokers' certificates do not carry)"),
    ("hostname", "FEED_KAFKA_BOOTSTRAP (the certificate's names) or FEED_KAFKA_SSL_CHECK_HOSTNAME"),
    ("sasl", "FEED_KAFKA_SECURITY_PROTOCOL / FEED_KAFKA_SASL_MECHANISM"),
    ("security.protocol", "FEED_KAFKA_SECURITY_PROTOCOL"),
    ("ssl handshake failed", "FEED_KAFKA_SECURITY_PROTOCOL / FEED_KAFKA_SSL_CA_FILE"),
    # What librdkafka logs (not an error) when the listener speaks another protocol: a
    # plaintext client at a TLS listener is cut off before its first answer, a TLS client
    # without SASL at a SASL_SSL listener at its first request.
    ("in state apiversion_query", "FEED_KAFKA_SECURITY_PROTOCOL (the listener expects TLS or SASL)"),
    ("ssl connection closed by peer", "FEED_KAFKA_SECURITY_PROTOCOL (the listener expects SASL: SASL_SSL)"),
)
# librdkafka names a broker with its protocol, "sasl_ssl://127.0.0.1:9092/bootstrap: ...":
# not a needle ("sasl"), or a broker that is merely down would read as refused.
_KAFKA_BROKER_SCHEME = re.compile(r"\b(?:sasl_ssl|sasl_plaintext|ssl|plaintext)://", re.IGNORECASE)
_CASSANDRA = (
    ("requires authentication", "FEED_CASSANDRA_USERNAME / FEED_CASSANDRA_PASSWORD"),
    ("authentication", "FEED_CASSANDRA_USERNAME / FEED_CASSANDRA_PASSWORD"),
    ("certificate verify failed", "FEED_CASSANDRA_SSL_CA_FILE"),
    ("mismatch", "FEED_CASSANDRA_HOSTS (the certificates' names) or FEED_CASSANDRA_SSL_CHECK_HOSTNAME"),
    ("ssl", "FEED_CASSANDRA_SSL / FEED_CASSANDRA_SSL_CA_FILE"),
    ("wrong version number", "FEED_CASSANDRA_SSL (the node does not speak TLS there)"),
    # A node that requires TLS resets a plaintext client's first frame (a node that is
    # not up refuses the connection instead).
    ("connection reset by peer", "FEED_CASSANDRA_SSL (the node expects TLS)"),
)


def _match(store: str, text: str, table: Iterable[tuple[str, str]],
           ignore: re.Pattern[str] | None = None) -> StoreRefused | None:
    """The refusal whose needle ``text`` holds (outside what ``ignore`` matches), if any."""
    lowered = (ignore.sub("", text) if ignore else text).lower()
    for needle, where in table:
        if needle in lowered:
            first = " ".join(text.split())[:300]
            return StoreRefused(f"{store}: refused: {first} (check {where})")
    return None


def check_postgres(settings: PostgresSettings) -> None:
    import psycopg

    from . import pg
    try:
        with pg.connect(settings, connect_timeout=10):
            pass
    except psycopg.OperationalError as exc:
        refused = _match("postgres", str(exc), _PG)
        if refused:
            raise refused from None
        log.warning("postgres: not reachable yet (%s); the process retries", str(exc).strip()[:200])


class _Lines(logging.Handler):
    """Collects a client's log lines (librdkafka logs through a Python logger)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(record.getMessage())


def check_kafka(settings: KafkaSettings, timeout_s: float = 15.0) -> None:
    from confluent_kafka import KafkaException

    from . import kafka
    errors: list[str] = []
    lines = _Lines()
    client_log = kafka.quiet_logger("feed.preflight.kafka")
    client_log.setLevel(logging.INFO)
    client_log.addHandler(lines)
    try:
        try:
            client = kafka.admin(settings, {"error_cb": lambda err: errors.append(str(err)),
                                            "socket.timeout.ms": 5000}, logger=client_log)
        except KafkaException as exc:  # librdkafka refuses the configuration itself
            errors.append(str(exc))
        else:
            # Asked in short rounds: a refusal ends the check at its first error, not
            # after the whole timeout (librdkafka keeps reconnecting until then).
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    client.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
                    break
                except KafkaException as exc:
                    errors.append(str(exc))
                client.poll(0)  # error_cb is called from poll
                if _kafka_refusal(errors, lines) or time.monotonic() >= deadline:
                    break
            client.poll(0)
    finally:
        client_log.removeHandler(lines)
    refused = _kafka_refusal(errors, lines)
    if refused:
        raise refused
    if errors:
        log.warning("kafka: not reachable yet (%s); the process retries", errors[-1][:200])


def _kafka_refusal(errors: list[str], lines: _Lines) -> StoreRefused | None:
    """The refusal among the client's errors, if any. librdkafka's log says what its
    errors do not (a protocol mismatch is only a disconnection there): read only once
    an error was reported."""
    for text in errors + (lines.texts if errors else []):
        refused = _match("kafka", text, _KAFKA, ignore=_KAFKA_BROKER_SCHEME)
        if refused:
            return refused
    return None


def check_cassandra(settings: CassandraSettings) -> None:
    from cassandra.cluster import NoHostAvailable

    from . import cql
    cluster = cql.cluster(settings, connect_timeout=10)
    # The driver logs each failed connection with its traceback; the one line below is
    # what an operator needs.
    driver_log = logging.getLogger("cassandra")
    level = driver_log.level
    driver_log.setLevel(logging.CRITICAL)
    try:
        cluster.connect()
    except NoHostAvailable as exc:
        texts = [f"{type(e).__name__}: {e}" for e in exc.errors.values()] or [str(exc)]
        for text in texts:
            refused = _match("cassandra", text, _CASSANDRA)
            if refused:
                raise refused from None
        log.warning("cassandra: not reachable yet (%s); the process retries", texts[0][:200])
    except (ssl.SSLError, OSError) as exc:
        refused = _match("cassandra", f"{type(exc).__name__}: {exc}", _CASSANDRA)
        if refused:
            raise refused from None
    finally:
        driver_log.setLevel(level)
        cluster.shutdown()


CHECKS: dict[str, Callable[..., None]] = {
    "postgres": check_postgres, "kafka": check_kafka, "cassandra": check_cassandra}


def preflight(settings: PostgresSettings | KafkaSettings | CassandraSettings,
              stores: Iterable[str]) -> None:
    """Check each named store; on a refusal, print its one line and exit (EXIT_CONFIG)."""
    for store in stores:
        try:
            CHECKS[store](settings)
        except StoreRefused as refused:
            print(refused.code, file=sys.stderr, flush=True)
            raise SystemExit(EXIT_CONFIG) from None
