"""Each service's own settings block. Why each default is what it is:
``docs/configuration.md``; every variable: ``docs/deploy.md``."""
from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from .base import FeedSettings


class ApiSettings(FeedSettings):
    """The API (``services/api``): HTTP, auth, the read path, its caches, the fence."""

    # Development machine: the API accepts the built-in secrets below (secret_policy.py).
    dev_mode: bool = False
    # HS256 tokens signed with this secret (development, or a gateway that shares one).
    jwt_secret: SecretStr = Field(default=SecretStr("dev-only-change-me-0123456789abcdef"))
    # Gateway tokens (RS256, ES256): the issuer's JWKS, as a URL or a file. Either turns
    # on the asymmetric algorithms; HS256 stays for jwt_secret.
    jwt_jwks_url: str = ""
    jwt_jwks_file: str = ""
    # Checked when set: the token's iss and aud must match.
    jwt_issuer: str = ""
    jwt_audience: str = ""
    # Clock skew allowed on exp, nbf and iat.
    jwt_leeway_s: float = 30.0
    # How long fetched keys are kept before a refetch; an unknown kid refetches at once,
    # at most once every jwt_jwks_min_refresh_s.
    jwt_jwks_cache_s: float = 300.0
    jwt_jwks_min_refresh_s: float = 10.0
    jwt_jwks_timeout_s: float = 3.0
    # Cursor signing keys, "kid:secret,kid:secret"; the first signs, all verify (rotation).
    cursor_keys: SecretStr = Field(default=SecretStr("k1:dev-cursor-secret-0123456789abcdef"))

    api_host: str = "127.0.0.1"
    api_port: int = 8080
    api_pg_pool_max: int = 10
    # uvicorn worker processes; 0: one per core this process may run on.
    api_workers: int = 0
    api_access_log: bool = False
    api_gc_freeze: bool = True
    api_gc_gen0_threshold: int = 20_000
    api_switch_interval_s: float = 0.0005
    # Snowflake node-id lease (seconds), renewed every third of it.
    id_lease_ttl_seconds: float = 30.0

    # The read path (docs/read-path.md).
    snapshot_ttl_s: int = 900
    snapshot_depth: int = 100
    celebrity_posts_per_author: int = 20
    max_celebrities: int = 200
    fallback_authors: int = 16
    fallback_posts_per_author: int = 5
    latest_posts_per_partition: int = 200
    preferences_cache_s: float = 5.0
    max_candidates: int = 800
    max_following: int = 5000
    store_timeout_s: float = 0.25
    hedge_after_s: float = 0.05
    body_cache_size: int = 50_000
    snapshot_cache_size: int = 1024
    snapshot_reuse_s: float = 300.0
    snapshot_reuse_size: int = 20_000
    snapshot_write_delay_s: float = 0.005
    snapshot_write_timeout_s: float = 2.0
    snapshot_max_pending: int = 4096
    # A returning reader's pages while their inbox is rebuilt (docs/fanout.md).
    regenerating_authors: int = 200
    regenerating_stale_s: float = 120.0
    # The serving cache (docs/read-path.md, "The serving cache").
    cache_enabled: bool = True
    cache_posts: int = 100_000
    cache_follows: int = 200_000
    cache_timelines: int = 20_000
    cache_inboxes: int = 20_000
    cache_preferences: int = 100_000
    cache_ttl_s: float = 300.0
    cache_max_silence_s: float = 2.0
    cache_stale_if_error_s: float = 30.0
    # The visibility fence and commit wait (docs/read-path.md, "The visibility fence").
    visibility_retention_s: float = 86_400.0
    visibility_trim_s: float = 60.0
    visibility_timeout_s: float = 1.0
    visibility_commit_wait_s: float = 0.2
    celebrities_cache_s: float = 1.0
    # SSE streams.
    stream_heartbeat_s: float = 15.0
    stream_max_per_user: int = 3
    stream_resume_buffer: int = 100
    stream_resume_window_s: float = 300.0

    @model_validator(mode="after")
    def _one_key_source(self) -> "ApiSettings":
        """A JWKS from a URL or from a file, not both; a URL over http(s)."""
        if self.jwt_jwks_url and self.jwt_jwks_file:
            raise ValueError("set FEED_JWT_JWKS_URL or FEED_JWT_JWKS_FILE, not both")
        if self.jwt_jwks_url and not self.jwt_jwks_url.startswith(("https://", "http://")):
            raise ValueError(f"FEED_JWT_JWKS_URL must be an http(s) URL, not {self.jwt_jwks_url!r}")
        return self


def _seconds_or_iso(value: object) -> object:
    """Plain seconds as well as ISO 8601 (``FEED_INACTIVE_AFTER=0``, ``=P14D``)."""
    if isinstance(value, str) and value.strip().replace(".", "", 1).isdigit():
        return float(value)
    return value


class ActivitySettings(FeedSettings):
    """Inactive readers, shared by the API (which records reads) and the fan-out."""

    # Readers who have not read their feed for this long get no inbox rows; 0: off.
    inactive_after: timedelta = timedelta(days=14)
    activity_resolution: timedelta = timedelta(days=1)
    inactive_sweep_every_s: float = 600.0
    # The freshness target (commit to visible in a follower's feed).
    freshness_target_s: float = 1.5
    # The count topics' generation (services/shared/domain/owned_counts.py): raise it
    # before a count topic is recreated or repartitioned.
    counts_generation: int = 1
    # Rows kept per inbox (soft cap); checked on one insert in inbox_trim_every.
    inbox_cap: int = 500
    inbox_trim_every: int = 128

    @field_validator("inactive_after", "activity_resolution", mode="before")
    @classmethod
    def _seconds(cls, value: object) -> object:
        return _seconds_or_iso(value)


class WorkerSettings(FeedSettings):
    """What the stream workers (fan-out, ranker) share: poison handling, retries,
    batches, Kafka group timing, the store's in-flight limits."""

    # Where the workers' and the relay's /metrics listen (loopback: a Prometheus on this
    # host; 0.0.0.0 for one elsewhere).
    metrics_host: str = "127.0.0.1"

    consumer_max_attempts: int = 3
    consumer_failure_window: int = 200
    consumer_max_failure_share: float = 0.2
    store_retry_attempts: int = 6
    store_retry_base_s: float = 0.2
    store_retry_budget_per_success: float = 0.1
    store_retry_budget_per_s: float = 5.0
    store_retry_budget_max: float = 100.0
    kafka_session_timeout_s: float = 6.0
    kafka_failed_broker_hold_s: float = 10.0
    kafka_commit_interval_s: float = 1.0
    consumer_batch_max: int = 1000
    kafka_max_poll_records: int = 200
    consumer_batch_within_s: float = 0.005
    consumer_max_unacked: int = 5000
    store_max_in_flight: int = 256
    store_min_in_flight: int = 8
    worker_store_timeout_s: float = 6.0
    worker_gc_freeze: bool = True
    worker_gc_gen0_threshold: int = 20_000


class FanoutSettings(FeedSettings):
    """The fan-out (``services/fanout``, docs/fanout.md)."""

    fanout_metrics_port: int = 9102
    fanout_group_id: str = ""
    tier_promote_share: float = 0.5
    tier_demote_share: float = 0.25
    tier_min_dwell_s: float = 600.0
    fanout_capacity_floor_rows_per_s: float = 2000.0
    fanout_capacity_pinned_rows_per_s: float = 0.0
    fanout_max_in_flight: int = 64
    fanout_posts_in_flight: int = 256
    fanout_push_batches_in_flight: int = 16
    fanout_batch_rows: int = 200
    fanout_coalesce_s: float = 0.001
    fanout_follower_page: int = 500


class RankerSettings(FeedSettings):
    """The ranker (``services/ranker``, docs/ranking.md)."""

    ranker_metrics_port: int = 9103
    ranker_group_id: str = ""
    ranker_keys_in_flight: int = 64


class CdcSettings(FeedSettings):
    """The CDC relay (``services/cdc``, docs/cdc.md)."""

    cdc_publication: str = "feed_cdc"
    # Empty: feed_cdc_<database>, so every database has its own slot.
    cdc_slot_name: str = ""
    cdc_metrics_port: int = 9101
    cdc_tombstones_on_delete: bool = True
    cdc_decimal_handling_mode: Literal["precise", "string", "double"] = "precise"
    cdc_unknown_types: Literal["fail", "text"] = "fail"
    cdc_emit_truncate: bool = False
    # A JSON line per record Kafka answered, appended here (the fault suite's evidence).
    cdc_delivery_trace: str = ""
    cdc_heartbeat_interval_s: float = 10.0
    cdc_feedback_interval_s: float = 1.0
