"""The read grid's data: author pools, reader cells and what the pipeline would have
made of them. Pure: no I/O; the clock (``now``) and the random source are arguments.

* One **author pool per history length** (1, 7, 30, 90 days), shared by every follows
  value of that length: ``max(follows) + POOL_CELEBRITIES`` authors, the first
  ``POOL_CELEBRITIES`` of them celebrities, every author posting ``POSTS_PER_DAY`` at
  random times over the history.
* A **cell** = (history, follows): ``readers`` readers (fewer for large follow lists,
  ``FOLLOW_EDGES_PER_CELL``), each following ``follows`` authors of the pool, among them
  ``celebrities_followed(follows)`` celebrities; one follow in ``LATE_FOLLOW_EVERY``
  started half-way through the history (``following_since`` hides the older posts);
  each reader blocks one followed ordinary author and is blocked by another.
* The **small** cell is the demo graph (``deploy.workload``, 2,000 users, 3 days of
  history) with ``SMALL_READERS`` random readers following at least 5 authors.
* ``inbox_of``: what fan-out leaves in a reader's inbox: ordinary authors' visible posts
  of the last ``INBOX_DAYS`` made at or after ``following_since``, not from a blocked
  author, at most ``inbox_cap``, highest rank key first.
"""
from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable, NamedTuple

from deploy.workload import Graph as DemoGraph
from services.shared.domain import ids

# The specified posting rate for an active author (docs/architecture.md).
POSTS_PER_DAY = 5
# Celebrities per pool: a few very-followed accounts, so our read path pays its
# read-time merge and the pull query sees the same authors as everyone else.
POOL_CELEBRITIES = 5
# Follow edges per cell: bounds what a cell adds to seeding (follow rows, and inbox rows
# per reader) so a grid seeds in minutes; 2,000-follow cells get 10 readers, not 20.
FOLLOW_EDGES_PER_CELL = 20_000
# One follow in 10 started half-way through the history: following_since filters it.
LATE_FOLLOW_EVERY = 10
# Inbox rows live 7 days (the inbox table's default_time_to_live).
INBOX_DAYS = 7
# The small cell's readers: 200 random users of the demo graph with at least 5 follows.
SMALL_READERS, SMALL_MIN_FOLLOWS = 200, 5
# User ids of the grid start here: clear of the demo graph (deploy.workload.FIRST_USER_ID).
GRID_USER_BASE = 10_000_000
# Snowflake node ids of bulk-loaded grid posts (one per pool): never issued by a live
# generator in the bench database, so ids cannot collide (the demo graph uses 1023).
GRID_NODE_BASE = 1000


class Post(NamedTuple):
    """A post as both stores get it (a tuple: a million are made per grid)."""

    post_id: int
    author_id: int
    created_at: datetime
    text: str


@dataclass
class Pool:
    history_days: int
    authors: list[int]
    celebrities: list[int]
    posts: list[Post] = field(default_factory=list)


@dataclass
class Cell:
    name: str                      # "h30-f500", "small"
    history_days: int
    follows: int                   # per reader (the small cell: median)
    readers: list[int]
    following: dict[int, dict[int, datetime]]   # reader -> author -> following_since
    blocks: list[tuple[int, int]]  # (blocker, blocked)


@dataclass
class ReadGraph:
    pools: list[Pool]
    cells: list[Cell]
    users: set[int]
    celebrities: set[int]

    def posts(self) -> list[Post]:
        return [p for pool in self.pools for p in pool.posts]


def celebrities_followed(follows: int) -> int:
    """Celebrities in a follow list: 1 for small lists, up to all of the pool's."""
    return min(POOL_CELEBRITIES, max(1, follows // 100))


def make_pool(index: int, history_days: int, size: int, now: datetime, rng: random.Random,
              first_user: int) -> Pool:
    """``size`` authors (the first ``POOL_CELEBRITIES`` celebrities), each with
    ``POSTS_PER_DAY`` posts a day at uniform random times over the history (not the last
    minute), texts of 40-200 characters, real Snowflake ids for those times."""
    authors = list(range(first_user, first_user + size))
    pool = Pool(history_days, authors, authors[:POOL_CELEBRITIES])
    span_ms = history_days * ids.MS_PER_DAY - 60_000
    newest_ms = int(now.timestamp() * 1000) - 60_000
    node = (GRID_NODE_BASE + index) << ids.NODE_SHIFT
    padding = "x" * 200
    seq = 0
    seen: set[int] = set()
    draw = rng.random
    for author in authors:
        for _ in range(POSTS_PER_DAY * history_days):
            seq += 1
            at_ms = newest_ms - int(draw() * span_ms)
            post_id = ((at_ms - ids.EPOCH_MS) << ids.TIMESTAMP_SHIFT) | node | (seq & ids.MAX_SEQUENCE)
            if post_id in seen:
                continue
            seen.add(post_id)
            created = datetime.fromtimestamp(at_ms / 1000, tz=now.tzinfo)
            text = f"post {seq} by {author} {padding[:40 + int(draw() * 160)]}"
            pool.posts.append(Post(post_id, author, created, text))
    return pool


def make_cell(pool: Pool, follows: int, readers: int, now: datetime, rng: random.Random,
              first_user: int) -> Cell:
    n = max(1, min(readers, FOLLOW_EDGES_PER_CELL // follows))
    ordinary = pool.authors[POOL_CELEBRITIES:]
    early = now - timedelta(days=pool.history_days + 2)
    late = now - timedelta(days=pool.history_days / 2)
    cell = Cell(f"h{pool.history_days}-f{follows}", pool.history_days, follows,
                list(range(first_user, first_user + n)), {}, [])
    n_celebs = celebrities_followed(follows)
    for reader in cell.readers:
        chosen = pool.celebrities[:n_celebs] + rng.sample(ordinary, follows - n_celebs)
        cell.following[reader] = {a: (late if i % LATE_FOLLOW_EVERY == LATE_FOLLOW_EVERY - 1
                                      else early) for i, a in enumerate(chosen)}
        blocked, blocker = rng.sample(chosen[n_celebs:], 2)
        cell.blocks += [(reader, blocked), (blocker, reader)]
    return cell


def make_grid(histories: list[int], follows: list[int], skip: set[tuple[int, int]],
              readers: int, now: datetime, rng: random.Random) -> ReadGraph:
    """Pools and cells for every (history, follows) not in ``skip``."""
    graph = ReadGraph([], [], set(), set())
    next_user = GRID_USER_BASE
    for index, days in enumerate(histories):
        wanted = [f for f in follows if (days, f) not in skip]
        if not wanted:
            continue
        pool = make_pool(index, days, max(wanted) + POOL_CELEBRITIES, now, rng, next_user)
        next_user += len(pool.authors)
        graph.pools.append(pool)
        graph.users.update(pool.authors)
        graph.celebrities.update(pool.celebrities)
        for f in wanted:
            cell = make_cell(pool, f, readers, now, rng, next_user)
            next_user += len(cell.readers)
            graph.users.update(cell.readers)
            graph.cells.append(cell)
    return graph


def add_small_cell(graph: ReadGraph, demo: DemoGraph, rng: random.Random) -> None:
    """The demo graph as the ``small`` cell and its pool (following since before its history)."""
    following: dict[int, dict[int, datetime]] = {}
    since = min(p[2] for p in demo.posts) - timedelta(days=1)
    for a, b in zip(demo.follower.tolist(), demo.followed.tolist()):
        following.setdefault(a, {})[b] = since
    celebs = set(demo.celebrity_ids.tolist())
    eligible = sorted(u for u, f in following.items() if u not in celebs and len(f) >= SMALL_MIN_FOLLOWS)
    readers = rng.sample(eligible, min(SMALL_READERS, len(eligible)))
    counts = sorted(len(following[r]) for r in readers)
    cell = Cell("small", demo.spec.history_days, counts[len(counts) // 2], readers,
                {r: following[r] for r in readers}, [])
    pool = Pool(demo.spec.history_days, [int(u) for u in demo.user_ids.tolist()], sorted(celebs),
                [Post(*p) for p in demo.posts])
    graph.pools.append(pool)
    graph.cells.append(cell)
    graph.users.update(pool.authors)
    graph.celebrities.update(celebs)


def inbox_of(cell: Cell, posts_by_author: dict[int, list[Post]], celebrities: set[int],
             now: datetime, cap: int, key: Callable[[Post], float]) -> dict[int, list[int]]:
    """post_id -> readers whose inbox holds it (fan-out's rows after trimming to ``cap``).
    ``posts_by_author`` lists each author's posts newest first (one score for every seeded
    post, so that is also by descending ``key``)."""
    horizon = now - timedelta(days=INBOX_DAYS)
    blocked: dict[int, set[int]] = {}
    for blocker, other in cell.blocks:
        blocked.setdefault(blocker, set()).add(other)
        blocked.setdefault(other, set()).add(blocker)
    out: dict[int, list[int]] = {}
    for reader, authors in cell.following.items():
        lists = [list(itertools.takewhile(lambda p, b=max(since, horizon): p.created_at >= b,
                                          posts_by_author.get(a, ())))
                 for a, since in authors.items()
                 if a not in celebrities and a not in blocked.get(reader, ())]
        for post in itertools.islice(heapq.merge(*lists, key=lambda p: -key(p)), cap):
            out.setdefault(post.post_id, []).append(reader)
    return out


def plan_serving(graph: ReadGraph, now: datetime, cap: int, serving_days: int,
                 key: Callable[[Post], float]) -> tuple[list[Post], dict[int, list[int]]]:
    """What the serving store gets: the posts (those of the last ``serving_days``, 0 for
    all, plus every post some inbox holds) and each post's inbox readers."""
    by_author: dict[int, list[Post]] = {}
    for p in sorted(graph.posts(), key=lambda p: p.created_at, reverse=True):
        by_author.setdefault(p.author_id, []).append(p)
    audience: dict[int, list[int]] = {}
    for cell in graph.cells:
        for post_id, readers in inbox_of(cell, by_author, graph.celebrities, now, cap, key).items():
            audience.setdefault(post_id, []).extend(readers)
    horizon = now - timedelta(days=serving_days) if serving_days else datetime.min.replace(tzinfo=now.tzinfo)
    posts = [p for p in graph.posts() if p.created_at >= horizon or p.post_id in audience]
    return posts, audience
