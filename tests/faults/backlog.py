"""The ``backlog`` scenario's parts (docs/reliability.md): a demo-sized backlog loaded through
Postgres, as ``make run``'s demo does but with users of its own, and the pipeline's
goodput sampled every 5 s: events whose last step is done, from the workers' own
per-message counters (``bench/run/drain.py``: a follow or a like once its count is written),
not from committed offsets, which move a batch of up to 1,000 at a time.

A pipeline that slows to the cluster's capacity keeps applying events at a steady rate
while a backlog drains; one that collapses (timeouts turned into retries turned into
more load) applies almost nothing for minutes. ``goodput_summary`` reports the rate of
every 5 s window while a backlog remained, and the longest stretch below 30 % of the
run's peak outside the fault itself.
"""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from bench.run.drain import LAST_STEPS, handled
from deploy.workload import Graph, GraphSpec, generate, load_postgres
from deploy.pipeline_progress import PipelineOffsets
from services.shared.settings import Settings
from services.shared.clients import pg

GOODPUT_EVERY_S = 5.0
# A window counts as "draining" while at least this many events wait (the workload's own
# trickle is a few hundred at most).
DRAINING_LAG = 2_000
# Issue 37's line: goodput never below this share of the run's peak for longer than
# COLLAPSE_LIMIT_S while a backlog remains, outside the fault itself.
COLLAPSE_SHARE = 0.3
COLLAPSE_LIMIT_S = 30.0


@dataclass(frozen=True)
class Backlog:
    authors: list[int]          # every user of the backlog's graph
    posts: list[int]
    counts: dict[str, int]


def load_backlog(settings: Settings) -> Backlog:
    """The demo's graph (2,000 users, ~15k follows, 2,000 posts, ~5k likes) with user ids
    of its own, COPYed into Postgres in two transactions (the demo's loader)."""
    graph = generate(GraphSpec.demo())
    shift = random.SystemRandom().randrange(10**12, 9 * 10**12)
    moved: Graph = replace(
        graph, user_ids=graph.user_ids + shift, celebrity_ids=graph.celebrity_ids + shift,
        follower=graph.follower + shift, followed=graph.followed + shift,
        posts=[(p, a + shift, at, text) for p, a, at, text in graph.posts],
        likes=[(p, u + shift) for p, u in graph.likes])
    with pg.connect(settings) as conn:
        counts = load_postgres(conn, moved)
    return Backlog([int(u) for u in np.asarray(moved.user_ids).tolist()],
                   [p for p, *_ in moved.posts], counts)


class GoodputWatch:
    """Events applied and waiting, every ``GOODPUT_EVERY_S``, in a daemon thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.samples: list[tuple[float, int | None, int | None]] = []  # (at, applied, lag)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=20)

    def _run(self) -> None:
        offsets = PipelineOffsets(self.settings, timeout_s=4.0)
        try:
            while not self._stop.is_set():
                done = handled(self.settings)
                applied = round(sum(n for t, n in done.items() if t in LAST_STEPS))
                try:
                    lag: int | None = offsets.read().lag
                except Exception:  # noqa: BLE001 - a broker down: unknown, not zero
                    lag = None
                self.samples.append((time.time(), applied, lag))
                self._stop.wait(GOODPUT_EVERY_S)
        finally:
            offsets.close()


def goodput_summary(samples: list[tuple[float, int | None, int | None]], started: float,
                    fault_at: float, lifted_at: float) -> dict[str, Any]:
    """Events applied per second in each window (seconds since ``started``), the peak,
    and the longest stretch while draining below ``COLLAPSE_SHARE`` of it, outside the
    fault; ``collapsed`` when that stretch passes ``COLLAPSE_LIMIT_S``."""
    known = [(at, applied, lag) for at, applied, lag in samples if applied is not None]
    windows: list[tuple[float, float, int]] = []   # (at, events/s, lag at its end)
    for (a0, n0, _l0), (a1, n1, l1) in zip(known, known[1:]):
        if a1 > a0 and n0 is not None and n1 is not None and l1 is not None:
            windows.append((a1, max(0, n1 - n0) / (a1 - a0), l1))
    peak = max((rate for _, rate, _ in windows), default=0.0)
    longest = run = 0.0
    last_at: float | None = None
    for at, rate, lag in windows:
        in_fault = fault_at <= at <= lifted_at + GOODPUT_EVERY_S
        low = lag >= DRAINING_LAG and rate < COLLAPSE_SHARE * peak and not in_fault
        run = run + (at - last_at if last_at is not None else GOODPUT_EVERY_S) if low else 0.0
        longest = max(longest, run)
        last_at = at
    return {"every_s": GOODPUT_EVERY_S, "peak_per_s": round(peak, 1),
            "longest_below_30pct_while_draining_s": round(longest, 1),
            "collapsed": longest > COLLAPSE_LIMIT_S,
            "windows": [(round(at - started, 1), round(rate, 1), lag) for at, rate, lag in windows]}
