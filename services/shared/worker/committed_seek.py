"""The seek to the committed offsets also seeks the partitions nobody has committed yet.

faust drops fetched messages whenever the flow stops for a rebalance, and counts on a
seek to the committed offsets (``Consumer.perform_seek``) to fetch them again:

- a rebalance clears the stream queues (``stream_wait_empty`` is off), and a delivery
  under way loses its race against the suspended flow; every assignment then seeks;
- a fetch that returns while the flow is stopped (``Consumer.getmany``: records asked for
  before a rebalance and fetched, from the new positions, after it) is dropped whole,
  up to ``kafka_max_poll_records`` messages, and that branch seeks at once.

aiokafka's ``seek_to_committed`` seeks only partitions whose committed offset is above 0:
a partition with none keeps its fetch position, past the dropped messages. faust's
commit then has no committed offset to check its acked ones against (``_new_offset``),
and its next commit passes the dropped messages for good. A worker group that rebalances
while it drains a topic it has never committed (workers joining one after another over a
backlog of follows) lost 1,600 inbox rows in the worker-group test
(tests/integration/test_worker_group.py), in one run of about twenty: by the count, 200
follows of 8 posts each, one fetch.

``CommittedSeekConsumer.seek_to_committed`` therefore seeks those partitions to their
start (the app's ``consumer_auto_offset_reset``, ``earliest`` for every worker), on the
consumer's thread in the same call: the dropped messages are fetched again, and what was
already applied is applied again, which every handler may do (at-least-once, idempotent
effects). A partition unassigned meanwhile is left: the rebalance under way seeks again.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from aiokafka.errors import IllegalStateError, KafkaError
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from prometheus_client import Counter

log = logging.getLogger(__name__)

UNCOMMITTED_SEEKS = Counter(
    "feed_worker_uncommitted_partition_seeks",
    "Partitions with no committed offset sought to their start by a seek to the committed "
    "offsets (what a rebalance dropped of them is fetched again)")


async def _seek_to_committed_or_start(consumer: Any) -> Mapping[TP, int]:
    """On the consumer's thread: aiokafka's seek to the committed offsets, then the
    partitions it left (no committed offset, or 0) to their first offsets.

    The first offsets are asked for, then sought (``seek`` sets the position at once).
    ``seek_to_beginning`` would instead clear the position until the broker answers,
    and faust's livelock check, which reads every position, crashed the consumer when
    it ran in that window (``assert self._position is not None``, in 2 of 8 worker-group
    runs)."""
    committed: Mapping[TP, int] = await consumer.seek_to_committed()
    uncommitted = [tp for tp, offset in committed.items() if not offset]
    if uncommitted:
        try:
            starts = await consumer.beginning_offsets(uncommitted)
            for tp, offset in starts.items():
                consumer.seek(tp, offset)
        except IllegalStateError as exc:  # unassigned meanwhile: the next assignment seeks
            log.info("partitions unassigned while sought to their start: %s", exc)
            return committed
        except KafkaError as exc:  # the broker did not answer: aiokafka's seek stands
            log.warning("first offsets of %d uncommitted partitions not read (%r): they keep "
                        "their fetch positions", len(uncommitted), exc)
            return committed
        UNCOMMITTED_SEEKS.inc(len(uncommitted))
        log.info("%d partitions with no committed offset sought to their start", len(uncommitted))
    return committed


class CommittedSeekConsumer(faust_aiokafka.Consumer):
    """faust's aiokafka consumer whose seek to the committed offsets also seeks the
    partitions that have none (module docstring)."""

    async def seek_to_committed(self) -> Mapping[TP, int]:
        if self.app.conf.consumer_auto_offset_reset != "earliest":
            return await super().seek_to_committed()
        thread = self._thread
        result: Mapping[TP, int] = await thread.call_thread(
            _seek_to_committed_or_start, thread._ensure_consumer())
        return result
