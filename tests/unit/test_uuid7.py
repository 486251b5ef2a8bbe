import uuid

from bench.write.ids import uuid7


def test_uuid7_has_version_variant_and_its_timestamp() -> None:
    u = uuid7(1_795_000_000_123)
    assert u.version == 7
    assert u.variant == uuid.RFC_4122
    assert u.int >> 80 == 1_795_000_000_123


def test_uuid7_sorts_by_time() -> None:
    assert uuid7(1000) < uuid7(1001) < uuid7(2000)
