"""A synthetic social graph with power-law follower counts, and its bulk loader: the
demo's data (``deploy/demo.py``, ``make run``) and the benchmarks' (``bench/``), which
import it from here (``deploy/`` never imports ``bench/``).

Pure generation (``generate``) is deterministic for a seed; loading (``load_postgres``)
uses COPY, which is what "bulk" means for Postgres. The graph has:

- ``users`` users; a few *celebrities* followed by most users (the default full size,
  120,000 users with 5 celebrities at 85-95 % reach, gives each over 100,000 followers);
- every user follows a heavy-tailed number of ordinary authors (Pareto out-degree, mean
  ``mean_following``), chosen with Zipf weights, so in-degree is power-law too;
- a history of posts by the most-followed ordinary authors and the celebrities,
  timestamped over the last days with real Snowflake ids for those times;
- an activity distribution: days since each user last read their feed. A share
  ``inactive_share`` of users (an assumption: Twitter reported DAU/MAU near 0.4, a
  Mastodon server's monthly actives are often under a fifth of its accounts) last read
  15 to 120 days ago; the others within the last 13 days, most today or yesterday
  (geometric, p = 0.6);
- names: every user has a handle and a display name (``user_names``), as on any feed
  service, so items show who wrote them.
"""
from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

import numpy as np

from services.shared.domain import ids

if TYPE_CHECKING:
    import psycopg

    from services.shared.settings import Settings

# following_since sits well before every generated post, so history is visible (the
# no-backfill rule would otherwise hide it).
FOLLOW_SINCE_DAYS = 30
# Users ids start here: small, readable, and never collide with Snowflake post ids.
FIRST_USER_ID = 1_000


# Demo names: an adjective and a noun, the handle ending in the user id (unique, as the
# users table requires whatever the case), e.g. ``quiet_heron_1042`` / "Quiet Heron".
_ADJECTIVES = ("amber", "bold", "brisk", "calm", "clever", "eager", "fair", "gentle", "happy",
               "keen", "lively", "lucky", "merry", "quiet", "rapid", "silver", "sunny", "swift",
               "tidy", "witty")
_NOUNS = ("badger", "cedar", "comet", "falcon", "fern", "fox", "harbor", "heron", "lark",
          "lynx", "maple", "meadow", "otter", "pine", "raven", "river", "robin", "sparrow",
          "willow", "wren")


def user_names(user_id: int) -> tuple[str, str]:
    """A generated user's handle and display name: deterministic, readable, and within
    the users table's checks (handle 3-30 of ``[A-Za-z0-9_]``, unique by its id)."""
    adjective = _ADJECTIVES[user_id % len(_ADJECTIVES)]
    noun = _NOUNS[user_id // len(_ADJECTIVES) % len(_NOUNS)]
    return f"{adjective}_{noun}_{user_id}", f"{adjective.title()} {noun.title()}"


@dataclass(frozen=True)
class GraphSpec:
    users: int = 120_000
    celebrities: int = 5
    celebrity_reach: tuple[float, float] = (0.85, 0.95)
    mean_following: float = 12.0
    max_following: int = 400
    zipf_exponent: float = 1.1
    history_posts: int = 40_000
    history_days: int = 3
    likes_per_post: float = 3.0
    inactive_share: float = 0.3
    seed: int = 7

    @classmethod
    def short(cls) -> "GraphSpec":
        return cls(users=6_000, celebrities=3, history_posts=4_000)

    @classmethod
    def demo(cls) -> "GraphSpec":
        return cls(users=2_000, celebrities=2, history_posts=2_000)

    @classmethod
    def demo_small(cls) -> "GraphSpec":
        """The demo for the three-node stack on one small machine (deploy/demo.py): a
        quarter of ``demo``'s users and posts, a third of its likes. Three nodes exist
        to test faults, and on 2 cores they do RF-3 work for every write."""
        return cls(users=500, celebrities=2, history_posts=500, likes_per_post=1.0)


@dataclass
class Graph:
    spec: GraphSpec
    user_ids: np.ndarray
    celebrity_ids: np.ndarray
    follower: np.ndarray  # follow edges: follower[i] follows followed[i]
    followed: np.ndarray
    posts: list[tuple[int, int, datetime, str]] = field(default_factory=list)
    likes: list[tuple[int, int]] = field(default_factory=list)  # (post_id, user_id)
    # Days since each user (``user_ids[i]``) last read their feed.
    last_read_days: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def follower_counts(self) -> dict[int, int]:
        authors, counts = np.unique(self.followed, return_counts=True)
        return dict(zip(authors.tolist(), counts.tolist()))


def generate(spec: GraphSpec, now: datetime | None = None) -> Graph:
    rng = np.random.default_rng(spec.seed)
    now = now or datetime.now(timezone.utc)
    user_ids = np.arange(FIRST_USER_ID, FIRST_USER_ID + spec.users, dtype=np.int64)
    celebrity_ids = user_ids[: spec.celebrities]
    ordinary = user_ids[spec.celebrities:]

    edges_from: list[np.ndarray] = []
    edges_to: list[np.ndarray] = []
    for celeb in celebrity_ids:
        reach = rng.uniform(*spec.celebrity_reach)
        fans = user_ids[(rng.random(spec.users) < reach) & (user_ids != celeb)]
        edges_from.append(fans)
        edges_to.append(np.full(len(fans), celeb, dtype=np.int64))

    # Out-degree: Pareto (shape 2 has mean 2 x scale), clipped; in-degree: Zipf weights
    # over a random order of the ordinary authors.
    out_degree = np.minimum(spec.max_following,
                            np.ceil(rng.pareto(2.0, spec.users) * spec.mean_following / 2 + 1)
                            ).astype(np.int64)
    weights = 1.0 / np.arange(1, len(ordinary) + 1) ** spec.zipf_exponent
    weights /= weights.sum()
    popularity = rng.permutation(ordinary)
    targets = rng.choice(popularity, size=int(out_degree.sum()), p=weights)
    sources = np.repeat(user_ids, out_degree)
    keep = sources != targets
    edges_from.append(sources[keep])
    edges_to.append(targets[keep])

    follower = np.concatenate(edges_from)
    followed = np.concatenate(edges_to)
    pairs = np.unique(np.stack([follower, followed], axis=1), axis=0)
    graph = Graph(spec, user_ids, celebrity_ids, pairs[:, 0].copy(), pairs[:, 1].copy())
    graph.posts = _history(spec, graph, rng, now)
    graph.likes = _likes(spec, graph, rng)
    graph.last_read_days = _last_reads(spec, rng)
    return graph


def _last_reads(spec: GraphSpec, rng: np.random.Generator) -> np.ndarray:
    """Days since each user's last read (module docstring: the activity distribution)."""
    active = np.minimum(rng.geometric(0.6, spec.users) - 1, 13)
    dormant = rng.integers(15, 121, spec.users)
    return np.where(rng.random(spec.users) < spec.inactive_share, dormant, active).astype(np.int64)


def _likes(spec: GraphSpec, graph: Graph, rng: np.random.Generator) -> list[tuple[int, int]]:
    """Likes skewed towards a few posts (Zipf over a random order of posts)."""
    if not graph.posts:
        return []
    n = int(len(graph.posts) * spec.likes_per_post)
    post_ids = np.array([p[0] for p in graph.posts], dtype=np.int64)
    weights = 1.0 / np.arange(1, len(post_ids) + 1) ** 1.2
    weights /= weights.sum()
    liked = rng.choice(rng.permutation(post_ids), size=n, p=weights)
    users = rng.choice(graph.user_ids, size=n)
    pairs = np.unique(np.stack([liked, users], axis=1), axis=0)
    return [(int(p), int(u)) for p, u in pairs]


def _history(spec: GraphSpec, graph: Graph, rng: np.random.Generator,
             now: datetime) -> list[tuple[int, int, datetime, str]]:
    counts = graph.follower_counts()
    authors = np.array(sorted(counts, key=counts.__getitem__, reverse=True)[: max(50, spec.users // 20)])
    author_weights = np.array([counts[a] for a in authors], dtype=float) ** 0.5
    author_weights /= author_weights.sum()
    chosen = rng.choice(authors, size=spec.history_posts, p=author_weights)
    offsets_ms = np.sort(rng.integers(60_000, spec.history_days * 86_400_000, spec.history_posts))[::-1]
    posts = []
    for seq, (author, offset) in enumerate(zip(chosen.tolist(), offsets_ms.tolist())):
        created = now - timedelta(milliseconds=offset)
        unix_ms = int(created.timestamp() * 1000)
        # A real Snowflake id for that instant: node 1023 is reserved for bulk loads.
        post_id = ids.lowest_id_at(unix_ms) | (ids.MAX_NODE << ids.NODE_SHIFT) | (seq & ids.MAX_SEQUENCE)
        posts.append((post_id, author, created, f"post {seq} by {author}"))
    return posts


def _copy(conn: psycopg.Connection, sql: str, rows: Iterable[tuple[str, ...]]) -> None:
    buf = io.StringIO()
    for row in rows:
        buf.write("\t".join(row) + "\n")
    buf.seek(0)
    with conn.cursor().copy(sql) as copy:
        while chunk := buf.read(1 << 20):
            copy.write(chunk)


def load_graph(conn: psycopg.Connection, graph: Graph, now: datetime | None = None) -> dict[str, int]:
    """COPY users (with their names) and follows in one transaction."""
    now = now or datetime.now(timezone.utc)
    since = (now - timedelta(days=FOLLOW_SINCE_DAYS)).isoformat()
    with conn.transaction():
        _copy(conn, "COPY users (user_id, handle, display_name) FROM STDIN",
              ((str(u), *user_names(u)) for u in graph.user_ids.tolist()))
        _copy(conn, "COPY follows (follower_id, followed_id, following_since) FROM STDIN",
              ((str(a), str(b), since) for a, b in zip(graph.follower.tolist(), graph.followed.tolist())))
    return {"users": len(graph.user_ids), "follows": len(graph.follower)}


def load_history(conn: psycopg.Connection, graph: Graph) -> dict[str, int]:
    """COPY the post history and its likes in one transaction (after ``load_graph``)."""
    with conn.transaction():
        _copy(conn, "COPY posts (post_id, author_id, created_at, text) FROM STDIN",
              ((str(p), str(a), c.isoformat(), t) for p, a, c, t in graph.posts))
        _copy(conn, "COPY likes (post_id, user_id) FROM STDIN",
              ((str(p), str(u)) for p, u in graph.likes))
    return {"posts": len(graph.posts), "likes": len(graph.likes)}


def load_postgres(conn: psycopg.Connection, graph: Graph, now: datetime | None = None) -> dict[str, int]:
    """Graph then history, each in its own transaction."""
    return {**load_graph(conn, graph, now), **load_history(conn, graph)}


def publish_feature_events(settings: Settings, graph: Graph, count: int) -> int:
    """Ranking-feature events (what a content-quality model would emit) for the newest
    ``count`` history posts, on the ranker's features topic; returns how many."""
    import json

    from services.shared.clients import kafka
    from services.shared.contracts.topics import rank_features_topic

    producer = kafka.producer(settings, {"enable.idempotence": True, "linger.ms": 20})
    topic = rank_features_topic(settings.topic_prefix)
    now = datetime.now(timezone.utc).isoformat()
    rng = np.random.default_rng(7)
    newest = sorted(graph.posts, key=lambda p: p[0], reverse=True)[:count]
    for (post_id, _author, _created, _text), quality in zip(newest, rng.uniform(0.1, 1.0, len(newest))):
        value = {"post_id": str(post_id), "features": {"quality": round(float(quality), 3)},
                 "event_time": now}
        producer.produce(topic, key=str(post_id).encode(), value=json.dumps(value).encode())
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("feature events were not all delivered within 60 s")
    return len(newest)
