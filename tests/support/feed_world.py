"""Helpers for the read-path tests: seeding Cassandra the fan-out's way (the ``world``
fixture, tests/integration/conftest.py, is one ``FeedWorld`` per test module).

``FeedWorld`` writes serving rows through the fan-out's own stores (``CopyStore``,
``InboxStore``, ``TierStore``, ``RankMoves``) and the ranker's ``RankStore``, each copy
write with a fresh, increasing write timestamp, rank-key rows at the post's time (µs),
exactly what the workers do for a CDC event. It does not run
the asynchronous clean-up, which is the point: the read path must filter deleted,
removed, blocked and unfollowed content before that clean-up happens. Like counts are
written through the ranker's count owner (``CountedEdges``, ``count_likes``). ``SseReader``
collects server-sent events from a real HTTP stream in a thread.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import queue
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Coroutine, Sequence, TypeVar

import httpx
from confluent_kafka import Producer

from services.fanout.account_events import AccountCopy
from services.fanout.audience import PostFields
from services.fanout.copies import CopyStore
from services.fanout.inbox import InboxStore
from services.fanout.rank_moves import RankMoves
from services.fanout.tier_store import TierStore
from services.fanout.tiering import CapacityEstimate, TierPolicy
from services.ranker.rank_keys import planned_move
from services.ranker.store import RankStore
from services.shared.contracts.feed_events import AuthorPosted
from services.shared.contracts.feed_events import encode as encode_event
from services.shared.contracts.serving_changes import ServingChange
from services.shared.contracts.topics import (author_events_topic,
                                              serving_changes_topic)
from services.shared.domain import ids
from services.shared.domain.ranking import rank_key
from services.shared.domain.rules import REMOVED, VISIBLE
from services.shared.settings import Settings
from services.shared.clients import cql, kafka
from services.shared.domain.edge_transitions import EdgeChange
from services.shared.stores.counted_edges import LIKE_EDGES, CountedEdges, OwnedChange
from services.shared.stores.cql_async import CqlRunner
from services.shared.worker.event_publisher import EventPublisher
from services.shared.worker.notices import Notices

from .waiting import wait_until

T = TypeVar("T")
_SEQ = itertools.count(1)
_TS = itertools.count(int(time.time() * 1_000_000))  # write timestamps (µs), increasing
_OFFSETS = itertools.count(int(time.time() * 1000))  # count-topic offsets, increasing


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def new_post_id(at: datetime) -> int:
    """A Snowflake id at ``at`` on a random node: unique across test runs and processes."""
    node = secrets.randbelow(ids.MAX_NODE + 1)
    return ids.compose(int(at.timestamp() * 1000), node, next(_SEQ) & ids.MAX_SEQUENCE)


@dataclass
class Post:
    post_id: int
    author_id: int
    created_at: datetime
    text: str
    media: tuple[str, ...] = ()


class FeedWorld:
    """Serving rows for the read-path tests, written through the workers' own stores."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.session = cql.session(settings)
        self._loop = asyncio.new_event_loop()
        runner = CqlRunner(self.session)
        # Notices as the workers publish them: the API's serving cache drops what changed.
        self.publisher = EventPublisher(settings)
        self.run(self.publisher.start())
        self.notices = Notices(self.publisher, serving_changes_topic(settings.topic_prefix))
        self.copies = CopyStore(self.session, runner, 500, self.notices)
        self.account_copy = AccountCopy(self.session, runner, self.notices)
        self.inbox = InboxStore(self.session, runner, max_in_flight=16, cap=500, trim_every=1_000_000,
                                notices=self.notices)
        # Pinned capacity of 1 row/s: any author with followers is "too expensive" and
        # promotion is immediate (no dwell), so make_celebrity goes through the policy.
        self.tiers = TierStore(self.session, runner, TierPolicy(min_dwell_s=0.0),
                               CapacityEstimate(1.0, pinned_rows_per_s=1.0), utc_now)
        self.ranks = RankStore(self.session, notices=self.notices)
        self.moves = RankMoves(self.copies, self.inbox, utc_now)
        self.like_edges = CountedEdges(self.session, runner, LIKE_EDGES, 1)
        self._producer: Producer | None = None
        self.watchers: list[Any] = []  # RunningApi instances whose caches must see changes

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    def seen_by(self, api: Any, timeout: float = 10.0) -> None:
        """Wait until ``api`` (a ``RunningApi``) has applied every serving-changes notice
        this world published: its next request reads what was written until now."""
        cache = getattr(api.app.state, "serving_cache", None)
        if cache is None:
            return
        wanted = dict(self.notices.delivered)
        wait_until(lambda: all(cache.applied.get(p, -1) >= n for p, n in wanted.items()),
                   timeout=timeout, message="the API to apply the serving-changes notices")

    def _settled(self) -> None:
        """After a change: every watching API has its notices (the contract is "on the
        next request after the notice is applied", docs/read-path.md)."""
        for api in self.watchers:
            self.seen_by(api)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
        self.run(self.publisher.stop())
        self._loop.close()
        self.session.cluster.shutdown()

    # -- graph ----------------------------------------------------------------------------------
    def follow(self, reader: int, author: int, since: datetime | None = None) -> None:
        since = since or utc_now() - timedelta(days=3)
        self.run(self.copies.apply_follow(reader, author, since, next(_TS)))
        self._settled()

    def unfollow(self, reader: int, author: int) -> None:
        self.run(self.copies.apply_follow(reader, author, None, next(_TS)))
        self._settled()

    def block(self, blocker: int, blocked: int) -> None:
        self.run(self.copies.add_block(blocker, blocked, next(_TS)))
        self._settled()

    def unblock(self, blocker: int, blocked: int) -> None:
        self.run(self.copies.remove_block(blocker, blocked, next(_TS)))
        self._settled()

    def mute(self, muter: int, muted: int) -> None:
        self.run(self.copies.add_mute(muter, muted, next(_TS)))
        self._settled()

    def unmute(self, muter: int, muted: int) -> None:
        self.run(self.copies.remove_mute(muter, muted, next(_TS)))
        self._settled()

    def name(self, user: int, handle: str | None, display_name: str | None) -> None:
        """The user's names in the read path's copy, written (and announced) as the
        fan-out's users agent writes them (services/fanout/profile_events.py)."""
        self.run(self.copies.write_profile(user, handle, display_name, next(_TS)))
        self._settled()

    def account(self, user: int, state: str | None) -> None:
        """The user's account copy (``suspended``, ``deleted``; None: no row, as after an
        unsuspend), written (and announced) as the fan-out's account agent writes it
        (services/fanout/account_events.py). Postgres is left as it is."""
        if state is None:
            self.run(self.account_copy.delete(user, next(_TS)))
        else:
            self.run(self.account_copy.write(user, state, None, next(_TS)))
        self._settled()

    def store_preference(self, reader: int, order: str) -> None:
        """A feed order stored and announced as another API process does (preferences.py)."""
        self.session.execute("INSERT INTO reader_preferences (reader_id, feed_order, updated_at) "
                             "VALUES (%s, %s, toTimestamp(now()))", (reader, order))
        self.run(self.notices.changed(ServingChange(preferences=(reader,))))
        self._settled()

    def make_celebrity(self, author: int) -> None:
        decision = self.run(self.tiers.tier_for_post(author, 1_000_000))
        assert decision.tier.value == "celebrity"

    # -- posts ------------------------------------------------------------------------------------
    def write(self, author: int, *, at: datetime | None = None, text: str = "hello",
              inbox_of: list[int] = (), score: float | None = None,  # type: ignore[assignment]
              post_id: int | None = None, media: Sequence[str] = ()) -> Post:
        """A post copy keyed by ``score`` and its author-timeline row; inbox rows for
        ``inbox_of`` only (as the fan-out writes them: at the post's time, in µs).
        ``post_id``: the copy of a post the API stored in Postgres (with its ``at``)."""
        at = at or utc_now()
        post = Post(post_id or new_post_id(at), author, at, text, tuple(media))
        ts = next(_TS)
        key = rank_key(score, int(at.timestamp() * 1000))
        key_ts = int(at.timestamp() * 1_000_000)
        self.run(self.copies.write_post(self._fields(post), ts))
        if score is not None:
            self.run(self.ranks.set_score(post.post_id, score))
        self.run(self.copies.set_rank_key(post.post_id, key, key_ts))
        self.run(self.copies.add_author_post(author, post.post_id, key, key_ts))
        if inbox_of:
            self.run(self.copies.mark_fanned_out(post.post_id, True, ts))
            self.run(self.inbox.push(list(inbox_of), post.post_id, author, key, key_ts))
        self._settled()
        return post

    def count_likes(self, post_id: int, users: Sequence[int], liked: bool = True) -> None:
        """The likes of ``users`` counted as the ranker's count owner does (``CountedEdges``
        on ``like_edges``, offsets increasing): the post's count a page reads."""
        changes = [OwnedChange(EdgeChange(user, liked, next(_TS)), next(_OFFSETS)) for user in users]
        self.run(self.like_edges.apply(post_id, changes))

    def inbox_rows(self, reader: int) -> list[tuple[float, int, int]]:
        """Every ``(rank_key, post_id, author_id)`` row of ``reader``'s inbox, read directly."""
        return [tuple(r) for r in self.session.execute(
            "SELECT rank_key, post_id, author_id FROM feed_inbox WHERE reader_id = %s", (reader,))]

    def delete(self, post: Post) -> None:
        """The copy marked deleted (the inbox rows stay: clean-up is asynchronous)."""
        self.run(self.copies.write_post(self._fields(post, deleted=True), next(_TS)))
        self._settled()

    def remove(self, post: Post) -> None:
        """Moderation removal: visibility REMOVED on the copy."""
        self.run(self.copies.write_post(self._fields(post, visibility=REMOVED), next(_TS)))
        self._settled()

    def set_score(self, post_id: int, score: float) -> None:
        """What the ranker and the fan-out do with a new score: store it and, when the
        key moved far enough, move the post's rows (services/fanout/rank_moves.py)."""
        self.run(self.ranks.set_score(post_id, score))
        state = self.run(self.ranks.key_state(post_id))
        move = planned_move(post_id, state, score, time.time_ns() // 1000) if state else None
        if move is not None:
            self.run(self.ranks.set_rank_key_next(post_id, move.to_key, move.key_ts))
            self.run(self.moves.on_rank_key_moved(move))
        self._settled()

    @staticmethod
    def _fields(post: Post, *, deleted: bool = False, visibility: int = VISIBLE) -> PostFields:
        return PostFields(post.post_id, post.author_id, post.created_at, post.text,
                          list(post.media), visibility, deleted)

    # -- fan-out events ------------------------------------------------------------------------------
    def _produce(self, topic: str, key: bytes, value: bytes) -> None:
        if self._producer is None:
            self._producer = kafka.producer(self.settings, {"partitioner": "murmur2_random"})
        self._producer.produce(topic, key=key, value=value)
        assert self._producer.flush(10) == 0

    def announce(self, post: Post) -> None:
        """The post's ``author-events`` record, as the fan-out publishes it once the post
        is readable (its inbox rows written, or a celebrity's author partition)."""
        key, value = encode_event(AuthorPosted(post.author_id, post.post_id, post.created_at))
        self._produce(author_events_topic(self.settings.topic_prefix), key, value)


def feed_ids(page: dict[str, Any]) -> list[int]:
    return [int(i["post_id"]) for i in page["items"]]


def walk(client: httpx.Client, limit: int, between: Callable[[int], None] = lambda _: None,
         max_pages: int = 200, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every page of one snapshot; ``between(page_number)`` runs before each next page;
    ``params`` go with every request (``order``, say)."""
    pages = []
    response = client.get("/v1/feed", params={**(params or {}), "limit": limit})
    assert response.status_code == 200, response.text
    pages.append(response.json())
    while pages[-1]["next_cursor"] and len(pages) < max_pages:
        between(len(pages))
        response = client.get("/v1/feed", params={**(params or {}), "limit": limit,
                                                  "cursor": pages[-1]["next_cursor"]})
        assert response.status_code == 200, response.text
        pages.append(response.json())
    return pages


class SseReader:
    """Reads one SSE stream in a thread; ``events`` yields parsed events."""

    def __init__(self, client: httpx.Client, headers: dict[str, str] | None = None,
                 params: dict[str, str] | None = None) -> None:
        self.events: queue.Queue[dict[str, str]] = queue.Queue()
        self.status: int | None = None
        self.connected = threading.Event()
        self._stop = threading.Event()
        self._client = client
        self._thread = threading.Thread(target=self._run, args=(client, headers or {}, params or {}),
                                        daemon=True)
        self._thread.start()

    def _run(self, client: httpx.Client, headers: dict[str, str], params: dict[str, str]) -> None:
        try:
            self._read(client, headers, params)
        except (httpx.HTTPError, RuntimeError):
            pass  # closed from the test thread
        finally:
            self.connected.set()

    def _read(self, client: httpx.Client, headers: dict[str, str], params: dict[str, str]) -> None:
        with client.stream("GET", "/v1/feed/stream", headers=headers, params=params) as response:
            self.status = response.status_code
            if response.status_code != 200:
                response.read()
                self.body = response.text
                self.connected.set()
                return
            event: dict[str, str] = {}
            for line in response.iter_lines():
                if self._stop.is_set():
                    return
                if line.startswith(":"):
                    if "connected" in line:
                        self.connected.set()
                    elif line.startswith(": sent "):   # when the event's bytes were written
                        event["sent"] = line.removeprefix(": sent ")
                    continue
                if not line:
                    if event:
                        self.events.put(event)
                    event = {}
                    continue
                name, _, value = line.partition(":")
                event[name] = value.lstrip(" ")

    def next_item(self, timeout: float) -> dict[str, str] | None:
        """The next event, or None when none arrives within ``timeout``."""
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        self._stop.set()
        self._client.close()
        self._thread.join(timeout=10)


def new_item_post_ids(events: list[dict[str, str]]) -> list[int]:
    return [int(json.loads(e["data"])["post_id"]) for e in events if e.get("event") == "new_item"]
