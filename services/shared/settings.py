"""One typed settings object for every process, read from FEED_* environment variables.

Built once per process (``get_settings()``) and overridable in tests. Hosts and ports
default to loopback, matching what ``deploy/stack.py`` starts.
"""
from __future__ import annotations

from datetime import timedelta
from functools import lru_cache
from typing import Literal

from pydantic import Field, SecretStr, field_validator
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
    # With replicas (RF > 1), every session convicts a node that answers nothing (paused,
    # cut off) with the driver's heartbeat: a connection that received nothing for
    # ``cassandra_heartbeat_s`` is sent OPTIONS, and one not answered within
    # ``cassandra_heartbeat_timeout_s`` is closed, failing its pending requests at once
    # (callers retry or hedge on another node) and marking the host down until it
    # reconnects. A busy connection is never probed. With the driver's defaults (30 s +
    # 30 s) requests kept going to a silent node for its whole fault: a fan-out waited
    # out its 6 s timeouts there.
    cassandra_heartbeat_s: float = 1.0
    cassandra_heartbeat_timeout_s: float = 2.0
    # Each table's speculative_retry (set by deploy/migrate.py when RF > 1): a coordinator
    # waiting this long on a replica for a read asks another. Cassandra's default, the
    # table's 99th-percentile read latency, is long on a loaded machine, and reads
    # coordinated by healthy nodes waited on a silent replica past the API's 0.25 s.
    cassandra_speculative_retry: str = "MIN(99p,50ms)"

    # Development machine (FEED_DEV_MODE=true): the API accepts the built-in secrets below.
    # Off by default, so a deployment that forgets to set its secrets refuses to start
    # instead of accepting tokens anyone can forge (services/shared/secret_policy.py).
    dev_mode: bool = False
    # Auth. Development default only; production sets FEED_JWT_SECRET.
    jwt_secret: SecretStr = Field(default=SecretStr("dev-only-change-me-0123456789abcdef"))
    # Cursor signing keys, "kid:secret,kid:secret"; the first signs, all verify (rotation).
    cursor_keys: SecretStr = Field(default=SecretStr("k1:dev-cursor-secret-0123456789abcdef"))

    # Fan-out and ranker workers (services/fanout, services/ranker).
    fanout_metrics_port: int = 9102
    ranker_metrics_port: int = 9103
    # The freshness target (commit to visible in a follower's feed, DESIGN.md): the tier
    # policy keeps one post's fan-out inside a share of it.
    freshness_target_s: float = 1.5
    # Promote when one post's fan-out would take more than half the freshness budget;
    # demote below a quarter. The gap is the hysteresis that stops an author near the
    # line from flapping.
    tier_promote_share: float = 0.5
    tier_demote_share: float = 0.25
    # Minimum time in a tier before the next change: follower counts move in bursts.
    tier_min_dwell_s: float = 600.0
    # Capacity floor (rows/s): a quiet or slow moment must not make every author look
    # expensive; measured on this machine's Cassandra with room to spare.
    fanout_capacity_floor_rows_per_s: float = 2000.0
    # > 0 pins the capacity instead of measuring it (tests, or an operator during an incident).
    fanout_capacity_pinned_rows_per_s: float = 0.0
    # Concurrent Cassandra writes per fan-out: enough to hide round trips, few enough
    # not to queue requests on a shared 2-core node.
    fanout_max_in_flight: int = 64
    # Posts of a batch applied at once. Each is a chain of small awaits (copy, count, mark,
    # followers, rows, announcement), so a post waits on round trips most of its time;
    # more posts at once fill the coalesced reads and writes, and the store's adaptive
    # permits (store_max_in_flight), not this, bound what reaches the node.
    fanout_posts_in_flight: int = 256
    # Inbox batches (up to fanout_batch_rows rows of one replica set) in flight per fan-out
    # process: up to 3,200 rows, enough to keep a shared 2-core node busy; more only
    # queues on the node.
    fanout_push_batches_in_flight: int = 16
    # Inbox rows per unlogged batch (one replica set): 200 is the best raw writer's
    # batch on this stack (bench/fanout/raw_writer.py). The stack's
    # unlogged_batch_across_partitions_warn_threshold is raised above it
    # (deploy/stack/cassandra.py); a production cluster warns at 10 by default.
    fanout_batch_rows: int = 200
    # The fan-out's single-row writes and inbox rows of concurrent posts wait this long for
    # company before leaving as a shared batch (services/shared/stores/write_coalescer.py),
    # and its reads of small partitions (a post's copy, its author's tier, count, blocks,
    # inactive followers, sampled inbox heads) before leaving as one IN read
    # (read_coalescer.py); a full batch (50 rows or keys) leaves at once. A negative value
    # turns coalescing off: each post batches its own inbox rows, every other statement is
    # its own request.
    fanout_coalesce_s: float = 0.001
    # Followers read per page: bounded memory for authors of any size.
    fanout_follower_page: int = 500
    # Inbox length cap (soft): ranking candidates for several pages; older rows are
    # trimmed from the tail with one range delete.
    inbox_cap: int = 500
    # Check the cap on one insert in N per reader (by hash): a check reads up to
    # inbox_cap + 1 keys of the reader's head, so at 32 a full inbox cost ~16 key reads
    # per row written (the fan-out's largest cost beyond the floor's). At 128: ~4. An
    # inbox holds up to about inbox_cap + N rows between checks; reads never take more
    # than inbox_cap of them, so the slack costs disk, not what a reader sees.
    inbox_trim_every: int = 128
    # Inactive readers (services/fanout/inactive.py): the fan-out skips readers who have
    # not read their feed for this long (Mastodon: 7 days; Twitter 2013: 30). An ISO 8601
    # duration or seconds; 0 turns it off. Reads are recorded once per reader, API process
    # and ``activity_resolution`` (a day), so the bound is exact to that resolution.
    inactive_after: timedelta = timedelta(days=14)
    activity_resolution: timedelta = timedelta(days=1)

    @field_validator("inactive_after", "activity_resolution", mode="before")
    @classmethod
    def _seconds(cls, value: object) -> object:
        """Plain seconds as well as ISO 8601 (``FEED_INACTIVE_AFTER=0``, ``=P14D``)."""
        if isinstance(value, str) and value.strip().replace(".", "", 1).isdigit():
            return float(value)
        return value

    # How often the fan-out's sweeper looks for readers who went inactive.
    inactive_sweep_every_s: float = 600.0
    # A returning reader's pages while their inbox is rebuilt read this many followed
    # authors' partitions (today's and yesterday's), instead of the fallback's slice.
    feed_regenerating_authors: int = 200
    # A return announced to the fan-out and not finished after this long (the fan-out
    # down or far behind) is announced again by the reader's next page.
    feed_regenerating_stale_s: float = 120.0
    # Poison handling: attempts before the dead-letter queue, and the failure-rate cap
    # over the last messages that stops the worker (a broken deploy, not bad data).
    consumer_max_attempts: int = 3
    consumer_failure_window: int = 200
    consumer_max_failure_share: float = 0.2
    # Transient store errors: retries with exponential backoff before the worker stops.
    store_retry_attempts: int = 6
    store_retry_base_s: float = 0.2
    # The retry budget those retries spend (services/shared/domain/retry_budget.py): each
    # message or fan-out page applied earns this share of a retry, so retries add at most
    # a tenth to the work that succeeds (gRPC's token ratio; Finagle allows a fifth).
    store_retry_budget_per_success: float = 0.1
    # ... plus this many retries a second whatever happens: a store failing everything
    # earns nothing from successes, and a worker must still find out when it is back.
    # Five a second is a load no node notices, and lets a worker's 64 waiting keys each
    # try again within about 15 s.
    store_retry_budget_per_s: float = 5.0
    # The bucket's size: a node restarting fails a round of statements at once (up to
    # the in-flight limit), and most of such a round may retry at once.
    store_retry_budget_max: float = 100.0
    # Kafka group timing for the faust workers: a killed or cut-off worker's partitions
    # move after this (heartbeats every quarter of it, at least every second).
    kafka_session_timeout_s: float = 6.0
    # How long a Kafka client waits for a broker's answer before it gives up on the
    # connection, refreshes metadata and retries (at the partition's new leader): the
    # relay's producer, the workers' and the API's producers, the API's consumers; the
    # workers' group consumers wait at least kafka_session_timeout_s (faust refuses
    # less). The clients' defaults (librdkafka 30/60 s, aiokafka 40 s, faust 90 s) held
    # on to a broker cut off the network long after its partitions had moved. A stalled
    # notice publish holds its worker's batch, and an aiokafka producer whose metadata
    # refresh goes to the cut broker waits a second timeout: with 15 s here the fan-out
    # stood still for the whole 30 s cut (fault suite, broker-cut, 2026-12-02). Probes on
    # the three-node stack, a producer at 20 records/s through a 30 s cut: the longest
    # delivery 16 s at 15 s, 5 s at 4 s (librdkafka and aiokafka alike). Retries are
    # safe: every producer is idempotent and every consumer applies by LSN.
    kafka_request_timeout_s: float = 4.0
    # A broker an aiokafka client failed to reach is asked last (metadata refreshes,
    # coordinator lookups) for this long (services/shared/worker/kafka_failover.py); 0: off.
    kafka_failed_broker_hold_s: float = 10.0
    kafka_commit_interval_s: float = 1.0
    # Batches (services/shared/worker/batch_consumer.py consume_in_batches): up to this many messages
    # are taken at once and their keys applied concurrently. 1000 keeps a batch's replay
    # after a crash to well under a second of work at the measured rates, and is enough
    # to keep fanout_max_in_flight keys busy.
    consumer_batch_max: int = 1000
    # Records one poll of a worker's consumer hands to faust (aiokafka max_poll_records).
    # faust delivers a poll's records round-robin over its topics, but waits while the
    # stream of one is full: unbounded (faust's default), a poll of thousands of
    # prefetched follows held every other topic of the worker (its count topic) for
    # minutes while the follows agent worked through them. A bound keeps that wait to a
    # poll's worth; a full stream's partition is then paused and the others flow.
    kafka_max_poll_records: int = 200
    # How long a short batch waits for more messages: at low load a change waits at most
    # this (5 ms against a 1.5 s freshness target); under load batches are full anyway.
    consumer_batch_within_s: float = 0.005
    # Messages applied but not yet acked because the events they sent are not yet
    # acknowledged (event_publisher.delivered): the agent goes on applying batches while
    # a broker's partitions have no reachable leader, up to this many (a replay after a
    # crash redoes them; every effect is idempotent).
    consumer_max_unacked: int = 5000
    # Keys the ranker applies at once (each does 2-3 round trips): as for the fan-out.
    ranker_keys_in_flight: int = 64
    # Generation of the count topics (follow-counts, like-counts): part of every count
    # write's time (services/shared/domain/owned_counts.py). Offsets order one partition
    # only, so raise it BEFORE a count topic is recreated or its partition count changes
    # (a key on a new partition restarts from low offsets, which would lose to the old).
    counts_generation: int = 1
    # Cassandra statements in flight per worker process, across all keys and fan-outs, are
    # an adaptive limit (AIMD: halved on timeouts and overload answers, cut a tenth when
    # answers slow down, +1 per round of fast answers; services/shared/domain/
    # concurrency_limit.py) between these bounds. The most: the fixed cap this limit
    # replaced, a few times fanout_max_in_flight, which keeps one node busy; more only
    # queues requests toward the driver's timeout on a shared 2-core node.
    store_max_in_flight: int = 256
    # The least: fewer would not hide the round trip to three replicas (8 statements of
    # ~30 ms are still ~250 a second), and it is already 32 times less than the cap whose
    # queues timed out on three nodes; a node that cannot answer 8 statements in time is
    # down, which the driver's heartbeat deals with, not this limit.
    store_min_in_flight: int = 8
    # Request timeout of the workers' Cassandra sessions (the API keeps cql's 2 s read
    # budget). Above the node's own write timeout (2 s) so that an overloaded node answers
    # with its WriteTimeout instead of the client giving up on work the node still does.
    worker_store_timeout_s: float = 6.0
    # Consumer group (= faust app id) of each worker; empty means "<topic_prefix>.fanout" /
    # "<topic_prefix>.ranker". Tests and replays use their own group.
    fanout_group_id: str = ""
    ranker_group_id: str = ""

    # CDC relay (services/cdc, docs/cdc.md). Slot name defaults to feed_cdc_<database>, so
    # each database (and each test database) has its own slot.
    cdc_publication: str = "feed_cdc"
    cdc_slot_name: str = ""
    cdc_metrics_port: int = 9101
    # Debezium's tombstones.on.delete (default true): a null-value record after each delete,
    # so log compaction can drop the key.
    cdc_tombstones_on_delete: bool = True
    # Debezium's decimal.handling.mode: precise (base64 unscaled bytes), string or double.
    cdc_decimal_handling_mode: Literal["precise", "string", "double"] = "precise"
    # A column type the relay has no rendering for: "fail" stops the relay with an error
    # naming table, column and type (nothing is produced, the slot does not move);
    # "text" sends Postgres's text output as a JSON string.
    cdc_unknown_types: Literal["fail", "text"] = "fail"
    # Debezium skips truncates by default (skipped.operations=t); true emits op "t".
    cdc_emit_truncate: bool = False
    # A JSON line per record Kafka answered (xid, WAL position, topic, partition, offset or
    # error), appended to this file: the fault suite's evidence of where a change went.
    # Empty: off (the default; it costs a write per record).
    cdc_delivery_trace: str = ""
    # Heartbeat records and idle slot advance: Debezium's heartbeat.interval.ms. Ten
    # seconds keeps slot age bounded well inside wal_sender_timeout (30 s) at no cost.
    cdc_heartbeat_interval_s: float = 10.0
    # How often the relay reports its acknowledged LSN to Postgres. One second bounds the
    # replay after a crash to about a second of changes.
    cdc_feedback_interval_s: float = 1.0

    # Write/read API (services.api): where uvicorn listens.
    api_host: str = "127.0.0.1"
    api_port: int = 8080
    # Postgres connections per API process; 2 cores, so more would only queue in Postgres.
    api_pg_pool_max: int = 10
    # uvicorn worker processes (python -m services.api). 0 = one per core this process may
    # run on (services/api/__main__.py worker_count): a worker is one Python thread of
    # request handling, so a second core is idle to the API without a second worker
    # (/healthz at c16 on the 2-core machine: ~2,800 req/s with 1, ~5,400 with 2). Set
    # a number when the API shares its cores with the stores (docs/read-path.md).
    api_workers: int = 0
    # One log line per request (FEED_API_ACCESS_LOG=true). Off by default: formatting a
    # line per request was ~a quarter of /healthz's CPU; 5xx responses are always logged.
    api_access_log: bool = False
    # How an API process runs Python (services/shared/runtime.py): objects made at start-up
    # frozen out of the collector's walks, the first generation collected every this many
    # allocations (Python's default 700 promoted live request objects to be walked again
    # in full collections that paused the loop 55-115 ms), and the GIL handed to the
    # Cassandra driver's I/O thread within this interval (5 ms by default: it waited that
    # long per socket event while the loop ran). 0 leaves Python's default.
    api_gc_freeze: bool = True
    api_gc_gen0_threshold: int = 20_000
    api_switch_interval_s: float = 0.0005
    # The same collector settings for the stream workers (fan-out, ranker), applied once
    # their stores are open: at Python's default a fan-out worker collected every few
    # posts and spent a third of its CPU per inbox row on it (services/shared/runtime.py).
    worker_gc_freeze: bool = True
    worker_gc_gen0_threshold: int = 20_000
    # Snowflake node-id lease (seconds). Renewed every third of it; long against the 1 s of
    # logical clock drift that ids may run ahead, short enough that a crashed process frees
    # its node id quickly.
    id_lease_ttl_seconds: float = 30.0

    # Feed read path (services/api/feed, docs/read-path.md).
    # Snapshot lifetime: long enough to read a session's worth of pages (a few minutes of
    # scrolling), short enough that a stale ranking does not outlive its usefulness.
    # Matches feed_snapshot_slots' default_time_to_live (900 s); tests shorten it.
    feed_snapshot_ttl_s: int = 900
    # Entries a first page ranks into its snapshot, read from the top (highest rank key)
    # of each source: 5 pages of 20. A walk past them extends the snapshot by as many
    # again, read strictly after its last entry, so a first page costs the same whatever
    # the history and a long walk pays for itself page by page.
    feed_snapshot_depth: int = 100
    # Top posts read per followed celebrity per day bucket (today and yesterday): a
    # celebrity posting more than this in a day still gives the reader its best ones.
    feed_celebrity_posts_per_author: int = 20
    # Followed celebrity partitions merged per first page (each costs 2 bucket reads).
    feed_max_celebrities: int = 200
    # Fan-out-behind fallback: followed ordinary authors whose newest day bucket is read
    # on a first page (rotated per snapshot), and posts taken from each. Bounds the extra
    # reads for readers following hundreds of authors (16 reads cost ~3 ms of the 30 ms
    # first-page budget on the bench machine); small follow lists are fully covered.
    feed_fallback_authors: int = 16
    feed_fallback_posts_per_author: int = 5
    # Latest order (GET /v1/feed?order=latest) reads the whole inbox (inbox_cap rows) and
    # this many rows of each followed celebrity's day partition, newest first by post id.
    feed_latest_posts_per_partition: int = 200
    # A reader's stored preferences (GET|PUT /v1/me/preferences) are kept in the process
    # this long: a change made through another process is used within this delay.
    feed_preferences_cache_s: float = 5.0
    # Upper bound on a snapshot's entries as walks extend it (24 bytes each packed): 40
    # pages of 20, the depth of a home timeline (Twitter's was 800 tweets).
    feed_max_candidates: int = 800
    # Follows read per request (following is a partition per reader); beyond this the
    # remaining follows are ignored for the page and a metric counts it.
    feed_max_following: int = 5000
    # Per-call timeout for every read-path store call: far above a healthy read (~1 ms,
    # and tens of ms on a node shared with compactions and other tests) and under the
    # seed's 300 ms page budget, so one stuck partition is dropped, not waited on.
    feed_store_timeout_s: float = 0.25
    # A read not answered this fast (or failed before) is sent once more to another node
    # and the first answer wins (FeedStore._rows): a dead or hung node costs a page this
    # delay instead of a timeout. Healthy reads answer in a few ms, so hedges are rare;
    # with one node there is nothing to hedge on. 0 turns it off.
    feed_hedge_after_s: float = 0.05
    # In-process cache of immutable post bodies (text, author, created_at): ~200 B each.
    feed_body_cache_size: int = 50_000
    # Snapshots kept in the process for next pages (<= 19 KB each: <= 20 MB). A reader's
    # next page usually follows within seconds on the same keep-alive connection; a miss
    # is one point read in Cassandra, which every process can do.
    feed_snapshot_cache_size: int = 1024
    # A first page shows the reader's last snapshot again while everything it was built
    # from is unchanged in the serving cache (services/api/feed/reuse.py), for at most
    # this long (so its next pages still have feed_snapshot_ttl_s minus it); 0: never.
    # Up to feed_snapshot_reuse_size readers' snapshots are held (~3 KB each).
    feed_snapshot_reuse_s: float = 300.0
    feed_snapshot_reuse_size: int = 20_000
    # Snapshots are stored behind the page, coalesced for this long into batched inserts
    # (services/api/feed/snapshot_writer.py).
    feed_snapshot_write_delay_s: float = 0.005
    # A snapshot batch's own timeout: it is written behind the page, so it need not fit
    # the read budget (feed_store_timeout_s). At 250 ms a third of the snapshots were
    # lost under the read benchmark's load (1,000-1,400 first pages/s on one worker:
    # next pages on another process restart the walk); at 2 s none were, the slowest
    # batch took under 1 s (bench/read/ab.py, 2026-12-01).
    feed_snapshot_write_timeout_s: float = 2.0
    # Snapshots queued or being written, at most; beyond it a snapshot is not stored (it
    # stays in this process's cache, and a next page elsewhere restarts the walk): a node
    # slower than the first-page rate costs bounded memory, not a growing queue.
    feed_snapshot_max_pending: int = 4096
    # Serving cache (services/api/feed/serving_cache.py): the copies a page reads (post
    # states, readers' follows and blocks, author-timeline tops, inbox tops, stored
    # preferences), dropped by the serving-changes notices of the workers (and of the API
    # for preferences) and bypassed while those notices may be late. Sizes: posts
    # (~0.4 KB each), follow entries over all cached readers (~0.1 KB each), timeline
    # partitions (~0.5 KB each), readers' inbox tops (~2.5 KB each), preferences (~0.1 KB
    # each): about 120 MB per API process at these defaults. Entries
    # also expire after ``feed_cache_ttl_s``, a bound on what a lost notice could cost.
    feed_cache_enabled: bool = True
    feed_cache_posts: int = 100_000
    feed_cache_follows: int = 200_000
    feed_cache_timelines: int = 20_000
    feed_cache_inboxes: int = 20_000
    feed_cache_preferences: int = 100_000
    feed_cache_ttl_s: float = 300.0
    # Notices older than this (the consumer's last fetch response) make the cache stand
    # aside: reads go to Cassandra until the consumer is current again.
    feed_cache_max_silence_s: float = 2.0
    # When the cache stands aside, the post states it held answer for post-state reads
    # that fail, for this long (a page marked stale_post_states instead of a 503): a
    # broker's failover (fenced after 5 s, clients moved within ~15 s) fits. 0: never.
    feed_cache_stale_if_error_s: float = 30.0
    # The visibility fence (services/api/feed/fence.py): every page and stream event is
    # judged after a read of the ``visibility_changes`` log that began after it arrived.
    # Entries are kept this long (in Postgres and in each API process) and trimmed every
    # ``feed_visibility_trim_s``: past it, the copies alone decide a change, so it is far
    # longer than any stall the lag alerts let pass unnoticed (they page within minutes),
    # and short enough that a process holds a day of deletes, blocks and unfollows in
    # memory (~120 B an entry, estimated: ~10 MB a day at one change a second). A read
    # that takes longer than the timeout fails the page (503) rather than judge it on an
    # older read.
    feed_visibility_retention_s: float = 86_400.0
    feed_visibility_trim_s: float = 60.0
    feed_visibility_timeout_s: float = 1.0
    # Commit wait (services/api/feed/commit_wait.py): a delete, removal, block or unfollow
    # is answered this long after its commit, and a stream event is written only while
    # the log read it was judged on is younger than this minus 50 ms, so no event reaches
    # a reader after such an answer. 0 turns it off (streams then honour a hiding write
    # from their next log read on, which may follow its answer by a read's duration).
    feed_visibility_commit_wait_s: float = 0.2
    # Celebrity list cache: re-read after this long. Bounded staleness well under the
    # freshness target, so a promotion is merged by readers within a second.
    feed_celebrities_cache_s: float = 1.0
    # SSE stream: comment heartbeat period (keeps proxies from closing idle connections),
    # concurrent streams per user, events kept per reader for Last-Event-ID resume, and how
    # long a disconnected reader's buffer is kept.
    stream_heartbeat_s: float = 15.0
    stream_max_per_user: int = 3
    stream_resume_buffer: int = 100
    stream_resume_window_s: float = 300.0

    @property
    def kafka_request_timeout_ms(self) -> int:
        """``kafka_request_timeout_s`` as the Kafka clients take it."""
        return int(self.kafka_request_timeout_s * 1000)

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
