"""The fan-out worker: faust agents over the CDC topics of posts, follows, blocks, mutes
and users, the ranker's rank-key moves and the API's reader events (the fan-out owns every inbox
row).

One agent per topic (posts, follows, blocks, mutes, account_states, users, rank-key-moves,
reader-events, follow-counts). The users agent keeps the read path's copy of names
(``user_profiles``, profile_events.py). Each takes messages in batches and applies a batch's keys concurrently
(at most ``fanout_max_in_flight`` keys; the statements they send wait for the process's
adaptive in-flight limit), each key's changes in order
(services/shared/worker/batch_consumer.py ``consume_in_batches``). Acks are manual: a
batch is acked only after every message's effects (Cassandra rows, output events, or a dead
letter) are acknowledged, so the committed offset never passes work that was not done
(at-least-once; every effect is idempotent by write timestamp).

The ``follow_counts`` agent is the follower counts' one writer: the follows agent
re-publishes each change keyed by the author to ``<prefix>.follow-counts``, and this agent
writes each author's changes of a batch as one plain batch ordered by the topic's offsets
(services/shared/worker/count_owner.py; no Paxos round, domain/owned_counts.py).

Moderation removal reaches the fan-out as a posts change (``visibility`` 0, written in
the same transaction as ``moderation_actions``), so that topic is not consumed here.

A timer runs the inactive-reader sweeper (inactive.py) in the worker that owns the
follows topic's partition 0, and another the visibility verifier (verifier.py) in the
worker that holds its Postgres advisory lock. The ``reader_events`` agent brings back the readers the API
saw return (returning.py): the fan-out rebuilds their inboxes, as it writes every other
inbox row.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Awaitable, Callable, TypedDict, TypeVar

import faust

from services.fanout.rebuild import rebuilder
from services.shared.contracts.envelope import ChangeRecord, parse_change
from services.shared.contracts.rank_moves import parse as parse_rank_move
from services.shared.contracts.reader_events import parse as parse_reader_event
from services.shared.contracts.topics import (cdc_topic, follow_counts_topic, rank_moves_topic,
                                              reader_events_topic, serving_changes_topic)
from services.shared.settings import FanoutProcess
from services.shared.clients import cql
from services.shared.stores.activity import ActivityStore, Window
from services.shared.stores.counted_edges import CountedEdges
from services.shared.stores.cql_async import (TRANSIENT_STORE_ERRORS, CqlRunner, StoreRetry,
                                              use_cached_rows)
from services.shared.stores.store_health import watch_cassandra
from services.shared.stores.store_pressure import StorePressure
from services.shared.stores.write_coalescer import SUPPORTED as coalescing_supported
from services.shared.stores.write_coalescer import WriteCoalescer
from services.shared.worker.batch_consumer import (ConsumerLag, Splitter, consume_in_batches,
                                                   refresh_lag_periodically)
from services.shared.worker.count_owner import CountOwner
from services.shared.worker.event_publisher import EventPublisher
from services.shared.worker.faust_app import (OpenedOnce, RawMessage, build_faust_app, raw_topic,
                                              tune_worker_process)
from services.shared.worker.notices import Notices
from services.shared.worker.poison_guard import GuardedProcessing

from .account_events import AccountChanges, AccountCopy
from .copies import FOLLOW_EDGES, CopyStore
from .copy_audit import CopyAudit, count_sink
from .inactive import InactiveSweeper
from .inbox import InboxStore
from .metrics import FANOUT_CAPACITY
from .post_events import PostFanout
from .profile_events import ProfileChanges
from .rank_moves import RankMoves
from .relation_events import RelationChanges
from .returning import ReturningReaders
from .tier_store import CapacitySaving, TierStore
from .tiering import CapacityEstimate, TierPolicy
from .verifier import Verifier

log = logging.getLogger(__name__)


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class FanoutPorts:
    """Everything the agents need, created on the worker's event loop at start."""

    posts: PostFanout
    relations: RelationChanges
    rank_moves: RankMoves
    guard: GuardedProcessing
    publisher: EventPublisher
    lag: ConsumerLag
    sweeper: InactiveSweeper | None
    returning: ReturningReaders
    follow_counts: CountedEdges
    verifier: Verifier
    accounts: AccountChanges
    profiles: ProfileChanges


class _PostFanoutOptions(TypedDict, total=False):
    """``PostFanout``'s optional arguments that ``open_ports`` passes only when set."""

    inactive: Callable[[int], Awaitable[frozenset[int]]]


def group_id(settings: FanoutProcess) -> str:
    """The consumer group (faust app id): ``fanout_group_id``, or ``<topic prefix>.fanout``."""
    return settings.fanout_group_id or f"{settings.topic_prefix}.fanout"


def tier_policy(settings: FanoutProcess) -> TierPolicy:
    return TierPolicy(settings.freshness_target_s, settings.tier_promote_share,
                      settings.tier_demote_share, settings.tier_min_dwell_s)


async def open_ports(settings: FanoutProcess) -> FanoutPorts:
    session = cql.session(settings, timeout=settings.worker_store_timeout_s)
    watch_cassandra(session.cluster)
    use_cached_rows(session)
    # One adaptive limit of statements in flight and one retry budget for every store of
    # the process (services/shared/stores/store_pressure.py), on the dashboard.
    pressure = StorePressure.from_settings(settings)
    pressure.export_metrics()
    runner = CqlRunner(session, permits=pressure.permits)
    publisher = EventPublisher(settings)
    await publisher.start()
    notices = Notices(publisher, serving_changes_topic(settings.topic_prefix))
    linger = settings.fanout_coalesce_s if settings.fanout_coalesce_s >= 0 and coalescing_supported else None
    # Two coalescers: inbox rows keep their own bound (fanout_push_batches_in_flight), so
    # a large audience's queued batches never hold back the small writes (copies, marks,
    # timeline rows) every other post waits on; those take only the runner's permits.
    copy_writes = inbox_writes = None
    if linger is not None:
        copy_writes = WriteCoalescer(runner, linger_s=linger, max_in_flight=settings.store_max_in_flight)
        inbox_writes = WriteCoalescer(runner, linger_s=linger, max_rows=settings.fanout_batch_rows,
                                      max_in_flight=settings.fanout_push_batches_in_flight)
    copies = CopyStore(session, runner, settings.fanout_follower_page, notices, copy_writes,
                       read_linger_s=linger)
    inbox = InboxStore(session, runner, max_in_flight=settings.fanout_max_in_flight,
                       cap=settings.inbox_cap, trim_every=settings.inbox_trim_every,
                       push_batches_in_flight=settings.fanout_push_batches_in_flight,
                       batch_rows=settings.fanout_batch_rows,
                       notices=notices, writes=inbox_writes, read_linger_s=linger)
    capacity = CapacityEstimate(settings.fanout_capacity_floor_rows_per_s,
                                settings.fanout_capacity_pinned_rows_per_s)
    tiers = TierStore(session, runner, tier_policy(settings), capacity, _utc_now,
                      read_linger_s=linger,
                      saving=CapacitySaving(group_id(settings), settings.fanout_capacity_save_every_s,
                                            settings.fanout_capacity_max_age_s))
    await tiers.restore_capacity()
    FANOUT_CAPACITY.set(capacity.rows_per_s)  # on the dashboard from the start: floor or restored
    activity = ActivityStore(session, runner, read_linger_s=linger)
    tracked = settings.inactive_after.total_seconds() > 0
    inactive = activity.inactive_followers if tracked else None
    rebuild = rebuilder(copies, inbox, settings.inbox_cap)
    sweeper = None
    if tracked:
        sweeper = InactiveSweeper(activity, Window(settings.inactive_after,
                                                   settings.activity_resolution), rebuild)
    options: _PostFanoutOptions = {"inactive": inactive} if inactive else {}
    posts = PostFanout(copies, inbox, tiers, publisher, settings.topic_prefix,
                       retry=StoreRetry(settings.store_retry_attempts, settings.store_retry_base_s,
                                        gate=pressure.retries),
                       push_rounds=settings.fanout_posts_by_batch, **options)
    tune_worker_process(settings)
    account_copy = AccountCopy(session, runner, notices)
    return FanoutPorts(
        accounts=AccountChanges(account_copy),
        posts=posts,
        relations=RelationChanges(copies, inbox, publisher, settings.topic_prefix, _utc_now,
                                  unflag=activity.unflag if tracked else None),
        rank_moves=RankMoves(copies, inbox, _utc_now, inactive),
        guard=GuardedProcessing(settings, publisher, TRANSIENT_STORE_ERRORS, retries=pressure.retries),
        publisher=publisher, lag=ConsumerLag(), sweeper=sweeper,
        returning=ReturningReaders(activity, rebuild),
        follow_counts=CountedEdges(session, runner, FOLLOW_EDGES, settings.counts_generation),
        # The copies it repairs are written through this process's CopyStore, so their
        # notices reach the API's caches.
        verifier=Verifier(settings, CopyAudit(session, runner, copies,
                                              count_sink(publisher, settings.topic_prefix),
                                              accounts=account_copy)),
        profiles=ProfileChanges(copies))


ChangeApplier = Callable[[FanoutPorts], Callable[[ChangeRecord], Awaitable[None]]]
# An agent's message handler, made from the ports once they are open.
MessageHandler = Callable[[FanoutPorts], Callable[[RawMessage], Awaitable[None]]]
E = TypeVar("E")


def create_app(settings: FanoutProcess) -> faust.App:
    app = build_faust_app(settings, group_id(settings))
    prefix = settings.topic_prefix
    ports = OpenedOnce(lambda: open_ports(settings))

    async def consume(stream: faust.StreamT[bytes], handler: MessageHandler,
                      keys_in_flight: int = settings.fanout_max_in_flight,
                      split: Callable[[FanoutPorts], Splitter] | None = None) -> None:
        p = await ports.get()
        await consume_in_batches(app, stream, p.guard, p.lag, handler(p),
                                 max_batch=settings.consumer_batch_max,
                                 within_s=settings.consumer_batch_within_s,
                                 keys_in_flight=keys_in_flight,
                                 max_unacked=settings.consumer_max_unacked,
                                 split=split(p) if split is not None else None)

    def changes(apply: ChangeApplier) -> MessageHandler:
        def handler(p: FanoutPorts) -> Callable[[RawMessage], Awaitable[None]]:
            async def handle(msg: RawMessage) -> None:
                change = parse_change(msg.key, msg.value)
                if change is not None:  # None: the tombstone after a delete
                    await apply(p)(change)
            return handle
        return handler

    def events(parse: Callable[[bytes | None], E | None],
               apply: Callable[[FanoutPorts], Callable[[E], Awaitable[object]]]) -> MessageHandler:
        """A topic of our own events: each value parsed (None: nothing to do), then applied."""
        def handler(p: FanoutPorts) -> Callable[[RawMessage], Awaitable[None]]:
            async def handle(msg: RawMessage) -> None:
                event = parse(msg.value)
                if event is not None:
                    await apply(p)(event)
            return handle
        return handler

    @app.agent(raw_topic(app, cdc_topic("posts", prefix)), name="posts")
    async def posts(stream: faust.StreamT[bytes]) -> None:
        # A batch's posts older than the inbox TTL go together (backlog.py), the rest
        # post by post beside them, their inbox rows in rounds (push_rounds.py).
        await consume(stream, changes(lambda p: p.posts.on_post_changed),
                      keys_in_flight=settings.fanout_posts_in_flight,
                      split=(lambda p: p.posts.split_batch) if settings.fanout_posts_by_batch else None)

    @app.agent(raw_topic(app, cdc_topic("follows", prefix)), name="follows")
    async def follows(stream: faust.StreamT[bytes]) -> None:
        await consume(stream, changes(lambda p: p.relations.on_follow_changed))

    @app.agent(raw_topic(app, cdc_topic("blocks", prefix)), name="blocks")
    async def blocks(stream: faust.StreamT[bytes]) -> None:
        await consume(stream, changes(lambda p: p.relations.on_block_changed))

    @app.agent(raw_topic(app, cdc_topic("mutes", prefix)), name="mutes")
    async def mutes(stream: faust.StreamT[bytes]) -> None:
        await consume(stream, changes(lambda p: p.relations.on_mute_changed))

    @app.agent(raw_topic(app, cdc_topic("account_states", prefix)), name="account_states")
    async def account_states(stream: faust.StreamT[bytes]) -> None:
        await consume(stream, changes(lambda p: p.accounts.on_account_changed))

    @app.agent(raw_topic(app, cdc_topic("users", prefix)), name="users")
    async def users(stream: faust.StreamT[bytes]) -> None:
        await consume(stream, changes(lambda p: p.profiles.on_user_changed))

    @app.agent(raw_topic(app, rank_moves_topic(prefix)), name="rank_key_moves")
    async def rank_key_moves(stream: faust.StreamT[bytes]) -> None:
        await consume(stream, events(parse_rank_move, lambda p: p.rank_moves.on_rank_key_moved))

    @app.agent(raw_topic(app, reader_events_topic(prefix)), name="reader_events")
    async def reader_events(stream: faust.StreamT[bytes]) -> None:
        # None from the parser: a kind of reader event this worker does not act on.
        await consume(stream, events(parse_reader_event, lambda p: p.returning.on_reader_returned))

    @app.agent(raw_topic(app, follow_counts_topic(prefix)), name="follow_counts")
    async def follow_counts(stream: faust.StreamT[bytes]) -> None:
        p = await ports.get()
        owner = CountOwner(p.follow_counts, settings.fanout_max_in_flight)
        await consume_in_batches(app, stream, p.guard, p.lag, owner.take,
                                 max_batch=settings.consumer_batch_max,
                                 within_s=settings.consumer_batch_within_s,
                                 keys_in_flight=settings.fanout_max_in_flight,
                                 finish_batch=owner.apply,
                                 max_unacked=settings.consumer_max_unacked)

    refresh_lag_periodically(app, lambda: ports.opened.lag if ports.opened is not None else None)

    follows_topic = cdc_topic("follows", prefix)

    @app.timer(interval=max(1.0, settings.inactive_sweep_every_s))
    async def sweep_inactive_readers() -> None:
        # One worker sweeps: the one assigned partition 0 of the follows topic (faust's
        # leader election is off, topic_disable_leader). Two at once during a rebalance
        # only repeat idempotent work.
        opened = ports.opened
        if opened is None or opened.sweeper is None:
            return
        if not any(tp.topic == follows_topic and tp.partition == 0
                   for tp in app.consumer.assignment()):
            return
        try:
            await opened.sweeper.sweep()
        except Exception:  # noqa: BLE001 - the next interval resumes where this stopped
            log.warning("inactive-reader sweep failed; resuming next interval", exc_info=True)

    if settings.visibility_verify_every_s > 0:  # 0: this deployment's fan-out does not verify
        @app.timer(interval=max(0.1, settings.visibility_verify_every_s))
        async def verify_visibility() -> None:
            # Every worker tries; the one holding the verifier's advisory lock walks the
            # visibility log (verifier.py). tick() logs its errors and backs off itself.
            opened = ports.opened
            if opened is not None:
                await opened.verifier.tick()

    return app
