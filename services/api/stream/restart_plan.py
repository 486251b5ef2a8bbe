"""Where the stream consumer resumes after a restart: replay the gap, or resync. Pure.

The consumer remembers, per partition, the offset after the last event it handed to the
hub. A restarted consumer replays from there when the whole gap is still in the log and
short enough to replay at once; connected streams then miss nothing, and no client has
to refetch. Otherwise it starts at the end of the log and every connected stream is told
to ``resync``: a gap the consumer cannot replay is never silent.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Partition = TypeVar("Partition", bound=Hashable)


@dataclass(frozen=True)
class RestartPlan(Generic[Partition]):
    """``seek_to``: replay each partition from there (``gap`` events in all); ``resync``:
    start at the end instead and tell every connected stream; ``reason``: for the log."""

    seek_to: dict[Partition, int] = field(default_factory=dict)
    gap: int = 0
    resync: bool = False
    reason: str = ""


def plan_restart(consumed: Mapping[Partition, int], earliest: Mapping[Partition, int],
                 latest: Mapping[Partition, int], max_replay: int) -> RestartPlan[Partition]:
    """Decide the restart of a consumer now assigned the partitions of ``latest``.

    ``consumed``: the offset after the last event handed to the hub, per partition (empty
    on the first start: nothing was consumed, so nothing can have been missed);
    ``earliest`` / ``latest``: the log's first offset and end offset per partition now.
    """
    if not consumed:
        return RestartPlan(reason="first start")
    seek_to: dict[Partition, int] = {}
    for partition, end in latest.items():
        offset = consumed.get(partition)
        if offset is None:
            return RestartPlan(resync=True, reason=f"partition {partition} is new")
        if offset < earliest.get(partition, 0):
            return RestartPlan(resync=True, reason=f"{partition}: the log no longer holds "
                                                   f"offset {offset} (retention)")
        if offset > end:
            return RestartPlan(resync=True, reason=f"{partition}: offset {offset} is past the "
                                                   f"end {end} (log truncated or recreated)")
        seek_to[partition] = offset
    gap = sum(latest[p] - offset for p, offset in seek_to.items())
    if gap > max_replay:
        return RestartPlan(resync=True, reason=f"{gap} events missed, more than {max_replay}")
    return RestartPlan(seek_to=seek_to, gap=gap, reason=f"replaying {gap} events")
