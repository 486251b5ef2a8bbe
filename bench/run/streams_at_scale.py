"""Streams at scale: N readers who follow one author open their SSE streams at
once; the author posts; how many opens were refused, and how fast the post reached them.

    .venv/bin/python -m bench.run.streams_at_scale [--readers 1000] [--out FILE.json]

Against the running services (``make run`` or ``make up NODES=3`` with the services),
through the API over HTTP only, as a new user would:

1. N fresh readers and one author exist (a first authenticated request creates a user),
   every reader follows the author (``PUT /v1/users/{author}/follow``), and the pipeline
   applies those follows (lag back to 0: a stream routes by the follows copies);
2. N streams are opened at once (one connection each); every answer is counted by
   status, and the opened ones wait for their ``connected`` comment;
3. the author posts once (``POST /v1/posts``); each open stream waits for that post's
   ``new_item`` up to ``--deadline-s``.

Delivery is timed from the post's 201 to the event's ``: sent`` stamp (when the API
passed its last check and wrote it; same machine, same clock) and to its receipt here
(this client parses N streams on the same cores, so receipt includes its own lag).
Targets (docs/architecture.md): at most 1 % of opens refused, delivery p95 ≤ 0.5 s.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import uuid
from collections import Counter
from typing import Any

import httpx

from services.api.http.auth import mint_token
from services.shared.settings import Settings, get_settings

REFUSED_SHARE = 0.01
DELIVERY_P95_S = 0.5


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


class Stream:
    """One reader's stream: its status, when it connected, and the post's event."""

    def __init__(self, reader: int) -> None:
        self.reader = reader
        self.status: str | None = None
        self.connected = asyncio.Event()
        self.got: dict[int, tuple[float, float | None]] = {}   # post -> (received, sent)
        self.arrived = asyncio.Event()


async def _hold(client: httpx.AsyncClient, stream: Stream, token: str, post: asyncio.Future[int],
                deadline_s: float) -> None:
    try:
        async with client.stream("GET", "/v1/feed/stream",
                                 headers={"Authorization": f"Bearer {token}"},
                                 timeout=httpx.Timeout(30.0, read=deadline_s + 60)) as r:
            stream.status = str(r.status_code)
            if r.status_code != 200:
                return
            event: dict[str, str] = {}
            async for line in r.aiter_lines():
                if line.startswith(":"):
                    if "connected" in line:
                        stream.connected.set()
                    elif line.startswith(": sent "):
                        event["sent"] = line.removeprefix(": sent ")
                    continue
                if line:
                    name, _, value = line.partition(":")
                    event[name] = value.lstrip(" ")
                    continue
                if event.get("event") == "new_item":
                    pid = int(json.loads(event["data"])["post_id"])
                    sent = int(event["sent"]) / 1000 if "sent" in event else None
                    stream.got[pid] = (time.time(), sent)
                    if post.done() and pid == post.result():
                        stream.arrived.set()
                        return
                event = {}
    except httpx.HTTPError as exc:
        stream.status = stream.status or type(exc).__name__
    finally:
        stream.connected.set()   # answered (or failed): the opener stops waiting


async def run(settings: Settings, readers: int, deadline_s: float) -> dict[str, Any]:
    secret = settings.jwt_secret.get_secret_value()
    base = f"http://{settings.api_host}:{settings.api_port}"
    first = random.SystemRandom().randrange(10**12, 9 * 10**12)
    author, cast = first, [first + 1 + i for i in range(readers)]
    tokens = {u: mint_token(u, secret, ttl_seconds=7200) for u in [author, *cast]}
    limits = httpx.Limits(max_connections=readers + 50, max_keepalive_connections=readers + 50)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30.0) as client:
        sem = asyncio.Semaphore(32)

        async def call(method: str, path: str, user: int, **kw: Any) -> httpx.Response:
            headers = {"Authorization": f"Bearer {tokens[user]}", **kw.pop("headers", {})}
            async with sem:
                for attempt in range(4):   # set-up only: a dropped connection is tried again
                    try:
                        return await client.request(method, path, headers=headers, **kw)
                    except httpx.TransportError:
                        if attempt == 3:
                            raise
                        await asyncio.sleep(0.5)
            raise AssertionError("unreachable")

        t0 = time.monotonic()
        await asyncio.gather(*(call("GET", "/v1/feed", u, params={"limit": 1}) for u in [author, *cast]))
        follows = await asyncio.gather(*(call("PUT", f"/v1/users/{author}/follow", r) for r in cast))
        failed_follows = sum(1 for f in follows if f.status_code not in (200, 201))
        setup_s = time.monotonic() - t0
        await _wait_follows_applied(settings)

        post: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        streams = [Stream(r) for r in cast]
        opened_at = time.monotonic()
        holders = [asyncio.ensure_future(_hold(client, s, tokens[s.reader], post, deadline_s))
                   for s in streams]
        await asyncio.wait_for(asyncio.gather(*(s.connected.wait() for s in streams)), 120)
        open_s = time.monotonic() - opened_at
        statuses = Counter(s.status or "none" for s in streams)
        live = [s for s in streams if s.status == "200"]   # "connected" follows the index load
        r = await call("POST", "/v1/posts", author, json={"text": "streams at scale"},
                       headers={"Idempotency-Key": uuid.uuid4().hex})
        acked = time.time()
        if r.status_code != 201:
            raise SystemExit(f"streams: the post was refused: {r.status_code} {r.text}")
        post_id = int(r.json()["post_id"])
        post.set_result(post_id)
        for s in live:   # it may have arrived before the future was set
            if post_id in s.got:
                s.arrived.set()
        try:
            await asyncio.wait_for(asyncio.gather(*(s.arrived.wait() for s in live)), deadline_s)
        except asyncio.TimeoutError:
            pass
        for h in holders:
            h.cancel()
        await asyncio.gather(*holders, return_exceptions=True)

    received = [s.got[post_id][0] - acked for s in live if post_id in s.got]
    sent = [s.got[post_id][1] - acked for s in live  # type: ignore[operator]
            if post_id in s.got and s.got[post_id][1] is not None]
    refused = readers - len(live)
    p95 = quantile(sent, 0.95)
    return {
        "readers": readers, "follows refused": failed_follows, "set-up s": round(setup_s, 1),
        "opens": dict(statuses), "opens refused": refused,
        "opens refused share": round(refused / readers, 4), "all opens answered in s": round(open_s, 2),
        "delivered": len(received), "not delivered within deadline": len(live) - len(received),
        "delivery from the 201 to the server's write (s)": {
            "p50": quantile(sent, 0.5), "p95": p95, "max": quantile(sent, 1.0)},
        "delivery from the 201 to receipt here (s)": {
            "p50": quantile(received, 0.5), "p95": quantile(received, 0.95),
            "max": quantile(received, 1.0)},
        "targets": {"opens refused ≤ 1 %": refused <= REFUSED_SHARE * readers,
                    "delivery p95 ≤ 0.5 s": p95 is not None and p95 <= DELIVERY_P95_S
                    and len(received) == len(live)},
    }


async def _wait_follows_applied(settings: Settings, timeout_s: float = 300.0) -> None:
    """Until the pipeline's lag is 0 (the follows are in the copies the streams route by)."""
    from deploy.pipeline_progress import PipelineOffsets

    offsets = PipelineOffsets(settings, timeout_s=4.0)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            try:
                if offsets.read().lag == 0:
                    return
            except Exception:  # noqa: BLE001 - a broker away: ask again
                pass
            await asyncio.sleep(1.0)
        raise SystemExit("streams: the follows were not applied within the timeout")
    finally:
        offsets.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run.streams_at_scale", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--readers", type=int, default=1000)
    ap.add_argument("--deadline-s", type=float, default=30.0)
    ap.add_argument("--out", help="write the result as JSON here")
    args = ap.parse_args(argv)
    result = asyncio.run(run(get_settings(), args.readers, args.deadline_s))
    print("streams: " + json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if all(result["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
