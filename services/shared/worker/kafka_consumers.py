"""The API's aiokafka consumers (no group: the stream's and the serving cache's notices):
waiting for their partitions, and backing off before a restart after a failure."""
from __future__ import annotations

import asyncio
import random

from aiokafka import AIOKafkaConsumer, TopicPartition

# Restart backoff after a consumer failure: 0.5 s doubling to 10 s, with jitter so the
# API processes do not reconnect in step after a broker restart.
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 10.0
# Metadata for two topics arrives in one round trip; 15 s covers a broker that is still
# electing leaders after a restart.
ASSIGNMENT_DEADLINE_S = 15.0
ASSIGNMENT_POLL_S = 0.05


def restart_delay(failures: int) -> float:
    """Seconds before restarting a consumer after its ``failures``-th failure in a row."""
    delay: float = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (failures - 1)) * random.uniform(0.5, 1.0)
    return delay


async def wait_for_assignment(consumer: AIOKafkaConsumer,
                              topics: list[str]) -> list[TopicPartition]:
    """Every partition of ``topics``, once aiokafka has assigned them.

    Without a group, aiokafka assigns every partition of the subscribed topics itself
    once it has their metadata.
    """
    deadline = asyncio.get_running_loop().time() + ASSIGNMENT_DEADLINE_S
    while {tp.topic for tp in consumer.assignment()} != set(topics):
        if asyncio.get_running_loop().time() > deadline:
            raise RuntimeError(f"no partitions assigned for {topics} (run the migrations)")
        await asyncio.sleep(ASSIGNMENT_POLL_S)
    return sorted(consumer.assignment())
