"""One typed settings object for every process, read from FEED_* environment variables.

Built once per process (``get_settings()``) and overridable in tests. Hosts and ports
default to loopback, matching what ``deploy/stack.py`` starts.
"""
from __future__ import annotations

from functools import lru_cache

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FEED_", extra="ignore")

    # Postgres: the source of truth.
    pg_host: str = "127.0.0.1"
    pg_port: int = 55432
    pg_user: str = "feed"
    pg_password: str = "feed"
    pg_database: str = "feed"

    # Kafka: comma-separated bootstrap servers.
    kafka_bootstrap: str = "127.0.0.1:9092"
    # Debezium's topic.prefix: topics are <prefix>.public.<table>.
    topic_prefix: str = "feed"

    # Cassandra: the serving store.
    cassandra_hosts: str = "127.0.0.1"
    cassandra_port: int = 9042
    cassandra_keyspace: str = "feed"
    cassandra_replication_factor: int = 1

    # Auth. Development default only; production sets FEED_JWT_SECRET.
    jwt_secret: SecretStr = Field(default=SecretStr("dev-only-change-me-0123456789abcdef"))
    # Cursor signing keys, "kid:secret,kid:secret"; the first signs, all verify (rotation).
    cursor_keys: SecretStr = Field(default=SecretStr("k1:dev-cursor-secret-0123456789abcdef"))

    @property
    def pg_dsn(self) -> str:
        return (
            f"host={self.pg_host} port={self.pg_port} user={self.pg_user} "
            f"password={self.pg_password} dbname={self.pg_database}"
        )

    @property
    def cassandra_contact_points(self) -> list[str]:
        return [h.strip() for h in self.cassandra_hosts.split(",") if h.strip()]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
