"""Profiles: the shape of a handle and a display name (PUT /v1/me/profile), the names a
page shows read from the copy in one batched read per window and kept per process
(services/api/copies/names.py), dropped by serving-changes notices, and the fan-out's
users handler writing the copy (services/fanout/profile_events.py). In memory."""
from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime, timezone
from typing import Any, Sequence

import orjson
import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from services.api.copies.bodies import BodyCache, PostCopies
from services.api.copies.names import NO_NAME, Name, Names, PageNames
from services.api.copies.serving_cache import ServingCache
from services.api.feed.metrics import FeedMetrics
from services.api.feed.reader import FeedReader
from services.api.http.models import DISPLAY_NAME_PATTERN, HANDLE_PATTERN, ProfileIn
from services.api.routes.feed import FeedItemOut, FeedPageOut, page_json
from services.fanout.profile_events import ProfileChanges
from services.shared.contracts import serving_changes
from services.shared.contracts.envelope import parse_change
from services.shared.contracts.serving_changes import ServingChange
from services.shared.domain import ids
from services.shared.domain.rules import VISIBLE
from services.shared.settings import ApiProcess
from tests.support.memory_stores import InMemoryFeedStore
from tests.support.schemas import examples_for, validation_errors

READER = 7
NOW = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
NOW_MS = int(NOW.timestamp() * 1000)


# -- validation -------------------------------------------------------------------------------
@pytest.mark.parametrize("handle", ["abc", "Ada_Lovelace", "a" * 30, "___", "X9_"])
def test_a_handle_of_3_to_30_letters_digits_or_underscores_is_kept_as_typed(handle: str) -> None:
    assert ProfileIn(handle=handle).handle == handle


@pytest.mark.parametrize("handle", ["ab", "a" * 31, "ada lovelace", "ada-l", "ada.l", "adé",
                                    "abc\n", "", "ab\x00c"])
def test_any_other_handle_is_refused(handle: str) -> None:
    with pytest.raises(ValidationError):
        ProfileIn(handle=handle)


@pytest.mark.parametrize("raw,stored", [("Ada", "Ada"), ("  Ada Lovelace \n", "Ada Lovelace"),
                                        ("\u3000Ada\u00a0", "Ada"), ("Élève 東京 🙂", "Élève 東京 🙂"),
                                        ("x" * 64, "x" * 64), (" " + "x" * 64 + "\t", "x" * 64),
                                        ("a  b", "a  b")])
def test_a_display_name_is_trimmed_and_kept(raw: str, stored: str) -> None:
    assert ProfileIn(display_name=raw).display_name == stored


@pytest.mark.parametrize("raw", ["", "   ", "\n\t", "x" * 65, "a\x00b", "a\x07b", "a\nb",
                                 "a\x85b", "a\x9fb", "a\ud800"])
def test_an_empty_long_or_control_character_display_name_is_refused(raw: str) -> None:
    with pytest.raises(ValidationError):
        ProfileIn(display_name=raw)


def test_left_out_fields_clear_and_unknown_fields_are_refused() -> None:
    assert ProfileIn().model_dump() == {"handle": None, "display_name": None}
    with pytest.raises(ValidationError):
        ProfileIn.model_validate({"handle": "abc", "bio": "hi"})


@pytest.mark.parametrize("raw", ["Ada", "  Ada  ", "", " ", "x" * 64, "x" * 65, "a\x01b",
                                 "\u2003a\u2003", "a\u2028b", "\x85a", "a\x85"])
def test_the_documented_pattern_says_what_the_api_does(raw: str) -> None:
    """The OpenAPI document's pattern (read by clients and the fuzzer with their own regex
    engines) accepts exactly what the API accepts."""
    try:
        ProfileIn(display_name=raw)
        accepted = True
    except ValidationError:
        accepted = False
    assert bool(re.search(DISPLAY_NAME_PATTERN, raw)) is accepted
    assert re.search(HANDLE_PATTERN, "abc")


# -- Names: the kept copy ----------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class NameRows:
    """The copy (``user_profiles``), counting reads; ``fail`` makes them raise."""

    def __init__(self, names: dict[int, tuple[str | None, str | None]] | None = None) -> None:
        self.names = dict(names or {})
        self.calls: list[list[int]] = []
        self.fail = False
        self.gate: asyncio.Event | None = None

    async def __call__(self, user_ids: list[int]) -> Sequence[Sequence[Any]]:
        self.calls.append(list(user_ids))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise TimeoutError("names read timed out")
        return [(u, *self.names[u]) for u in user_ids if u in self.names]


def test_names_are_read_in_one_in_read_and_kept_ttl_s() -> None:
    rows, clock = NameRows({1: ("ada", "Ada"), 2: (None, "Bob")}), Clock()
    names = Names(rows, ttl_s=2.0, monotonic=clock)
    got = asyncio.run(names.of([1, 2, 3, 1]))
    assert got == {1: Name("ada", "Ada"), 2: Name(None, "Bob"), 3: NO_NAME}
    assert rows.calls == [[1, 2, 3]]
    rows.names[1] = ("ada2", "Ada 2")
    assert asyncio.run(names.of([1, 3])) == {1: Name("ada", "Ada"), 3: NO_NAME}  # kept, no read
    assert len(rows.calls) == 1
    clock.t += 2.0
    assert asyncio.run(names.of([1])) == {1: Name("ada2", "Ada 2")}  # expired: read again
    assert rows.calls[-1] == [1]


def test_more_users_than_a_chunk_are_read_in_chunks_together() -> None:
    rows = NameRows({u: (f"u{u:03d}", None) for u in range(120)})
    got = asyncio.run(Names(rows, ttl_s=2.0).of(range(120)))
    assert len(got) == 120 and got[119] == Name("u119", None)
    assert [len(c) for c in rows.calls] == [50, 50, 20]


def test_a_notice_drops_a_renamed_user_at_once_and_a_clear_drops_everyone() -> None:
    rows = NameRows({1: ("ada", "Ada"), 2: ("bob", "Bob")})
    names = Names(rows, ttl_s=60.0)
    asyncio.run(names.of([1, 2]))
    rows.names[1], rows.names[2] = ("ada_l", "Ada L"), ("bobby", "Bobby")
    cache = ServingCache(posts=10, follows=10, timelines=10, inboxes=10, ttl_s=1, max_silence_s=5)
    cache.profile_listeners.append(names.drop)
    cache.apply(ServingChange(profiles=(1,)))
    assert asyncio.run(names.of([1, 2])) == {1: Name("ada_l", "Ada L"), 2: Name("bob", "Bob")}
    cache.clear()
    assert asyncio.run(names.of([2])) == {2: Name("bobby", "Bobby")}


def test_a_read_that_overlapped_a_notice_is_not_kept() -> None:
    rows = NameRows({1: ("ada", "Ada")})
    names = Names(rows, ttl_s=60.0)

    async def scenario() -> Name:
        rows.gate = asyncio.Event()
        reading = asyncio.ensure_future(names.of([1]))
        await asyncio.sleep(0)
        names.drop((1,))                       # the rename's notice, while the read is out
        rows.names[1] = ("ada_l", "Ada L")
        rows.gate.set()
        await reading                          # answered before the rename: not kept
        rows.gate = None
        return (await names.of([1]))[1]

    assert asyncio.run(scenario()) == Name("ada_l", "Ada L")
    assert len(rows.calls) == 2


def test_a_failed_read_is_reported_not_raised_by_maybe() -> None:
    rows = NameRows({1: ("ada", "Ada")})
    rows.fail = True
    names = Names(rows, ttl_s=2.0)
    assert asyncio.run(names.maybe([1])) is None
    with pytest.raises(TimeoutError):
        asyncio.run(names.of([1]))


def test_page_names_ask_each_author_once() -> None:
    rows = NameRows({1: ("ada", None)})
    page = PageNames(Names(rows, ttl_s=0.0))

    async def scenario() -> None:
        page.start([1, 2, 1, None])
        page.start([2, 1])   # nothing new: no read
        await page.settle()
        page.start([3])
        await page.settle()

    asyncio.run(scenario())
    assert rows.calls == [[1, 2], [3]]
    assert page.name_of(1) == Name("ada", None) and page.name_of(2) == NO_NAME and not page.failed


# -- a feed page --------------------------------------------------------------------------------
def world(authors: int, posts_each: int) -> tuple[InMemoryFeedStore, list[int]]:
    store = InMemoryFeedStore()
    made: list[tuple[float, int, int]] = []
    n = 0
    for a in range(1, authors + 1):
        store.follow(READER, 100 + a, 0)
        for _ in range(posts_each):
            at = NOW_MS - 60_000 * (n + 1)
            post = ids.compose(at, 1, n)
            store.write_post(post, 100 + a, at, f"post {n}", VISIBLE, False, None)
            store.set_rank_key(post, float(1000 - n), 1)
            store.add_author_post(100 + a, post, float(1000 - n))
            made.append((float(1000 - n), post, 100 + a))
            n += 1
    store.put_inbox(READER, made)
    return store, [p for _, p, _ in made]


def reader(store: InMemoryFeedStore, names: Names | None) -> FeedReader:
    return FeedReader(store, PostCopies(store, BodyCache(1000)), ApiProcess(snapshot_reuse_s=0),
                      FeedMetrics(CollectorRegistry()), lambda: NOW, names=names)


def test_a_page_reads_its_authors_names_once_and_its_items_carry_them() -> None:
    store, posts = world(authors=5, posts_each=6)
    rows = NameRows({101: ("ada", "Ada Lovelace"), 102: (None, "Bob"), 103: ("cy", None)})
    feed = reader(store, Names(rows, ttl_s=2.0))
    page = asyncio.run(feed.first_page(READER, 20))
    assert [i.entry.post_id for i in page.items] == posts[:20]
    assert len(rows.calls) == 1                      # one name read for the page
    assert set(rows.calls[0]) == {101, 102, 103, 104}  # the items' authors, not the window's
    by_author = {i.body.author_id: (i.author_handle, i.author_display_name) for i in page.items}
    assert by_author[101] == ("ada", "Ada Lovelace") and by_author[102] == (None, "Bob")
    assert by_author[103] == ("cy", None) and by_author[104] == (None, None)
    body = orjson.loads(page_json(page))
    FeedPageOut.model_validate(body)
    assert all(set(item) == set(FeedItemOut.model_fields) for item in body["items"])
    first = next(i for i in body["items"] if i["author_id"] == "101")
    assert (first["author_handle"], first["author_display_name"]) == ("ada", "Ada Lovelace")
    # The next page reads only its author not read before; the others are kept.
    asyncio.run(feed.next_page(READER, 10, page.next_cursor or ""))
    assert rows.calls[1:] == [[105]]


def test_a_failed_name_read_serves_the_page_with_null_names_and_says_so() -> None:
    store, posts = world(authors=2, posts_each=3)
    rows = NameRows({101: ("ada", "Ada")})
    rows.fail = True
    page = asyncio.run(reader(store, Names(rows, ttl_s=2.0)).first_page(READER, 10))
    assert [i.entry.post_id for i in page.items] == posts
    assert "names_unavailable" in page.warnings
    assert all(i.author_handle is None and i.author_display_name is None for i in page.items)
    FeedPageOut.model_validate(orjson.loads(page_json(page)))


def test_without_names_wired_items_carry_null_names() -> None:
    store, _posts = world(authors=1, posts_each=2)
    page = asyncio.run(reader(store, None).first_page(READER, 10))
    assert all(i.author_handle is None for i in page.items) and not page.warnings


# -- the notice and the fan-out -------------------------------------------------------------------
def test_a_profiles_notice_round_trips_and_conforms_to_its_schema() -> None:
    change = ServingChange(profiles=(5, 3))
    key, value = serving_changes.encode(change)
    assert serving_changes.parse(value) == change
    assert validation_errors("serving-changes", json.loads(key), json.loads(value)) == []
    merged = serving_changes.merge([change, ServingChange(posts=(1,), profiles=(3, 9))])
    assert merged.profiles == (3, 5, 9)
    assert [p.profiles for p in serving_changes.split(ServingChange(profiles=tuple(range(501))))] \
        == [tuple(range(500)), (500,)]


class CopyWrites:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def write_profile(self, user_id: int, handle: str | None, display_name: str | None,
                            lsn: int) -> None:
        self.calls.append(("write", user_id, handle, display_name, lsn))

    async def delete_profile(self, user_id: int, lsn: int) -> None:
        self.calls.append(("delete", user_id, lsn))


def _raw(x: Any) -> bytes | None:
    return None if x is None else json.dumps(x).encode()


def test_every_users_example_reaches_the_fanout_and_writes_the_copy_at_its_lsn() -> None:
    examples = {ex.name: ex for ex in examples_for("public.users")}
    assert {"create", "update-profile", "delete", "tombstone", "read-snapshot"} <= set(examples)
    copies = CopyWrites()
    handler = ProfileChanges(copies)  # type: ignore[arg-type]
    for name in ("create", "read-snapshot", "update-profile", "delete", "tombstone"):
        ex = examples[name]
        change = parse_change(_raw(ex.key), _raw(ex.value))
        if change is not None:
            asyncio.run(handler.on_user_changed(change))
    lsn = examples["update-profile"].value["source"]["lsn"]
    user = examples["update-profile"].key["user_id"]
    # A new user without names writes nothing; the update writes both; the delete removes.
    assert copies.calls == [("write", user, "Ada_Lovelace", "Ada Lovelace", lsn),
                            ("delete", user, examples["delete"].value["source"]["lsn"])]


def test_clearing_names_writes_nulls_over_the_old_ones() -> None:
    [ex] = [e for e in examples_for("public.users") if e.name == "update-profile"]
    value = json.loads(json.dumps(ex.value))
    value["before"], value["after"] = value["after"], value["before"]  # names set -> cleared
    change = parse_change(_raw(ex.key), _raw(value))
    assert change is not None
    copies = CopyWrites()
    asyncio.run(ProfileChanges(copies).on_user_changed(change))  # type: ignore[arg-type]
    assert copies.calls == [("write", ex.key["user_id"], None, None, value["source"]["lsn"])]
