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

    # Postgres server's host name or address.
    pg_host: str = "127.0.0.1"
    # Postgres server's TCP port.
    pg_port: int = 25432
    # Role the services log in as.
    pg_user: str = "feed"
    # That role's password.
    pg_password: SecretStr = SecretStr("feed")
    # Database name.
    pg_database: str = "feed"
    # A whole libpq connection string (``host=... sslmode=...`` or a postgresql:// URI).
    # When set it is the base, and only the FEED_PG_* settings given explicitly override it.
    pg_conninfo: SecretStr = SecretStr("")
    # libpq's sslmode; verify-full checks the server's certificate and name.
    pg_sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] = "prefer"
    # CA certificate file (PEM) the server's certificate must chain to (libpq sslrootcert).
    pg_sslrootcert: str = ""
    # Client certificate file (PEM), for servers that require one (libpq sslcert).
    pg_sslcert: str = ""
    # The client certificate's private key file (PEM; libpq sslkey).
    pg_sslkey: str = ""
    # Seconds to wait for a connection to open (libpq connect_timeout).
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


class KafkaSettings(FeedSettings):
    """Kafka (``FEED_KAFKA_*``) and the topics' names."""

    # Comma-separated bootstrap servers (host:port).
    kafka_bootstrap: str = "127.0.0.1:9092"
    # Debezium's topic.prefix: topics are ``<prefix>.public.<table>``.
    topic_prefix: str = "feed"
    # Transport to the brokers; the TLS settings apply only with SSL or SASL_SSL.
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    # SASL mechanism (with SASL_PLAINTEXT or SASL_SSL).
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "SCRAM-SHA-512"
    # SASL user name.
    kafka_sasl_username: str = ""
    # SASL password.
    kafka_sasl_password: SecretStr = SecretStr("")
    # The CA that signed the brokers' certificates (PEM); empty: the system's trust store.
    kafka_ssl_ca_file: str = ""
    # Client certificate file (PEM), for brokers that require mutual TLS.
    kafka_ssl_cert_file: str = ""
    # The client certificate's private key file (PEM).
    kafka_ssl_key_file: str = ""
    # Password of that private key, if it is encrypted.
    kafka_ssl_key_password: SecretStr = SecretStr("")
    # Check that the broker's certificate names the address we connected to.
    kafka_ssl_check_hostname: bool = True
    # Seconds a broker may take to answer before the connection is given up, metadata
    # refreshed and the request retried at the partition's new leader.
    kafka_request_timeout_s: float = 4.0
    # Seconds a broker a client failed to reach is asked last; 0: off (every process's
    # clients: the API's and the workers').
    kafka_failed_broker_hold_s: float = 10.0

    @property
    def kafka_request_timeout_ms(self) -> int:
        """``kafka_request_timeout_s`` as the Kafka clients take it."""
        return int(self.kafka_request_timeout_s * 1000)


class CassandraSettings(FeedSettings):
    """Cassandra, the serving store (``FEED_CASSANDRA_*``)."""

    # Comma-separated contact points (host names or addresses).
    cassandra_hosts: str = "127.0.0.1"
    # CQL native-protocol port.
    cassandra_port: int = 9042
    # The feed's keyspace.
    cassandra_keyspace: str = "feed"
    # Replicas per row, used by the migrator when it creates the keyspace.
    cassandra_replication_factor: int = 1
    # PasswordAuthenticator user name; empty: no authentication.
    cassandra_username: str = ""
    # PasswordAuthenticator password.
    cassandra_password: SecretStr = SecretStr("")
    # Client TLS against the system's trust store (also on whenever a CA file is given).
    cassandra_ssl: bool = False
    # CA certificate file (PEM) the nodes' certificates must chain to; set: TLS is on.
    cassandra_ssl_ca_file: str = ""
    # Client certificate file (PEM), for nodes with require_client_auth.
    cassandra_ssl_cert_file: str = ""
    # The client certificate's private key file (PEM); empty: in the certificate file.
    cassandra_ssl_key_file: str = ""
    # Check that the node's certificate names the address connected to (IP SANs).
    cassandra_ssl_check_hostname: bool = True
    # Seconds a connection may receive nothing before it is probed (only when RF > 1).
    cassandra_heartbeat_s: float = 1.0
    # Seconds a probe may go unanswered before the node is marked down (only when RF > 1).
    cassandra_heartbeat_timeout_s: float = 2.0
    # Each table's speculative_retry: wait before asking another replica (set by
    # deploy/migrate.py when RF > 1).
    cassandra_speculative_retry: str = "MIN(99p,50ms)"

    @property
    def cassandra_contact_points(self) -> list[str]:
        return [h.strip() for h in self.cassandra_hosts.split(",") if h.strip()]

    @property
    def cassandra_tls(self) -> bool:
        return self.cassandra_ssl or bool(self.cassandra_ssl_ca_file)
