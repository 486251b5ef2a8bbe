"""The steady workload of a fault scenario, through the API, with a ledger of what was acked.

Writers: posts (one wide author every reader follows, one celebrity every reader and
``fans`` more users follow, and ordinary authors), likes and unlikes, and the actions
that must hide something at once (``_hiding``, several a second): deletes and moderation
removals of earlier posts, blocks and unblocks, mutes and unmutes, unfollows and follows
again, and suspensions of ordinary authors lifted a few seconds later, each followed by a
read of the affected reader's feed. A suspended author's posts are refused (403
``account-suspended``): counted as expected refusals per phase, never as acked posts.
And a few users who posted and are followed delete their accounts (``DELETE /v1/me``)
during the load, one every ``LEAVE_EVERY_S``. Readers page their feeds
and one watcher polls its first page to time freshness, and holds the feed's SSE stream
open from the end of the set-up to the check (reconnecting with ``Last-Event-ID``), so
the checker can ask whether any post reached neither the stream nor a ``resync``. Every 2xx is recorded in the
``Ledger``, and so is every feed page served (when its request started, to whom, what
it showed), so the checker can count what a page or stream event showed after an
action that should have hidden it was acknowledged (``shown_after_ack``); every response status (and transport error) is counted per phase (before,
during and after the fault), which is what the report's "API during the fault" shows.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import httpx

from services.api.http.auth import mint_token
from services.shared.settings import Settings


@dataclass
class PairHidden:
    """``author``'s posts hidden from ``reader`` from ``since`` (an ack) until ``until``
    (the start of the request that lifted it: an unblock, an unmute, or a follow again)."""

    reader: int
    author: int
    kind: str            # "block", "mute" (one way: reader mutes author) or "unfollow"
    since: float
    until: float = float("inf")


class Served(NamedTuple):
    """A feed page the workload was served: when its request started and when its answer
    arrived (None: not recorded, taken as at once), to whom, the post ids it showed.

    A hide later lifted (an unblock, an unmute, a follow again, an unsuspend) binds only
    the pages answered before the lift's request started: a page whose request started
    first may still reach the server, or read the log, after the lift committed."""

    started: float
    reader: int
    ids: tuple[int, ...]
    answered: float | None = None


@dataclass
class AccountHidden:
    """Every post of ``author`` hidden from every reader from ``since`` (a suspension's
    ack; inf when it was never acknowledged, a transport error or a 5xx: it may have
    happened) until ``until`` (the start of the unsuspend's request).

    ``requested`` (the suspension's request started) and ``lifted`` (the unsuspend's ack,
    inf until then) bound when the author may have been suspended: its new posts refused,
    its posts missing from pages and the stream (``window``). None: ``since``, ``until``."""

    author: int
    since: float
    until: float = float("inf")
    requested: float | None = None
    lifted: float | None = None
    kind: str = "suspension"   # or "deletion" (DELETE /v1/me: final, never lifted)

    def window(self) -> tuple[float, float]:
        """From the suspension's request to the unsuspend's ack."""
        return (self.since if self.requested is None else self.requested,
                self.until if self.lifted is None else self.lifted)


@dataclass
class Ledger:
    posts: dict[int, tuple[int, float]] = field(default_factory=dict)   # post -> (author, acked at)
    deleted: set[int] = field(default_factory=set)
    removed: set[int] = field(default_factory=set)                      # by a moderator
    hidden_posts: dict[int, float] = field(default_factory=dict)        # post -> delete/removal acked at
    pair_hidden: list[PairHidden] = field(default_factory=list)
    account_hidden: list[AccountHidden] = field(default_factory=list)  # suspensions, deletions
    # Writes refused because the account was suspended (403 ``account-suspended``), per
    # phase: "account-suspended" while a suspension's window was open (expected), and
    # "account-suspended while active" otherwise (a wrong refusal: the checker counts it).
    refusals: dict[str, Counter[str]] = field(default_factory=lambda: {
        "before": Counter(), "during": Counter(), "after": Counter()})
    actions: Counter = field(default_factory=Counter)                   # acked, by kind
    # Every feed page served.
    pages: list[Served] = field(default_factory=list)
    likes: dict[tuple[int, int], bool] = field(default_factory=dict)    # (post, user) -> liked
    follows: dict[tuple[int, int], bool] = field(default_factory=dict)  # (reader, author) -> following
    blocks: set[tuple[int, int]] = field(default_factory=set)           # (blocker, blocked)
    mutes: set[tuple[int, int]] = field(default_factory=set)            # (muter, muted)
    statuses: dict[str, Counter] = field(default_factory=lambda: {
        "before": Counter(), "during": Counter(), "after": Counter()})
    freshness_s: list[tuple[float, float]] = field(default_factory=list)  # (acked at, seconds)
    # The watcher's stream: (received at, event, post id or None, sent at by the server's
    # ``sent`` comment or None: read as the event's bytes were written, after any wait
    # for the socket, and at most 50 ms after its last check, else the server sent
    # ``resync`` in its place, services/api/stream/write_deadline.py), and when it was open.
    stream: list[tuple[float, str, int | None, float | None]] = field(default_factory=list)
    stream_opened: list[float] = field(default_factory=list)
    stream_statuses: Counter = field(default_factory=Counter)

    def suspended_between(self, author: int, start: float, end: float) -> bool:
        """Whether a suspension of ``author`` may have been in force at some time in
        [``start``, ``end``] (its ``window`` overlaps it)."""
        return any(s.author == author and s.window()[0] <= end and start <= s.window()[1]
                   for s in self.account_hidden)


@dataclass(frozen=True)
class Cast:
    wide: int
    celebrity: int
    authors: list[int]
    readers: list[int]
    fans: list[int]  # follow the celebrity only: its audience is past the tier line
    watcher: int
    moderator: int
    # Post a few posts in the set-up, are followed by a few readers (not the watcher), and
    # delete their accounts during the load (``_leaving``).
    leaving: list[int] = field(default_factory=list)

    @property
    def posting(self) -> list[int]:
        return [self.wide, self.celebrity, *self.authors]

    @property
    def everyone(self) -> list[int]:
        return [*self.posting, *self.readers, *self.fans, *self.leaving]


# The hiding actions, in turn (a cycle of eight): deletes and removals two turns, about
# half of the posts (4/s); block and follow toggles two turns each, since half of them
# lift a hiding; a mute toggle one turn (half of them unmutes, which lift one); a
# suspension toggle one turn (a suspension, lifted at the loop's next such turn once
# SUSPEND_HOLD_S have passed). At most one every 0.12 s per loop (HIDING_LOOPS below).
HIDING_EVERY_S = 0.12
# Loops of hiding actions at once: one action waits for its answer and a feed read or two
# (0.3-0.5 s on the loaded three nodes), so one loop acknowledged only 170-310 hiding
# actions a scenario. Each loop toggles blocks, mutes and follows of its own readers only: two
# loops toggling one pair at once could leave the ledger's order unlike Postgres's.
HIDING_LOOPS = 4
# Shares of the posts: the wide author's, the celebrity's; the rest are the ordinary
# authors'.
WIDE_SHARE = 0.25
CELEBRITY_SHARE = 0.15
# How long a suspension lasts at least (lifted at the first suspension turn after it: a
# loop's turns come round every 2-4 s under load). Each loop suspends its own share of the
# ordinary authors the watcher does not follow (``_suspendable``), one at a time: about
# two of the eight ordinary authors are suspended at any moment, and a post of theirs is
# refused (403).
SUSPEND_HOLD_S = 3.0
# Users who delete their accounts, each with LEAVING_POSTS posts (made in the set-up) and
# LEAVING_FOLLOWERS followers; one deletion every LEAVE_EVERY_S from the start of the load
# (with the suite's 20 s before the fault, one before it and one during it).
LEAVING = 2
LEAVING_POSTS = 3
LEAVING_FOLLOWERS = 4
LEAVE_EVERY_S = 15.0
# After the load: the suspensions still in force are lifted (the settled feeds then show
# the posts again), asked again up to this many times, 1 s apart.
LIFT_ATTEMPTS = 10


class Workload:
    def __init__(self, settings: Settings, *, seed: int = 7, post_every_s: float = 0.25,
                 readers: int = 24, authors: int = 8, fans: int = 16,
                 paging_loops: int = 6, leaving: int = LEAVING) -> None:
        self.settings = settings
        self.rng = random.Random(seed)
        self.ledger = Ledger()
        self.post_every_s = post_every_s
        self.paging_loops = paging_loops
        # Fresh users per run (the seed only fixes the workload's choices): a scenario run
        # twice must not inherit the first run's follows and posts.
        ids = itertools.count(random.SystemRandom().randrange(10**12, 9 * 10**12))
        wide, celebrity = next(ids), next(ids)
        cast_authors = [next(ids) for _ in range(authors)]
        cast_readers = [next(ids) for _ in range(readers)]
        self.cast = Cast(wide=wide, celebrity=celebrity, authors=cast_authors,
                         readers=cast_readers, fans=[next(ids) for _ in range(fans)],
                         watcher=cast_readers[0], moderator=next(ids),
                         leaving=[next(ids) for _ in range(leaving)])
        self._moderator_token = mint_token(self.cast.moderator, settings.jwt_secret.get_secret_value(),
                                           roles=("moderator",), ttl_seconds=7200)
        self._hiding_turns = [itertools.cycle([self._delete, self._block, self._refollow, self._mute,
                                               self._remove, self._block, self._refollow,
                                               self._suspend])
                              for _ in range(HIDING_LOOPS)]
        # Per hiding loop, its suspension not yet lifted (acknowledged or not).
        self._suspended: dict[int, AccountHidden] = {}
        self.phase = "before"
        self._stop = asyncio.Event()
        self._client: httpx.AsyncClient | None = None
        self._streaming: asyncio.Task | None = None
        self._seen: set[int] = set()  # posts the watcher's first page has shown
        self.backlog: Any = None       # backlog.Backlog, loaded by the backlog scenario
        self.lost_hide: Any = None     # lost_hide.LostHide, made by the lost-hide scenario
        # Block, follow, mute and suspension toggles held back (the lost-hide scenario,
        # from its lift until the verifier has released the hold's entries): posting,
        # deletes and reads go on.
        self.toggles_paused = False

    # -- plumbing --------------------------------------------------------------------------
    def _headers(self, user: int) -> dict[str, str]:
        return {"Authorization": "Bearer " + mint_token(
            user, self.settings.jwt_secret.get_secret_value(), ttl_seconds=7200)}

    async def call(self, method: str, path: str, user: int, **kw) -> httpx.Response | None:
        assert self._client is not None
        headers = {**self._headers(user), **kw.pop("headers", {})}
        try:
            response = await self._client.request(method, path, headers=headers, **kw)
        except httpx.HTTPError as exc:
            self.ledger.statuses[self.phase][type(exc).__name__] += 1
            return None
        self.ledger.statuses[self.phase][str(response.status_code)] += 1
        return response

    async def feed(self, reader: int, params: dict) -> httpx.Response | None:
        """``GET /v1/feed``, with what it showed recorded for ``shown_after_ack``."""
        started = time.time()
        r = await self.call("GET", "/v1/feed", reader, params=params)
        if r is not None and r.status_code == 200:
            self.ledger.pages.append(Served(started, reader, tuple(int(i["post_id"]) for i in r.json()["items"]),
                                            time.time()))
        return r

    async def open(self) -> None:
        self._client = httpx.AsyncClient(
            base_url=f"http://{self.settings.api_host}:{self.settings.api_port}", timeout=10.0,
            limits=httpx.Limits(max_connections=32))

    async def close(self) -> None:
        if self._streaming is not None:
            self._streaming.cancel()
            await asyncio.gather(self._streaming, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()

    def start_stream(self) -> None:
        """Open the watcher's SSE stream until ``close`` (after the check)."""
        self._streaming = asyncio.ensure_future(self._stream())

    async def _stream(self) -> None:
        assert self._client is not None
        last_id: str | None = None
        while True:
            headers = self._headers(self.cast.watcher)
            if last_id is not None:
                headers["Last-Event-ID"] = last_id
            try:
                async with self._client.stream("GET", "/v1/feed/stream", headers=headers,
                                               timeout=httpx.Timeout(10.0, read=60.0)) as r:
                    self.ledger.stream_statuses[str(r.status_code)] += 1
                    if r.status_code != 200:
                        await asyncio.sleep(1.0)
                        continue
                    self.ledger.stream_opened.append(time.time())
                    event: dict[str, str] = {}
                    async for line in r.aiter_lines():
                        if line:
                            name, _, value = line.partition(":")
                            event[name] = value.removeprefix(" ")
                            continue
                        if "event" in event:
                            post = json.loads(event["data"]).get("post_id") if event.get("data") else None
                            stamp = event.get("", "")  # the ": sent <ms>" comment: written at
                            sent = (int(stamp.removeprefix("sent ")) / 1000
                                    if stamp.startswith("sent ") else None)
                            self.ledger.stream.append((time.time(), event["event"],
                                                       int(post) if post else None, sent))
                        last_id = event.get("id", last_id)
                        event = {}
            except httpx.HTTPError as exc:
                self.ledger.stream_statuses[type(exc).__name__] += 1
            await asyncio.sleep(0.5)

    # -- set-up ----------------------------------------------------------------------------
    async def setup(self) -> None:
        """Every user exists (a first authenticated request creates the row), then every
        reader follows the wide author, the celebrity and three ordinary ones, every fan
        the celebrity, and a few readers each leaving user, who then posts."""
        for user in self.cast.everyone:
            await self.call("GET", "/v1/feed", user, params={"limit": 1})
        for reader in self.cast.readers:
            for author in [self.cast.wide, self.cast.celebrity, *self.rng.sample(self.cast.authors, 3)]:
                await self._follow(reader, author, True)
        for fan in self.cast.fans:
            await self._follow(fan, self.cast.celebrity, True)
        others = self.cast.readers[1:]
        for user in self.cast.leaving:
            for reader in self.rng.sample(others, min(LEAVING_FOLLOWERS, len(others))):
                await self._follow(reader, user, True)
            for _ in range(LEAVING_POSTS):
                r = await self.call("POST", "/v1/posts", user, json={"text": f"fault-suite {uuid.uuid4().hex[:8]}"},
                                    headers={"Idempotency-Key": uuid.uuid4().hex})
                if r is not None and r.status_code == 201:
                    self.ledger.posts[int(r.json()["post_id"])] = (user, time.time())

    async def _follow(self, reader: int, author: int, on: bool) -> bool:
        started = time.time()
        r = await self.call("PUT" if on else "DELETE", f"/v1/users/{author}/follow", reader)
        if r is None or r.status_code not in (200, 201, 204):
            return False
        led = self.ledger
        led.follows[(reader, author)] = on
        if on:
            self._lift(reader, author, "unfollow", started)
        else:
            led.pair_hidden.append(PairHidden(reader, author, "unfollow", time.time()))
        return True

    def _lift(self, a: int, b: int, kind: str, at: float) -> None:
        """End the open hidings of ``kind`` between ``a`` and ``b`` (either way) at ``at``."""
        for h in self.ledger.pair_hidden:
            if h.kind == kind and h.until == float("inf") and {h.reader, h.author} == {a, b}:
                h.until = at

    # -- loops -----------------------------------------------------------------------------
    async def _every(self, period_s: float, step) -> None:  # noqa: ANN001
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                await step()
            except Exception:  # noqa: BLE001 - a failed step is counted by call()
                pass
            await asyncio.sleep(max(0.0, period_s - (time.monotonic() - started)))

    async def _post(self) -> None:
        pick = self.rng.random()
        author = (self.cast.wide if pick < WIDE_SHARE else
                  self.cast.celebrity if pick < WIDE_SHARE + CELEBRITY_SHARE else
                  self.rng.choice(self.cast.authors))
        started = time.time()
        r = await self.call("POST", "/v1/posts", author, json={"text": f"fault-suite {uuid.uuid4().hex[:8]}"},
                            headers={"Idempotency-Key": uuid.uuid4().hex})
        if r is not None and r.status_code == 201:
            self.ledger.posts[int(r.json()["post_id"])] = (author, time.time())
        elif r is not None:
            self._refused(r, author, started)

    def _refused(self, r: httpx.Response, user: int, started: float) -> bool:
        """Whether ``r`` is a write refused because ``user`` is suspended (403
        ``account-suspended``); counted in ``refusals`` as expected when a suspension of
        the user may have been in force during the request, else as a wrong refusal."""
        if r.status_code != 403 or not _problem_type(r).endswith("account-suspended"):
            return False
        expected = self.ledger.suspended_between(user, started, time.time())
        self.ledger.refusals[self.phase]["account-suspended" if expected
                                         else "account-suspended while active"] += 1
        return True

    def _own_readers(self, loop: int) -> list[int]:
        """The readers whose blocks, mutes and follows hiding loop ``loop`` toggles (never
        the watcher, who keeps its follows and mutes no one)."""
        return self.cast.readers[1:][loop::HIDING_LOOPS]

    async def _hiding(self, loop: int) -> None:
        """One of the actions that must hide something at once, in turn, then a read of
        the feed of a reader it concerns."""
        step = next(self._hiding_turns[loop])
        if self.toggles_paused and step in (self._block, self._refollow, self._mute, self._suspend):
            return
        reader = await step(loop)
        if reader is not None:
            await self._read(reader)

    async def _read(self, reader: int) -> None:
        """The reader's first page, then the next."""
        r = await self.feed(reader, {"limit": 20})
        if r is not None and r.status_code == 200 and r.json().get("next_cursor"):
            await self.feed(reader, {"limit": 20, "cursor": r.json()["next_cursor"]})

    def _older_alive_post(self) -> int | None:
        """A post to delete or remove: not deleted or removed yet, by a user who stays."""
        led = self.ledger
        leaving = set(self.cast.leaving)
        alive = [p for p, (author, _) in led.posts.items() if p not in led.hidden_posts and author not in leaving]
        if len(alive) < 10:
            return None
        return self.rng.choice(alive[:-5])  # not the newest: those are being timed

    async def _delete(self, loop: int) -> int | None:
        post = self._older_alive_post()
        if post is None:
            return None
        r = await self.call("DELETE", f"/v1/posts/{post}", self.ledger.posts[post][0])
        if r is not None and r.status_code == 204:
            self.ledger.deleted.add(post)
            self.ledger.hidden_posts[post] = time.time()
            self.ledger.actions["delete"] += 1
        return self.rng.choice(self.cast.readers[1:])

    async def _remove(self, loop: int) -> int | None:
        post = self._older_alive_post()
        if post is None:
            return None
        r = await self.call("POST", f"/internal/moderation/posts/{post}", self.cast.moderator,
                            json={"action": "remove", "reason": "fault suite"},
                            headers={"Authorization": "Bearer " + self._moderator_token})
        if r is not None and r.status_code == 200:
            self.ledger.removed.add(post)
            self.ledger.hidden_posts[post] = time.time()
            self.ledger.actions["remove"] += 1
        return self.rng.choice(self.cast.readers[1:])

    async def _like(self) -> None:
        if not self.ledger.posts:
            return
        post = self.rng.choice(list(self.ledger.posts))
        user = self.rng.choice(self.cast.readers)
        on = not self.ledger.likes.get((post, user), False)
        r = await self.call("PUT" if on else "DELETE", f"/v1/posts/{post}/like", user)
        if r is not None and r.status_code == 204:
            self.ledger.likes[(post, user)] = on

    async def _refollow(self, loop: int) -> int | None:
        reader = self.rng.choice(self._own_readers(loop))
        author = self.rng.choice(self.cast.authors)
        on = not self.ledger.follows.get((reader, author), False)
        if await self._follow(reader, author, on):
            self.ledger.actions["follow" if on else "unfollow"] += 1
        return reader

    async def _block(self, loop: int) -> int | None:
        """An author blocks a reader, or lifts its block. A block also ends both follows
        (the API does, in the same transaction), which only a follow again lifts."""
        now = time.time()  # a suspended author may not block (403): one who is not
        blocker = self.rng.choice([a for a in self.cast.authors
                                   if not self.ledger.suspended_between(a, now, now)] or self.cast.authors)
        blocked = self.rng.choice(self._own_readers(loop))
        on = (blocker, blocked) not in self.ledger.blocks
        started = time.time()
        r = await self.call("PUT" if on else "DELETE", f"/v1/users/{blocked}/block", blocker)
        if r is not None and r.status_code != 204:
            self._refused(r, blocker, started)  # suspended by another loop meanwhile
        if r is None or r.status_code != 204:
            return blocked
        led = self.ledger
        led.actions["block" if on else "unblock"] += 1
        if on:
            led.blocks.add((blocker, blocked))
            acked = time.time()
            for reader, author in ((blocked, blocker), (blocker, blocked)):
                led.pair_hidden.append(PairHidden(reader, author, "block", acked))
                if led.follows.get((reader, author)):
                    led.follows[(reader, author)] = False
                    led.pair_hidden.append(PairHidden(reader, author, "unfollow", acked))
        else:
            led.blocks.discard((blocker, blocked))
            self._lift(blocker, blocked, "block", started)
        return blocked

    async def _mute(self, loop: int) -> int | None:
        """A reader mutes an author, or lifts its mute: one way, the follow stays."""
        muter = self.rng.choice(self._own_readers(loop))
        muted = self.rng.choice(self.cast.authors)
        on = (muter, muted) not in self.ledger.mutes
        started = time.time()
        r = await self.call("PUT" if on else "DELETE", f"/v1/users/{muted}/mute", muter)
        if r is None or r.status_code != 204:
            return muter
        led = self.ledger
        led.actions["mute" if on else "unmute"] += 1
        if on:
            led.mutes.add((muter, muted))
            led.pair_hidden.append(PairHidden(muter, muted, "mute", time.time()))
        else:
            led.mutes.discard((muter, muted))
            self._lift(muter, muted, "mute", started)
        return muter

    def _suspendable(self, loop: int) -> list[int]:
        """The ordinary authors hiding loop ``loop`` suspends: its share of those the
        watcher does not follow (its freshness and stream checks keep every author they
        watch; the wide author and the celebrity, which every reader follows, are never
        suspended)."""
        watcher = self.cast.watcher
        return [a for a in self.cast.authors if not self.ledger.follows.get((watcher, a))][loop::HIDING_LOOPS]

    def _a_follower(self, author: int) -> int:
        """A reader (not the watcher) who follows ``author`` now, as the ledger says."""
        followers = [r for (r, a), on in self.ledger.follows.items()
                     if a == author and on and r != self.cast.watcher]
        return self.rng.choice(followers or self.cast.readers[1:])

    async def _moderate_account(self, author: int, action: str) -> httpx.Response | None:
        return await self.call("POST", f"/internal/moderation/users/{author}", self.cast.moderator,
                               json={"action": action, "reason": "fault suite"},
                               headers={"Authorization": "Bearer " + self._moderator_token})

    async def _suspend(self, loop: int) -> int | None:
        """A moderator suspends one of the loop's authors, or lifts the loop's suspension
        once it has lasted ``SUSPEND_HOLD_S``; then a follower of the author reads."""
        held = self._suspended.get(loop)
        if held is not None:
            if time.time() - held.window()[0] < SUSPEND_HOLD_S:
                return None
            await self._unsuspend(loop)
            return self._a_follower(held.author)
        candidates = self._suspendable(loop)
        if not candidates:
            return None
        author = self.rng.choice(candidates)
        # In the ledger from the request on (unacknowledged: since = inf): a post of the
        # author may be refused from then, and the next turn lifts it whatever the answer.
        held = AccountHidden(author, float("inf"), requested=time.time(), lifted=float("inf"))
        self.ledger.account_hidden.append(held)
        self._suspended[loop] = held
        r = await self._moderate_account(author, "suspend")
        if r is not None and r.status_code == 200:
            held.since = time.time()
            self.ledger.actions["suspend"] += 1
        elif r is not None and r.status_code < 500:  # refused: nothing happened
            self.ledger.account_hidden.remove(held)
            del self._suspended[loop]
            return None
        return self._a_follower(author)

    async def _unsuspend(self, loop: int) -> bool:
        """Lift the loop's suspension; False when it may still be in force (asked again
        at the next turn)."""
        held = self._suspended[loop]
        started = time.time()
        r = await self._moderate_account(held.author, "unsuspend")
        if r is not None and r.status_code != 200 and r.status_code < 500:
            return False  # refused: still suspended
        # From this request on a page may show the author's posts again (it may have
        # committed even without an answer).
        held.until = min(held.until, started)
        if r is None or r.status_code != 200:
            return False
        held.lifted = time.time()
        self.ledger.actions["unsuspend"] += 1
        del self._suspended[loop]
        return True

    async def _leaving(self) -> None:
        """One leaving user every ``LEAVE_EVERY_S`` deletes their account, then one of
        their followers reads."""
        for user in self.cast.leaving:
            try:
                await asyncio.wait_for(self._stop.wait(), LEAVE_EVERY_S)
                return  # the load ended first
            except asyncio.TimeoutError:
                pass
            follower = await self._delete_account(user)
            if follower is not None:
                await self._read(follower)

    async def _delete_account(self, user: int) -> int | None:
        """``DELETE /v1/me``: every post of the user hidden from every reader for good,
        their follows removed. A follower of theirs (before), or None if no one was."""
        led = self.ledger
        followers = [r for (r, a), on in led.follows.items() if a == user and on]
        gone = AccountHidden(user, float("inf"), requested=time.time(), lifted=float("inf"),
                             kind="deletion")
        led.account_hidden.append(gone)
        r = await self.call("DELETE", "/v1/me", user)
        if r is not None and r.status_code == 204:
            gone.since = time.time()
            led.actions["delete_account"] += 1
        elif r is not None and r.status_code < 500 and r.status_code != 410:
            led.account_hidden.remove(gone)  # refused: nothing happened
            return None
        # Deleted (or, unanswered, maybe): the follows went with it.
        for reader in followers:
            led.follows[(reader, user)] = False
        return self.rng.choice(followers) if followers else None

    async def lift_suspensions(self) -> int:
        """After the load: lift every suspension still in force (asked again, 1 s apart,
        up to ``LIFT_ATTEMPTS`` times); the number left suspended."""
        for _attempt in range(LIFT_ATTEMPTS):
            for loop in list(self._suspended):
                await self._unsuspend(loop)
            if not self._suspended:
                break
            await asyncio.sleep(1.0)
        return len(self._suspended)

    async def _page(self) -> None:
        reader = self.rng.choice(self.cast.readers)
        r = await self.feed(reader, {"limit": 20})
        if r is not None and r.status_code == 200 and r.json().get("next_cursor"):
            await self.feed(reader, {"limit": 20, "cursor": r.json()["next_cursor"]})

    async def _watch(self) -> None:
        """Freshness: when each post by an author the watcher follows first shows on its
        first page (it keeps its follows: the wide author, the celebrity, three others).
        In latest order: a new post has no likes yet, so in ranked order it can sit below
        the top 50 (liked posts) and would be timed late, or never."""
        while not self._stop.is_set():
            await self._look()
            await asyncio.sleep(0.2)

    async def _look(self) -> None:
        r = await self.feed(self.cast.watcher, {"limit": 50, "order": "latest"})
        now = time.time()
        if r is not None and r.status_code == 200:
            for item in r.json()["items"]:
                post = int(item["post_id"])
                if post not in self._seen and post in self.ledger.posts:
                    self._seen.add(post)
                    author, acked = self.ledger.posts[post]
                    # A suspension between the ack and now held the post back on purpose:
                    # not a freshness sample.
                    if not self.ledger.suspended_between(author, acked, now):
                        self.ledger.freshness_s.append((acked, max(0.0, now - acked)))

    def owed_to_watcher(self) -> set[int]:
        """Posts the watcher's feed owes it now: by an author it follows, not deleted, the
        author not suspended."""
        led = self.ledger
        now = time.time()
        followed = {a for (r, a), on in led.follows.items() if r == self.cast.watcher and on
                    and not led.suspended_between(a, now, now)}
        return {p for p, (author, _) in led.posts.items()
                if author in followed and p not in led.hidden_posts}

    async def watch_rest(self, timeout_s: float) -> int:
        """After the load: keep looking until every post owed to the watcher has shown (its
        freshness counted, not dropped because the load ended first); the number never seen."""
        deadline = time.monotonic() + timeout_s
        while (unseen := self.owed_to_watcher() - self._seen) and time.monotonic() < deadline:
            await self._look()
            await asyncio.sleep(0.2)
        return len(unseen)

    async def run(self, after_s: float, fault) -> None:  # noqa: ANN001 - async callable(workload)
        """Writers, readers and the watcher, with ``fault(self)`` alongside, until the fault
        is lifted and ``after_s`` more (the recovery under load); then the suspensions
        still in force are lifted."""
        loops = [self._every(self.post_every_s, self._post),
                 *(self._every(HIDING_EVERY_S, lambda k=k: self._hiding(k)) for k in range(HIDING_LOOPS)),
                 self._every(0.5, self._like), self._watch(), self._leaving()]
        loops += [self._every(0.05, self._page) for _ in range(self.paging_loops)]
        tasks = [asyncio.ensure_future(loop) for loop in loops]
        try:
            await fault(self)
            await asyncio.sleep(after_s)
        finally:
            self._stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.lift_suspensions()


def _problem_type(r: httpx.Response) -> str:
    """The problem+json ``type`` of an answer ("" when it has none)."""
    try:
        body = r.json()
    except ValueError:
        return ""
    return str(body.get("type", "")) if isinstance(body, dict) else ""
