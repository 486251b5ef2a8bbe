"""One connection to each store a process needs, at its start.

A store that refuses who we are (a wrong or missing password), or that we refuse (a CA
we do not trust, a certificate for another name, a plaintext client at a TLS port), ends
the process with one line naming the store and the settings to look at: retrying
cannot mend configuration, and a traceback loop against a wrong password only locks the
account. A store that is merely not up yet is left to the process's own retries.
"""
from __future__ import annotations

import logging
import ssl
import sys
from typing import Callable, Iterable

from services.shared.settings import CassandraSettings, KafkaSettings, PostgresSettings

log = logging.getLogger("feed.preflight")


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
    ("sasl", "FEED_KAFKA_SECURITY_PROTOCOL / FEED_KAFKA_SASL_MECHANISM"),
    ("certificate verify failed", "FEED_KAFKA_SSL_CA_FILE"),
    ("hostname", "FEED_KAFKA_BOOTSTRAP (the certificate's names) or FEED_KAFKA_SSL_CHECK_HOSTNAME"),
    ("security.protocol", "FEED_KAFKA_SECURITY_PROTOCOL"),
    ("ssl handshake failed", "FEED_KAFKA_SECURITY_PROTOCOL / FEED_KAFKA_SSL_CA_FILE"),
)
_CASSANDRA = (
    ("requires authentication", "FEED_CASSANDRA_USERNAME / FEED_CASSANDRA_PASSWORD"),
    ("authentication", "FEED_CASSANDRA_USERNAME / FEED_CASSANDRA_PASSWORD"),
    ("certificate verify failed", "FEED_CASSANDRA_SSL_CA_FILE"),
    ("mismatch", "FEED_CASSANDRA_HOSTS (the certificates' names) or FEED_CASSANDRA_SSL_CHECK_HOSTNAME"),
    ("ssl", "FEED_CASSANDRA_SSL / FEED_CASSANDRA_SSL_CA_FILE"),
    ("wrong version number", "FEED_CASSANDRA_SSL (the node does not speak TLS there)"),
)


def _match(store: str, text: str, table: Iterable[tuple[str, str]]) -> StoreRefused | None:
    lowered = text.lower()
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


def check_kafka(settings: KafkaSettings, timeout_s: float = 15.0) -> None:
    from confluent_kafka import KafkaException

    from . import kafka
    errors: list[str] = []
    client = kafka.admin(settings, {"error_cb": lambda err: errors.append(str(err)),
                                    "socket.timeout.ms": 5000},
                         logger=kafka.quiet_logger("feed.preflight.kafka"))
    try:
        client.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        errors.append(str(exc))
    for text in errors:
        refused = _match("kafka", text, _KAFKA)
        if refused:
            raise refused
    if errors:
        log.warning("kafka: not reachable yet (%s); the process retries", errors[-1][:200])


def check_cassandra(settings: CassandraSettings) -> None:
    from cassandra.cluster import NoHostAvailable

    from . import cql
    cluster = cql.cluster(settings, connect_timeout=10)
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
        cluster.shutdown()


CHECKS: dict[str, Callable[..., None]] = {
    "postgres": check_postgres, "kafka": check_kafka, "cassandra": check_cassandra}


def preflight(settings: PostgresSettings | KafkaSettings | CassandraSettings,
              stores: Iterable[str]) -> None:
    """Check each named store; on a refusal, print its one line and exit (status 2)."""
    for store in stores:
        try:
            CHECKS[store](settings)
        except StoreRefused as refused:
            print(refused.code, file=sys.stderr, flush=True)
            raise SystemExit(2) from None
