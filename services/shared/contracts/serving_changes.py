"""``<prefix>.serving-changes``: which serving copies a worker just changed in Cassandra.

Contract: ``schemas/serving-changes.{key,value}.v1.json``. The read path keeps the
copies a page needs (post states, readers' follows and blocks, author-timeline tops, inbox
tops, readers' stored preferences, authors' names, the posts each reader liked) in
an in-process cache (services/api/copies/serving_cache.py); a notice tells every API
process which entries to drop. The writer publishes a notice only after Cassandra
acknowledged the write, and waits for the broker's acknowledgement before the source
message counts as handled (so a crash in between replays both), which is what lets the
cache drop an entry only when a re-read would see the new state.

Notices are idempotent and unordered (dropping an entry twice is harmless), so the key
is only for spreading load: the first id named. Parse and build live here, together, so
they cannot drift. The publishing side, ``Notices``, is the worker runtime's
(services/shared/worker/notices.py).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Protocol

from .envelope import MalformedEnvelope, json_object

# Ids per notice: a block names two users, a move one post and one partition; an
# unusually wide change is split so no notice approaches the broker's record limit.
MAX_IDS = 500


@dataclass(frozen=True)
class ServingChange:
    posts: tuple[int, ...] = ()
    graphs: tuple[int, ...] = ()                   # users whose follows or blocks changed
    timelines: tuple[tuple[int, int], ...] = ()    # (author_id, day bucket)
    inboxes: tuple[int, ...] = ()                  # readers whose feed_inbox rows changed
    preferences: tuple[int, ...] = ()              # readers whose stored preferences changed
    profiles: tuple[int, ...] = ()                 # users whose names (user_profiles) changed
    likers: tuple[int, ...] = ()                   # users who liked or unliked a post (their
                                                   # liked posts, which API processes keep)
    accounts: tuple[int, ...] = ()                 # users whose account copy (suspended,
                                                   # deleted or neither) changed

    def __bool__(self) -> bool:
        return bool(self.posts or self.graphs or self.timelines or self.inboxes or self.preferences
                    or self.profiles or self.likers or self.accounts)


def encode(change: ServingChange) -> tuple[bytes, bytes]:
    """(key, value) of a notice (ids as decimal strings, like every JSON body)."""
    first = next(iter(change.posts or change.graphs or change.inboxes or change.preferences
                      or change.profiles or change.likers or change.accounts
                      or tuple(a for a, _ in change.timelines)), 0)
    value: dict[str, object] = {}
    if change.posts:
        value["posts"] = [str(p) for p in change.posts]
    if change.graphs:
        value["graphs"] = [str(u) for u in change.graphs]
    if change.timelines:
        value["timelines"] = [[str(a), b] for a, b in change.timelines]
    if change.inboxes:
        value["inboxes"] = [str(r) for r in change.inboxes]
    if change.preferences:
        value["preferences"] = [str(r) for r in change.preferences]
    if change.profiles:
        value["profiles"] = [str(u) for u in change.profiles]
    if change.likers:
        value["likers"] = [str(u) for u in change.likers]
    if change.accounts:
        value["accounts"] = [str(u) for u in change.accounts]
    return json.dumps(str(first)).encode(), json.dumps(value, separators=(",", ":")).encode()


def _ids(raw: object, name: str) -> tuple[int, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_IDS:
        raise MalformedEnvelope(f"{name} must be a list of at most {MAX_IDS} ids")
    out = []
    for item in raw:
        if not isinstance(item, str) or not item.isdigit() or len(item) > 19:
            raise MalformedEnvelope(f"{name} holds {item!r}, not a decimal id")
        out.append(int(item))
    return tuple(out)


def parse(raw_value: bytes | str | None) -> ServingChange | None:
    """One notice; ``None`` for a null value. Raises ``MalformedEnvelope``."""
    value = json_object(raw_value, "serving-changes value")
    if value is None:
        return None
    extra = set(value) - {"posts", "graphs", "timelines", "inboxes", "preferences", "profiles",
                          "likers", "accounts"}
    if extra:
        raise MalformedEnvelope(f"unknown fields {sorted(extra)}")
    timelines = value.get("timelines") or []
    if not isinstance(timelines, list) or len(timelines) > MAX_IDS:
        raise MalformedEnvelope(f"timelines must be a list of at most {MAX_IDS} pairs")
    parts: list[tuple[int, int]] = []
    for pair in timelines:
        if (not isinstance(pair, list) or len(pair) != 2 or isinstance(pair[1], bool)
                or not isinstance(pair[1], int) or pair[1] < 0):
            raise MalformedEnvelope(f"timeline {pair!r} is not [author_id, bucket]")
        parts.append((_ids([pair[0]], "timelines")[0], pair[1]))
    return ServingChange(_ids(value.get("posts"), "posts"), _ids(value.get("graphs"), "graphs"),
                         tuple(parts), _ids(value.get("inboxes"), "inboxes"),
                         _ids(value.get("preferences"), "preferences"),
                         _ids(value.get("profiles"), "profiles"),
                         _ids(value.get("likers"), "likers"), _ids(value.get("accounts"), "accounts"))


class ChangeSink(Protocol):
    """Where a store reports the serving copies it changed (after the write succeeded)."""

    async def changed(self, change: ServingChange) -> None: ...


class NoNotices:
    """For writers whose rows no API process caches yet (seeding before the API starts)."""

    async def changed(self, change: ServingChange) -> None:
        return None


NO_NOTICES = NoNotices()


def merge(changes: Iterable[ServingChange]) -> ServingChange:
    """One change naming every id of ``changes`` once (in id order)."""
    posts: set[int] = set()
    graphs: set[int] = set()
    timelines: set[tuple[int, int]] = set()
    inboxes: set[int] = set()
    preferences: set[int] = set()
    profiles: set[int] = set()
    likers: set[int] = set()
    accounts: set[int] = set()
    for c in changes:
        posts.update(c.posts)
        graphs.update(c.graphs)
        timelines.update(c.timelines)
        inboxes.update(c.inboxes)
        preferences.update(c.preferences)
        profiles.update(c.profiles)
        likers.update(c.likers)
        accounts.update(c.accounts)
    return ServingChange(tuple(sorted(posts)), tuple(sorted(graphs)), tuple(sorted(timelines)),
                         tuple(sorted(inboxes)), tuple(sorted(preferences)), tuple(sorted(profiles)),
                         tuple(sorted(likers)), tuple(sorted(accounts)))


def split(change: ServingChange) -> Iterable[ServingChange]:
    """``change`` as notices of at most ``MAX_IDS`` ids per list."""
    n = max(len(change.posts), len(change.graphs), len(change.timelines), len(change.inboxes),
            len(change.preferences), len(change.profiles), len(change.likers), len(change.accounts))
    for i in range(0, max(n, 1), MAX_IDS):
        part = ServingChange(change.posts[i:i + MAX_IDS], change.graphs[i:i + MAX_IDS],
                             change.timelines[i:i + MAX_IDS], change.inboxes[i:i + MAX_IDS],
                             change.preferences[i:i + MAX_IDS], change.profiles[i:i + MAX_IDS],
                             change.likers[i:i + MAX_IDS], change.accounts[i:i + MAX_IDS])
        if part:
            yield part
