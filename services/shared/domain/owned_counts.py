"""Counts with one writer each, ordered by the owner's topic offsets instead of Paxos. Pure.

A count's batch is written ``USING TIMESTAMP write_time(generation, offset)`` of the last
change it applies, so no crash, replay or stale owner moves a count from the truth: why,
in docs/fanout.md, "Counts" (tests/unit/test_owned_counts.py plays it against a model).
"""
from __future__ import annotations

# Layout of an owned write time: 2^62 + (generation << OFFSET_BITS) + offset + 1.
BASE = 1 << 62
OFFSET_BITS = 44          # 1.7e13 offsets per partition: 55 years at 10,000 a second
MAX_GENERATION = (1 << (62 - OFFSET_BITS)) - 1


def write_time(generation: int, offset: int) -> int:
    """The write time of a batch whose last change is at ``offset`` of its partition."""
    if not 0 <= generation <= MAX_GENERATION or not 0 <= offset < (1 << OFFSET_BITS) - 1:
        raise ValueError(f"generation {generation} or offset {offset} out of range")
    return BASE + (generation << OFFSET_BITS) + offset + 1
