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
    # HS256 tokens signed with this secret (development, or a gateway that shares one);
    # left unset beside a JWKS (not in dev mode), HS256 is off.
    jwt_secret: SecretStr = Field(default=SecretStr("dev-only-change-me-0123456789abcdef"))
    # Gateway tokens (RS256, ES256): the issuer's JWKS as an http(s) URL (or FEED_JWT_JWKS_FILE).
    jwt_jwks_url: str = ""
    # Gateway tokens (RS256, ES256): the issuer's JWKS as a file (or FEED_JWT_JWKS_URL, not both).
    jwt_jwks_file: str = ""
    # The iss a token must carry; empty: not checked.
    jwt_issuer: str = ""
    # The aud a token must carry; empty: not checked.
    jwt_audience: str = ""
    # Seconds of clock skew allowed on exp, nbf and iat.
    jwt_leeway_s: float = 30.0
    # Seconds fetched JWKS keys are kept before a refetch.
    jwt_jwks_cache_s: float = 300.0
    # Seconds between refetches at least (an unknown kid refetches at once, no sooner).
    jwt_jwks_min_refresh_s: float = 10.0
    # Seconds a JWKS fetch may take.
    jwt_jwks_timeout_s: float = 3.0
    # Cursor signing keys, "kid:secret,kid:secret"; the first signs, all verify (rotation).
    cursor_keys: SecretStr = Field(default=SecretStr("k1:dev-cursor-secret-0123456789abcdef"))

    # Address the API's HTTP server listens on.
    api_host: str = "127.0.0.1"
    # TCP port the API's HTTP server listens on.
    api_port: int = 8080
    # Postgres connections per API process, at most.
    api_pg_pool_max: int = 10
    # Seconds a request waits for a Postgres connection before it answers 503: a client
    # has given up long before psycopg_pool's 30 s, and a write that waited that long
    # could still commit after its client retried or moved on.
    api_pg_wait_s: float = Field(default=5.0, gt=0)
    # uvicorn worker processes; 0: one per core this process may run on.
    api_workers: int = 0
    # Log a line per request (5xx responses are always logged).
    api_access_log: bool = False
    # Freeze the objects made at start-up out of the garbage collector's walks.
    api_gc_freeze: bool = True
    # Allocations between first-generation collections; 0: Python's default.
    api_gc_gen0_threshold: int = 20_000
    # Seconds a thread holds the GIL before handing it over; 0: Python's default.
    api_switch_interval_s: float = 0.0005
    # Snowflake node-id lease (seconds), renewed every third of it.
    id_lease_ttl_seconds: float = 30.0

    # The read path (docs/read-path.md).

    # Seconds a reader's ranked snapshot (their walk through pages) is kept.
    snapshot_ttl_s: int = 900
    # Entries a first page ranks into its snapshot; a walk past them adds as many.
    snapshot_depth: int = 100
    # Top posts read per followed celebrity per day bucket (today, yesterday).
    celebrity_posts_per_author: int = 20
    # Celebrity partitions merged per first page, at most.
    max_celebrities: int = 200
    # Followed ordinary authors read directly per first page while the fan-out is behind.
    fallback_authors: int = 16
    # Posts taken from each of those authors.
    fallback_posts_per_author: int = 5
    # Rows read per followed celebrity's day partition in latest order.
    latest_posts_per_partition: int = 200
    # Seconds a reader's stored preferences are kept in the process.
    preferences_cache_s: float = 5.0
    # Seconds a post's like count is kept in the process (feed and timeline items, GET
    # /v1/posts/{id}).
    like_count_cache_s: float = 5.0
    # Seconds the posts a reader liked are kept in the process at most; the reader's own
    # like or unlike drops them (in other processes through a serving-changes notice).
    liked_cache_s: float = 60.0
    # Seconds back the kept set of a reader's likes reaches (posts created earlier are
    # asked per page): the feed's reach, 30 days.
    liked_horizon_s: float = 30 * 86400.0
    # Seconds an author's names are kept in the process at most (feed items, posts,
    # timelines); a serving-changes notice drops a renamed user's sooner.
    name_cache_s: float = Field(default=60.0, ge=0)
    # Seconds an author's account state (suspended, deleted, or neither) is kept in the
    # process at most; a serving-changes notice drops it when the copy changes. Below
    # FEED_VISIBILITY_SETTLE_S: the visibility log's entry must outlive a stale answer.
    account_cache_s: float = Field(default=60.0, ge=0)
    # Entries a snapshot holds at most as walks extend it.
    max_candidates: int = 800
    # Follows read per request, at most; the rest are ignored for the page.
    max_following: int = 5000
    # Rows of a user's follower or following partition a list page reads, at most.
    follow_list_max: int = Field(default=5000, ge=1)
    # Seconds each read-path store call may take before it is dropped.
    store_timeout_s: float = 0.25
    # Seconds before an unanswered read is also sent to another node; 0: off.
    hedge_after_s: float = 0.05
    # Immutable post bodies cached per process (~200 B each).
    body_cache_size: int = 50_000
    # Snapshots cached per process for next pages (at most 19 KB each).
    snapshot_cache_size: int = 1024
    # Seconds a first page may show the reader's unchanged last snapshot again; 0: never.
    snapshot_reuse_s: float = 300.0
    # Readers whose last snapshot is held for that reuse (~3 KB each).
    snapshot_reuse_size: int = 20_000
    # Seconds snapshot writes wait to be coalesced into one batched insert.
    snapshot_write_delay_s: float = 0.05
    # Seconds a snapshot batch write may take.
    snapshot_write_timeout_s: float = 2.0
    # Snapshots queued or being written, at most; beyond it one is not stored.
    snapshot_max_pending: int = 4096
    # Followed authors read per page while a returning reader's inbox is rebuilt (docs/fanout.md).
    regenerating_authors: int = 200
    # Seconds after which an unfinished inbox rebuild is announced again.
    regenerating_stale_s: float = 120.0

    # The serving cache (docs/read-path.md, "The serving cache").

    # Use the serving cache (in-process copies of what pages read).
    cache_enabled: bool = True
    # Post states cached (~0.4 KB each).
    cache_posts: int = 100_000
    # Follow entries cached over all readers (~0.1 KB each).
    cache_follows: int = 200_000
    # Author-timeline tops cached, partitions (~0.5 KB each).
    cache_timelines: int = 20_000
    # Readers' inbox tops cached (~2.5 KB each).
    cache_inboxes: int = 20_000
    # Readers' stored preferences cached (~0.1 KB each).
    cache_preferences: int = 100_000
    # Seconds a cache entry lives at most (bounds what a lost notice costs).
    cache_ttl_s: float = 300.0
    # Seconds without fresh notices after which the cache stands aside (reads go to Cassandra).
    cache_max_silence_s: float = 2.0
    # Seconds held post states answer failing reads while the cache stands aside; 0: never.
    cache_stale_if_error_s: float = 30.0

    # The visibility fence and commit wait (docs/read-path.md, "The visibility fence").

    # Visibility-log entries an API process holds at most; past it, pages ask Postgres
    # for their windows until the log is back under half (docs/read-path.md).
    visibility_max_entries: int = 500_000
    # Seconds between reads of the log by a process no page reaches (it forgets what
    # the verifier released, and sees a restore).
    visibility_idle_read_s: float = 5.0
    # Seconds a visibility log read (each chunk of a long one) may take before the page
    # fails (503).
    visibility_timeout_s: float = 1.0
    # Seconds a delete, removal, block or unfollow is answered after its commit; 0: off.
    visibility_commit_wait_s: float = 0.2
    # Seconds the celebrity list is kept before it is re-read.
    celebrities_cache_s: float = 1.0

    # SSE streams.

    # Seconds between comment heartbeats on a stream (keeps proxies from closing it).
    stream_heartbeat_s: float = 15.0
    # Open streams per user, at most (more: 429).
    stream_max_per_user: int = 3
    # Events kept per reader for Last-Event-ID resume.
    stream_resume_buffer: int = 100
    # Seconds those events are kept after a reader disconnects.
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

    # Readers who have not read their feed for this long get no inbox rows (ISO 8601
    # duration or seconds; 0: off).
    inactive_after: timedelta = timedelta(days=14)
    # A read is recorded once per reader and API process per this (ISO 8601 or seconds).
    activity_resolution: timedelta = timedelta(days=1)
    # Seconds between the fan-out's sweeps for readers who went inactive.
    inactive_sweep_every_s: float = 600.0
    # The freshness target, seconds from a commit to visible in a follower's feed.
    freshness_target_s: float = 1.5
    # The count topics' generation (services/shared/domain/owned_counts.py): raise it
    # before a count topic is recreated or repartitioned.
    counts_generation: int = 1
    # Rows kept per inbox (soft cap; trimmed from the tail).
    inbox_cap: int = 500
    # The cap is checked on one insert in this many per reader.
    inbox_trim_every: int = 128

    @field_validator("inactive_after", "activity_resolution", mode="before")
    @classmethod
    def _seconds(cls, value: object) -> object:
        return _seconds_or_iso(value)


class MetricsSettings(FeedSettings):
    """Where the background processes (relay, fan-out, ranker) serve ``/metrics``,
    ``/healthz`` and ``/readyz`` (services/shared/health.py); the API serves its own on
    its HTTP port (``FEED_API_HOST``)."""

    # Where the workers' and the relay's /metrics, /healthz and /readyz listen (loopback:
    # a Prometheus or a kubelet on this host; 0.0.0.0 for one elsewhere).
    metrics_host: str = "127.0.0.1"
    # Seconds a worker's event loop or consumer thread, or the relay's loop, may go
    # without turning before /healthz fails (and a rebalance may last before /readyz does).
    health_stall_s: float = Field(default=30.0, gt=0)


class WorkerSettings(FeedSettings):
    """What the stream workers (fan-out, ranker) share: poison handling, retries,
    batches, Kafka group timing, the store's in-flight limits."""

    # Attempts at a message before it goes to its dead-letter topic.
    consumer_max_attempts: int = 3
    # Last messages over which the failure share is measured.
    consumer_failure_window: int = 200
    # Share of failed messages in that window (0-1) above which the worker stops.
    consumer_max_failure_share: float = 0.2
    # Tries of a store step on transient errors before the worker stops (exit 75).
    store_retry_attempts: int = 6
    # Seconds of the first retry's back-off, doubled each try (at most 5 s).
    store_retry_base_s: float = 0.2
    # Retries earned per message or fan-out page applied.
    store_retry_budget_per_success: float = 0.1
    # Retries earned per second, whatever happens.
    store_retry_budget_per_s: float = 5.0
    # Retries the budget holds at most (its bucket's size).
    store_retry_budget_max: float = 100.0
    # Seconds after which a silent worker's partitions move (heartbeats every quarter).
    kafka_session_timeout_s: float = 6.0
    # Seconds between offset commits (faust's commit interval).
    kafka_commit_interval_s: float = 1.0
    # Messages taken at once, their keys applied concurrently.
    consumer_batch_max: int = 1000
    # Records per Kafka poll (aiokafka max_poll_records).
    kafka_max_poll_records: int = 200
    # Seconds a short batch waits for more messages.
    consumer_batch_within_s: float = 0.005
    # Messages applied but not yet acked (their events unacknowledged), at most.
    consumer_max_unacked: int = 5000
    # Cassandra statements in flight per worker process: the adaptive limit's top.
    store_max_in_flight: int = 256
    # Cassandra statements in flight per worker process: the adaptive limit's floor.
    store_min_in_flight: int = 8
    # Seconds a worker's Cassandra request may take.
    worker_store_timeout_s: float = 6.0
    # Freeze the objects made at start-up out of the garbage collector's walks.
    worker_gc_freeze: bool = True
    # Allocations between first-generation collections; 0: Python's default.
    worker_gc_gen0_threshold: int = 20_000


class FanoutSettings(FeedSettings):
    """The fan-out (``services/fanout``, docs/fanout.md)."""

    # TCP port of the fan-out's Prometheus /metrics (on FEED_METRICS_HOST).
    fanout_metrics_port: int = 9102
    # Kafka consumer group (faust app id); empty: ``<topic prefix>.fanout``.
    fanout_group_id: str = ""
    # An author turns celebrity when one post's fan-out would take this share of the
    # freshness target.
    tier_promote_share: float = 0.5
    # A celebrity turns ordinary below this share of the freshness target.
    tier_demote_share: float = 0.25
    # Seconds an author stays in a tier at least before the next change.
    tier_min_dwell_s: float = 600.0
    # Inbox rows per second the tier policy assumes until it has measured, and the least
    # a store timeout alone cuts the estimate to; a slower measured store is followed below it.
    fanout_capacity_floor_rows_per_s: float = 2000.0
    # Above 0: the capacity, inbox rows per second, pinned instead of measured.
    fanout_capacity_pinned_rows_per_s: float = 0.0
    # Seconds between saves of the measured capacity (Cassandra's fanout_capacity) while
    # samples come; a restarted worker starts from the last one instead of the floor.
    fanout_capacity_save_every_s: float = 30.0
    # The oldest saved capacity a restarted worker takes (the row's TTL); 0: none saved or taken.
    fanout_capacity_max_age_s: float = 86400.0
    # Concurrent Cassandra writes per fan-out.
    fanout_max_in_flight: int = 64
    # Posts of a batch applied at once.
    fanout_posts_in_flight: int = 256
    # Inbox batches in flight per fan-out process.
    fanout_push_batches_in_flight: int = 16
    # Inbox rows per unlogged batch (one replica set).
    fanout_batch_rows: int = 200
    # Seconds small writes and reads wait to share a batch; negative: no coalescing.
    fanout_coalesce_s: float = 0.001
    # Followers read per page.
    fanout_follower_page: int = 500
    # A batch's posts older than the inbox TTL taken in together, and its recent posts'
    # inbox rows written together, grouped by reader; false: post by post.
    fanout_posts_by_batch: bool = True

    # The visibility verifier (services/fanout/verifier.py, docs/fanout.md).

    # Seconds between the verifier's walks of the visibility log (and lock attempts); 0:
    # this fan-out never verifies (another one on the same database must).
    visibility_verify_every_s: float = 2.0
    # Visibility-log entries the verifier checks per batch.
    visibility_verify_batch: int = 500
    # Seconds an entry whose copies are wrong is left to the pipeline before it is repaired.
    visibility_repair_after_s: float = 120.0
    # Seconds a verified entry stands before API processes forget it (over their cache's hold).
    visibility_settle_s: float = 360.0


class RankerSettings(FeedSettings):
    """The ranker (``services/ranker``, docs/ranking.md)."""

    # TCP port of the ranker's Prometheus /metrics (on FEED_METRICS_HOST).
    ranker_metrics_port: int = 9103
    # Kafka consumer group (faust app id); empty: ``<topic prefix>.ranker``.
    ranker_group_id: str = ""
    # Keys applied at once.
    ranker_keys_in_flight: int = 64


class CdcSettings(FeedSettings):
    """The CDC relay (``services/cdc``, docs/cdc.md)."""

    # Postgres publication the relay reads (the migrations create it).
    cdc_publication: str = "feed_cdc"
    # Replication slot; empty: ``feed_cdc_<database>``, so every database has its own.
    cdc_slot_name: str = ""
    # TCP port of the relay's Prometheus /metrics (on FEED_METRICS_HOST); 0: none.
    cdc_metrics_port: int = 9101
    # A null-value record after each delete (Debezium's tombstones.on.delete).
    cdc_tombstones_on_delete: bool = True
    # How numeric values are sent (Debezium's decimal.handling.mode).
    cdc_decimal_handling_mode: Literal["precise", "string", "double"] = "precise"
    # A column type with no rendering: fail stops the relay; text sends its text output.
    cdc_unknown_types: Literal["fail", "text"] = "fail"
    # Emit truncates as op t records (Debezium skips them by default).
    cdc_emit_truncate: bool = False
    # File a JSON line per record Kafka answered is appended to (the fault suite's
    # evidence); empty: off.
    cdc_delivery_trace: str = ""
    # Seconds between heartbeat records and idle slot advances.
    cdc_heartbeat_interval_s: float = 10.0
    # Seconds between reports of the acknowledged LSN to Postgres.
    cdc_feedback_interval_s: float = 1.0


class TopicSettings(FeedSettings):
    """How many partitions each topic is created with (docs/capacity.md says how to size
    them; docs/deploy.md which may grow in place). Read by the migrator, which creates the
    topics; the services read any count the topics have."""

    # Partitions of every keyed topic that FEED_KAFKA_TOPIC_PARTITIONS does not name: the
    # most processes of one role that can share a topic's work.
    kafka_partitions: int = Field(default=3, ge=1, le=10_000)
    # Per-topic counts, "name=N,...": a captured table's name (posts, follows, ...) or a
    # topic's name after the prefix (author-events, like-counts, ...).
    kafka_topic_partitions: str = ""

    @field_validator("kafka_topic_partitions")
    @classmethod
    def _counts(cls, value: str) -> str:
        partition_counts(value)
        return value


def partition_counts(spec: str) -> dict[str, int]:
    """``{"posts": 12, ...}`` from ``"posts=12,..."``; a malformed entry is a ValueError
    naming it (the settings turn it into one line naming the variable)."""
    out: dict[str, int] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, sep, count = part.partition("=")
        if not sep or not name.strip() or not count.strip().isdigit() or int(count) < 1:
            raise ValueError(f"{part!r} is not name=N with N a positive integer")
        out[name.strip()] = int(count)
    return out
