"""The migrator against the real broker: topics created at the configured sizes; on a
second run with larger sizes, the topics whose records stand alone grow in place and the
others are left as they are, each reported with why."""
from __future__ import annotations

import pytest

from deploy.migrate import migrate_kafka
from services.shared.clients import kafka
from services.shared.contracts.topics import Growth, all_topics
from services.shared.settings import Settings
from tests.support.waiting import wait_until


def partitions(s: Settings, prefix: str, expected: dict[str, int] | None = None) -> dict[str, int]:
    """The topics' partition counts, once the broker's metadata shows ``expected`` (a
    topic just created or grown can take a moment to appear in it)."""
    admin = kafka.admin(s)
    seen: dict[str, int] = {}

    def read() -> bool:
        seen.clear()
        topics = admin.list_topics(timeout=15).topics
        seen.update({name: len(t.partitions) for name, t in topics.items()
                     if name.startswith(prefix) or name.endswith(prefix)})
        return all(seen.get(name) == n for name, n in (expected or {}).items())
    wait_until(read, timeout=30, interval=0.2)
    return dict(seen)


def test_topics_are_created_sized_and_grown_only_where_order_allows(
        settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = f"{settings.topic_prefix}_grow"
    small = settings.model_copy(update={"kafka_partitions": 1,
                                        "kafka_topic_partitions": "posts=2"})
    created = migrate_kafka(small, prefix)
    assert len(created) == len(all_topics(prefix))
    have = partitions(settings, prefix, {t.name: t.partitions for t in all_topics(
        prefix, {"posts": 2}, default=1)})
    assert have[f"{prefix}.public.posts"] == 2
    assert have[f"{prefix}.public.follows"] == 1
    assert have[f"{prefix}.serving-changes"] == 1

    capsys.readouterr()
    bigger = settings.model_copy(update={"kafka_partitions": 2,
                                         "kafka_topic_partitions": "posts=2"})
    grown = migrate_kafka(bigger, prefix)
    err = capsys.readouterr().err
    have = partitions(settings, prefix, {
        t.name: 2 for t in all_topics(prefix) if t.short and t.growth is Growth.IN_PLACE})
    for spec in all_topics(prefix, {"posts": 2}, default=2):
        if not spec.short or spec.name.endswith(".public.posts"):
            continue  # fixed sizes, or already at its count
        if spec.growth is Growth.IN_PLACE:
            assert have[spec.name] == 2, spec.name
            assert f"{spec.name} (1 -> 2 partitions)" in grown
        else:
            assert have[spec.name] == 1, spec.name
            assert f"{spec.name} has 1 partitions, declared 2: not grown" in err
    assert "recreate the topic and rebuild the counts" in err      # the count topics
    assert "wait for the consumers' lag to reach zero" in err       # the ordered ones
    # A third run has nothing left that it may do.
    assert migrate_kafka(bigger, prefix) == []
