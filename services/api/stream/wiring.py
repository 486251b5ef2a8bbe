"""Opening the stream's parts in the app's lifespan, on the read path's store.

``open_stream(app)`` (after ``feed.wiring.open_read_path``) puts into ``app.state`` the
``stream_metrics``, the ``stream_leases`` (the per-user cap), the ``stream_gate``
(eligibility of each event) and the ``stream_hub`` (open streams and their resume
buffers), and registers the ``feed_stream`` readiness check: the hub's Kafka consumer
(``consumer.py``, one of the app's background tasks) has pinned its start offsets.
"""
from __future__ import annotations

import asyncio

from fastapi import FastAPI

from services.shared.settings import ApiProcess

from ..visibility.commit_wait import stream_bound

from .gate import EligibilityGate
from .hub import StreamHub
from .leases import StreamLeases
from .metrics import StreamMetrics


async def open_stream(app: FastAPI) -> None:
    settings: ApiProcess = app.state.settings
    store = app.state.feed_store
    metrics = StreamMetrics(app.state.metrics.registry, skipped=app.state.feed_metrics.skipped)
    app.state.stream_metrics = metrics
    # A lease outlives two missed heartbeats, so one slow refresh does not free the slot.
    app.state.stream_leases = await asyncio.to_thread(
        StreamLeases, app.state.cassandra, store, int(settings.stream_heartbeat_s * 2) + 5,
        on_unchecked=metrics.stream_cap_unchecked.inc)
    gate = EligibilityGate(store, app.state.visibility_fence,
                           fresh_s=stream_bound(settings.visibility_commit_wait_s),
                           accounts=getattr(app.state, "account_copies", None))

    async def followed(reader_id: int) -> frozenset[int]:
        return frozenset(await store.following(reader_id, settings.max_following))

    hub = StreamHub(gate, followed, settings.stream_resume_buffer, settings.stream_resume_window_s)
    app.state.stream_gate = gate
    app.state.stream_hub = hub
    cache = getattr(app.state, "serving_cache", None)
    if cache is not None:  # follows changed: the hub's author index re-reads them
        cache.graph_listeners.append(hub.follows_changed)

    async def stream_ready() -> None:
        if not hub.ready.is_set():
            raise RuntimeError("stream consumer has not pinned its offsets yet")

    app.state.readiness.register("feed_stream", stream_ready)
