import re
from datetime import datetime, timezone

import numpy as np

from deploy.workload import FIRST_USER_ID, GraphSpec, generate, user_names
from services.api.http.models import HANDLE_PATTERN
from services.shared.domain import ids

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
SPEC = GraphSpec(users=3_000, celebrities=2, history_posts=500)


def test_graph_is_deterministic_for_a_seed() -> None:
    a, b = generate(SPEC, NOW), generate(SPEC, NOW)
    assert np.array_equal(a.follower, b.follower) and np.array_equal(a.followed, b.followed)
    assert a.posts == b.posts


def test_edges_are_unique_and_never_self_follows() -> None:
    g = generate(SPEC, NOW)
    assert not np.any(g.follower == g.followed)
    assert len({(int(x), int(y)) for x, y in zip(g.follower, g.followed)}) == len(g.follower)


def test_celebrities_reach_most_users_and_in_degree_is_heavy_tailed() -> None:
    g = generate(SPEC, NOW)
    counts = g.follower_counts()
    for celeb in g.celebrity_ids.tolist():
        assert counts[celeb] >= 0.8 * SPEC.users
    ordinary = sorted((n for a, n in counts.items() if a not in set(g.celebrity_ids.tolist())),
                      reverse=True)
    assert ordinary[0] > 20 * ordinary[len(ordinary) // 2]  # a long tail, not uniform


def test_history_posts_have_snowflake_ids_of_their_own_time() -> None:
    g = generate(SPEC, NOW)
    for post_id, _author, created, _text in g.posts:
        assert abs(ids.timestamp_ms(post_id) - int(created.timestamp() * 1000)) <= 1
    assert len({p[0] for p in g.posts}) == len(g.posts)


def test_a_share_of_users_has_not_read_for_longer_than_the_inactive_window() -> None:
    g = generate(GraphSpec(users=20_000, celebrities=2, history_posts=10, inactive_share=0.3))
    days = g.last_read_days
    assert len(days) == len(g.user_ids)
    dormant = days > 14
    assert 0.28 < dormant.mean() < 0.32
    assert days[dormant].min() >= 15 and days[~dormant].max() <= 13
    assert (days[~dormant] <= 1).mean() > 0.8  # most active users read today or yesterday


def test_every_generated_user_has_a_handle_and_display_name_the_api_accepts() -> None:
    users = range(FIRST_USER_ID, FIRST_USER_ID + GraphSpec().users)  # the largest graph
    names = [user_names(u) for u in users]
    assert all(re.fullmatch(HANDLE_PATTERN, handle) for handle, _ in names)
    assert all(1 <= len(display) <= 64 and display.isprintable() for _, display in names)
    # Unique whatever the case, as the users table's index on lower(handle) requires.
    assert len({handle.lower() for handle, _ in names}) == len(names)
    assert user_names(1_042) == user_names(1_042)
    assert len({display for _, display in names}) > 100  # not one name for everybody
