"""The three stores' settings blocks: where each is, who we are to it, and how the
connection is secured. The client factories (``services/shared/clients``) build every
client from these and nothing else; ``docs/deploy.md`` lists the variables."""
from __future__ import annotations

from typing import Any, Literal

from psycopg.conninfo import make_conninfo
from pydantic import SecretStr

from .base import FeedSettings

# Setting field -> libpq keyword.
_LIBPQ = {"pg_host": "host", "pg_port": "port", "pg_user": "user", "pg_database": "dbname",
          "pg_sslmode": "sslmode", "pg_sslrootcert": "sslrootcert", "pg_sslcert": "sslcert",
          "pg_sslkey": "sslkey", "pg_connect_timeout_s": "connect_timeout"}


class PostgresSettings(FeedSettings):
    """Postgres, the source of truth (``FEED_PG_*``)."""

    pg_host: str = "127.0.0.1"
    pg_port: int = 55432
    pg_user: str = "feed"
    pg_password: SecretStr = SecretStr("feed")
    pg_database: str = "feed"
    # A whole libpq connection string (``host=... sslmode=...`` or a postgresql:// URI).
    # When set it is the base, and only the FEED_PG_* settings given explicitly override it.
    pg_conninfo: SecretStr = SecretStr("")
    # libpq's sslmode; verify-full checks the server's certificate and name.
    pg_sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] = "prefer"
    pg_sslrootcert: str = ""
    pg_sslcert: str = ""
    pg_sslkey: str = ""
    pg_connect_timeout_s: int = 10

    def libpq_conninfo(self, **overrides: Any) -> str:
        """The libpq connection string (secrets included: never log it). With
        ``pg_conninfo`` set, that string is the base and only the settings given
        explicitly (and ``overrides``) replace its keywords."""
        base = self.pg_conninfo.get_secret_value()
        given = self.model_fields_set if base else set(_LIBPQ) | {"pg_password"}
        params: dict[str, Any] = {kw: getattr(self, field) for field, kw in _LIBPQ.items()
                                  if field in given and getattr(self, field) != ""}
        if "pg_password" in given and self.pg_password.get_secret_value():
            params["password"] = self.pg_password.get_secret_value()
        params.update(overrides)
        return make_conninfo(base, **params)

    @property
    def pg_dsn(self) -> str:
        return self.libpq_conninfo()


class KafkaSettings(FeedSettings):
    """Kafka (``FEED_KAFKA_*``) and the topics' names."""

    # Comma-separated bootstrap servers.
    kafka_bootstrap: str = "127.0.0.1:9092"
    # Debezium's topic.prefix: topics are <prefix>.public.<table>.
    topic_prefix: str = "feed"
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "SCRAM-SHA-512"
    kafka_sasl_username: str = ""
    kafka_sasl_password: SecretStr = SecretStr("")
    # The CA that signed the brokers' certificates (PEM); empty: the system's trust store.
    kafka_ssl_ca_file: str = ""
    # A client certificate and key (PEM), for brokers that require mutual TLS.
    kafka_ssl_cert_file: str = ""
    kafka_ssl_key_file: str = ""
    kafka_ssl_key_password: SecretStr = SecretStr("")
    # Check that the broker's certificate names the address we connected to.
    kafka_ssl_check_hostname: bool = True
    # A broker not answering within this is given up on (the connection), metadata is
    # refreshed and the request retried at the partition's new leader (docs/configuration.md).
    kafka_request_timeout_s: float = 4.0

    @property
    def kafka_request_timeout_ms(self) -> int:
        """``kafka_request_timeout_s`` as the Kafka clients take it."""
        return int(self.kafka_request_timeout_s * 1000)


class CassandraSettings(FeedSettings):
    """Cassandra, the serving store (``FEED_CASSANDRA_*``)."""

    cassandra_hosts: str = "127.0.0.1"
    cassandra_port: int = 9042
    cassandra_keyspace: str = "feed"
    cassandra_replication_factor: int = 1
    # PasswordAuthenticator credentials; empty user: no authentication.
    cassandra_username: str = ""
    cassandra_password: SecretStr = SecretStr("")
    # Client encryption: on when a CA file is given (PEM), or when cassandra_ssl is true
    # (then the system's trust store).
    cassandra_ssl: bool = False
    cassandra_ssl_ca_file: str = ""
    cassandra_ssl_cert_file: str = ""
    cassandra_ssl_key_file: str = ""
    # Check that the node's certificate names the address connected to (IP SANs).
    cassandra_ssl_check_hostname: bool = True
    # A silent node is convicted this fast where other replicas exist (docs/configuration.md).
    cassandra_heartbeat_s: float = 1.0
    cassandra_heartbeat_timeout_s: float = 2.0
    # Each table's speculative_retry (set by deploy/migrate.py when RF > 1).
    cassandra_speculative_retry: str = "MIN(99p,50ms)"

    @property
    def cassandra_contact_points(self) -> list[str]:
        return [h.strip() for h in self.cassandra_hosts.split(",") if h.strip()]

    @property
    def cassandra_tls(self) -> bool:
        return self.cassandra_ssl or bool(self.cassandra_ssl_ca_file)
