"""aiokafka clients that stop asking a broker which just failed to answer.

aiokafka (0.14) sends each metadata refresh to the brokers in a random order and each
coordinator lookup to a random broker, whatever happened a moment ago. A broker cut off
the network answers nothing: every request to it waits its whole timeout (the workers'
group consumers 6 s), and after the next failure the next random pick may be the same
broker again. Measured on the fault suite's broker-cut (docs/reliability.md, fourteenth
session): the fan-out's consumer tried the cut broker four times in 20 s (connects that
time out, a coordinator lookup, a produce on stale metadata) and applied nothing for
26 s, though the broker was fenced and its partitions led elsewhere after 5 s.

``install()`` makes every aiokafka client in the process remember, for ``SUSPECT_S``,
the brokers it failed to connect to or whose connection broke or timed out, and:

* try them last: a metadata refresh asks the others first, a coordinator lookup asks
  one of the others (when every broker is suspect, all are tried as before);
* refresh its metadata every ``REFRESH_EVERY_S`` while a suspect broker is still listed,
  so that the controller's fencing (its partitions get new leaders) is seen at once;
* close its connections to a suspect broker that the metadata no longer lists, so that
  requests in flight there fail now and go to the new leaders, instead of each waiting
  out its timeout first.

A broker that answers a new connection is trusted again at once. Requests that must go
to one broker (a partition's leader, the group's coordinator) still go there until the
metadata says otherwise.

The hook is the ``random`` that aiokafka.client uses for exactly those two choices
(``get_random_node`` and ``_metadata_update``), plus wrappers of ``_get_conn`` and
``_on_connection_closed``; ``install`` checks that the pinned version still has them.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any, Callable, Sequence, TypeVar

import aiokafka.client as aioclient
from aiokafka.client import ConnectionGroup
from aiokafka.conn import CloseReason

log = logging.getLogger(__name__)
T = TypeVar("T")

# How long a broker that failed stays at the back of the line. A cut or dead broker is
# fenced after broker.session.timeout.ms (5 s) and its partitions move; by then clients
# have learned the new layout from the others. Failures while it stays dark renew it.
SUSPECT_S = 10.0
# While a suspect broker is still in a client's metadata, the metadata is refreshed this
# often (from the other brokers): the controller fences it after 5 s, and a refresh sees
# that its partitions moved.
REFRESH_EVERY_S = 1.0


class SuspectBrokers:
    """Node ids that failed recently (process-wide: the process talks to one cluster)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, hold_s: float = SUSPECT_S) -> None:
        self._clock = clock
        self.hold_s = hold_s
        self._until: dict[Any, float] = {}

    def failed(self, node_id: Any) -> None:
        if node_id is None or node_id == "bootstrap":
            return
        if node_id not in self._until or self._until[node_id] < self._clock():
            log.warning("kafka broker %s did not answer: asked last for %.0f s", node_id, self.hold_s)
        self._until[node_id] = self._clock() + self.hold_s

    def answered(self, node_id: Any) -> None:
        self._until.pop(node_id, None)

    def suspect(self, node_id: Any) -> bool:
        until = self._until.get(node_id)
        if until is None:
            return False
        if until < self._clock():
            del self._until[node_id]
            return False
        return True

    def order(self, nodes: list[T]) -> None:
        """Shuffle ``nodes`` in place, the ones that answered first (stable split)."""
        random.shuffle(nodes)
        nodes.sort(key=self.suspect)

    def choose(self, nodes: Sequence[T]) -> T:
        healthy = [n for n in nodes if not self.suspect(n)]
        return random.choice(healthy or list(nodes))


SUSPECTS = SuspectBrokers()


class _Random:
    """What aiokafka.client sees as ``random``: its two choices, suspects last."""

    def shuffle(self, nodes: list[Any]) -> None:
        SUSPECTS.order(nodes)

    def choice(self, nodes: Sequence[Any]) -> Any:
        return SUSPECTS.choose(nodes)

    def __getattr__(self, name: str) -> Any:  # anything else: the real module
        return getattr(random, name)


def _node_of(client: Any, conn: Any) -> Any:
    for broker in client.cluster.brokers():
        if broker.host == conn.host and broker.port == conn.port:
            return broker.nodeId
    return None


def _drop_fenced(client: Any) -> None:
    """Close the client's connections to a suspect broker that the cluster no longer
    lists, or that leads none of the partitions the client knows (fenced: its partitions
    have new leaders): requests in flight to it fail now instead of at their timeout,
    and are sent again to the new leaders (a coordinator there is looked up again)."""
    cluster = client.cluster
    listed = {b.nodeId for b in cluster.brokers()}
    if not listed:
        return
    for (node_id, _group), conn in list(client._conns.items()):
        if not isinstance(node_id, int) or not SUSPECTS.suspect(node_id):
            continue
        if node_id not in listed or not cluster.partitions_for_broker(node_id):
            log.warning("kafka broker %s leads nothing in the metadata: its connection closed", node_id)
            conn.close(reason=CloseReason.CONNECTION_BROKEN)


def _watch(client: Any) -> None:
    """Refresh ``client``'s metadata every ``REFRESH_EVERY_S`` while a suspect broker is
    still listed in it (for at most the hold): the fencing that moves its partitions is
    seen within a second, not at the next request timeout."""
    task = getattr(client, "_feed_failover_watch", None)
    if task is not None and not task.done():
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    client._feed_failover_watch = loop.create_task(_refresh_while_suspect(client))


async def _refresh_while_suspect(client: Any) -> None:
    deadline = time.monotonic() + SUSPECTS.hold_s
    while time.monotonic() < deadline:
        await asyncio.sleep(REFRESH_EVERY_S)
        if client._sync_task is None:  # closed
            return
        if not any(SUSPECTS.suspect(b.nodeId) for b in client.cluster.brokers()):
            return
        try:
            await client.force_metadata_update()
        except Exception:  # noqa: BLE001 - the client's own refresh logs and retries
            return


_installed = False


def install(hold_s: float = SUSPECT_S) -> None:
    """Patch aiokafka's client once per process (idempotent); ``hold_s`` 0: do nothing."""
    global _installed
    if _installed or hold_s <= 0:
        return
    SUSPECTS.hold_s = hold_s
    client_cls = aioclient.AIOKafkaClient
    for name in ("_get_conn", "_on_connection_closed", "get_random_node", "_metadata_update"):
        if not hasattr(client_cls, name):
            raise RuntimeError(f"aiokafka.client.AIOKafkaClient has no {name}: "
                               "services/shared/worker/kafka_failover.py needs updating")
    if getattr(aioclient, "random", None) is not random:
        raise RuntimeError("aiokafka.client no longer uses the random module for node "
                           "choices: services/shared/worker/kafka_failover.py needs updating")
    get_conn = client_cls._get_conn
    on_closed = client_cls._on_connection_closed

    async def _get_conn(self: Any, node_id: Any, *args: Any, **kwargs: Any) -> Any:
        before = self._conns.get((node_id, kwargs.get("group", ConnectionGroup.DEFAULT)))
        known = before is not None and before.connected()
        conn = await get_conn(self, node_id, *args, **kwargs)
        if conn is None:
            SUSPECTS.failed(node_id)
            _watch(self)
        elif not known:
            SUSPECTS.answered(node_id)  # a new connection was made: it answers
        return conn

    def _on_connection_closed(self: Any, conn: Any, reason: Any) -> None:
        if reason in (CloseReason.CONNECTION_BROKEN, CloseReason.CONNECTION_TIMEOUT):
            SUSPECTS.failed(_node_of(self, conn))
            _watch(self)
        on_closed(self, conn, reason)

    metadata_update = client_cls._metadata_update

    async def _metadata_update(self: Any, cluster_metadata: Any, topics: Any) -> Any:
        updated = await metadata_update(self, cluster_metadata, topics)
        if updated and cluster_metadata is self.cluster:
            _drop_fenced(self)
        return updated

    client_cls._get_conn = _get_conn
    client_cls._on_connection_closed = _on_connection_closed
    client_cls._metadata_update = _metadata_update
    aioclient.random = _Random()
    _installed = True
