"""Closed-loop HTTP load: N concurrent clients, each sending its next request as soon as
the previous one answers, for a fixed time or count. Latencies are per request, measured
at the client (so they include the client's own scheduling on a busy 2-core machine —
which is why the report compares ratios to baselines measured the same way)."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx

Request = Callable[[httpx.AsyncClient, int], Awaitable[httpx.Response]]


@dataclass
class LoadResult:
    concurrency: int
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    wall_s: float = 0.0

    @property
    def rate(self) -> float:
        return len(self.latencies_s) / self.wall_s if self.wall_s else 0.0

    def quantile(self, q: float) -> float:
        data = sorted(self.latencies_s)
        if not data:
            return float("nan")
        return data[min(len(data) - 1, int(q * len(data)))]

    def summary(self) -> dict[str, float]:
        return {"concurrency": self.concurrency, "requests": len(self.latencies_s),
                "errors": self.errors, "per_s": round(self.rate, 1),
                "p50_ms": round(self.quantile(0.50) * 1000, 2),
                "p95_ms": round(self.quantile(0.95) * 1000, 2),
                "p99_ms": round(self.quantile(0.99) * 1000, 2)}


async def run_load(base_url: str, request: Request, *, concurrency: int, seconds: float,
                   max_requests: int | None = None, ok: Callable[[httpx.Response], bool] | None = None
                   ) -> LoadResult:
    """Run ``request(client, worker_index)`` from ``concurrency`` workers until time or
    count runs out. ``ok`` decides what counts as an error (default: status < 400)."""
    ok = ok or (lambda r: r.status_code < 400)
    result = LoadResult(concurrency)
    deadline = time.perf_counter() + seconds
    remaining = [max_requests if max_requests is not None else 1 << 62]
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def worker(index: int, client: httpx.AsyncClient) -> None:
        while time.perf_counter() < deadline and remaining[0] > 0:
            remaining[0] -= 1
            start = time.perf_counter()
            try:
                resp = await request(client, index)
                good = ok(resp)
            except httpx.HTTPError:
                good = False
            if good:
                result.latencies_s.append(time.perf_counter() - start)
            else:
                result.errors += 1

    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30) as client:
        start = time.perf_counter()
        await asyncio.gather(*(worker(i, client) for i in range(concurrency)))
        result.wall_s = time.perf_counter() - start
    return result
