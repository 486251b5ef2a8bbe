"""Topic partition counts come from the migrator's settings, and each topic says whether
it may gain partitions in place."""
from __future__ import annotations

import pytest

from services.shared.contracts.topics import SIZED, Growth, all_topics, dlq_topic
from services.shared.settings import MigrateProcess, SettingsError, forget_loaded, load
from services.shared.settings.services import partition_counts


def by_name(prefix: str, **kw: object) -> dict[str, object]:
    return {t.name: t for t in all_topics(prefix, **kw)}  # type: ignore[arg-type]


def test_defaults_size_every_keyed_topic_alike() -> None:
    topics = all_topics("p")
    keyed = [t for t in topics if t.short]
    assert {t.short for t in keyed} == set(SIZED)
    assert {t.partitions for t in keyed} == {3}
    # Fixed: the heartbeat and the dead letters, read by people and the relay alone.
    assert {t.partitions for t in topics if not t.short} == {1}


def test_named_counts_win_over_the_default() -> None:
    topics = {t.name: t for t in all_topics("p", {"posts": 12, "author-events": 8}, default=6)}
    assert topics["p.public.posts"].partitions == 12
    assert topics["p.author-events"].partitions == 8
    assert topics["p.public.follows"].partitions == 6
    assert topics[dlq_topic("p.public.posts")].partitions == 1


def test_an_unknown_topic_name_is_refused() -> None:
    with pytest.raises(ValueError, match="no topic is named postz"):
        all_topics("p", {"postz": 4})


def test_growth_follows_what_a_moved_key_breaks() -> None:
    topics = {t.short: t.growth for t in all_topics("p") if t.short}
    assert topics["follow-counts"] is topics["like-counts"] is Growth.NEVER
    assert all(topics[t] is Growth.DRAINED for t in ("posts", "follows", "blocks", "likes",
                                                      "rank-key-moves"))
    assert topics["serving-changes"] is topics["author-events"] is Growth.IN_PLACE


def test_partition_counts_parse_and_refuse() -> None:
    assert partition_counts(" posts=12, follows=6 ,") == {"posts": 12, "follows": 6}
    for bad in ("posts", "posts=0", "posts=x", "=3"):
        with pytest.raises(ValueError):
            partition_counts(bad)


def test_a_bad_count_stops_the_migrator_naming_the_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    forget_loaded()
    monkeypatch.setenv("FEED_KAFKA_TOPIC_PARTITIONS", "posts=many")
    try:
        with pytest.raises(SettingsError, match="FEED_KAFKA_TOPIC_PARTITIONS"):
            load(MigrateProcess)
    finally:
        forget_loaded()
