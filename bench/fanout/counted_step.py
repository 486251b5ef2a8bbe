"""The counting step alone: follows/s and likes/s of the stores, and worker CPU per change.

    .venv/bin/python bench/fanout/counted_step.py --baseline-root DIR [--changes 4000] [--repeats 3]

``bench/fanout/counted_changes.py`` measures whole workers (Kafka, faust, batches); this measures
only what a follow or like costs in the store layer, where the counting design lives:
``CopyStore.apply_follow`` / ``RankStore.set_like`` (plus the counter bump of a variant
that still has one), or, for the owned counts (a variant whose counted_edges.py has
``OwnedChange``), the copy write plus the count owner's batches (``CountedEdges.apply``
over each batch of ``OWNER_BATCH`` changes grouped by partition, as ``CountOwner`` does);
64 changes or counts in flight, over 300 partitions (spread) or 3 (hot), on
a fresh keyspace migrated by the variant's own migrations. Each measurement runs in its
own process with the variant's ``services/`` first on the path; variants alternate and
the median of ``--repeats`` is reported, since the machine is shared.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# Changes in flight: the workers' default keys in flight (fanout_max_in_flight).
IN_FLIGHT = 64
SHAPES = {"spread": 300, "hot": 3}
WARM_UP = 200
# Changes per consumer batch of a count owner (Settings.consumer_batch_max's order).
OWNER_BATCH = 500


async def _measure(root: Path, kind: str, n: int, partitions: int) -> dict[str, float]:
    """Runs inside the variant's process: changes/s and worker CPU µs per change."""
    from deploy.migrate import migrate_cassandra
    from services.shared.settings import Settings
    from services.shared.clients import cql
    from services.shared.stores.cql_async import CqlRunner, use_cached_rows

    name = f"bench_step_{secrets.token_hex(3)}"
    s = Settings(cassandra_keyspace=name, topic_prefix=name)
    migrate_cassandra(s, name)
    session = cql.session(s, timeout=12)
    use_cached_rows(session)
    counters = not (root / "services/shared/stores/counted_edges.py").exists()  # the old design
    limit = asyncio.Semaphore(IN_FLIGHT)
    since = datetime.now(timezone.utc) - timedelta(days=1)
    store: Any
    if kind == "likes":
        from services.ranker.store import RankStore
        store = RankStore(session, 256)
    else:
        from services.fanout.copies import CopyStore
        store = CopyStore(session, CqlRunner(session, 256), 100)

    async def one(i: int) -> None:
        partition, edge, lsn = 1000 + i % partitions, 10_000 + i, 100 + i
        async with limit:
            if kind == "likes":
                delta = await store.set_like(partition, edge, True, lsn)
                if counters and delta:
                    await store.bump_likes(partition, delta)
            else:
                step = await store.apply_follow(edge, partition, since, lsn)
                if counters and step.delta:
                    await store.bump_followers(partition, step.delta)

    owned = not counters and "class OwnedChange" in (root / "services/shared/stores/counted_edges.py").read_text()
    if owned:
        from services.shared.domain.edge_transitions import EdgeChange
        from services.shared.stores.counted_edges import CountedEdges, OwnedChange
        if kind == "likes":
            from services.ranker.store import LIKE_EDGES as TABLE
        else:
            from services.fanout.copies import FOLLOW_EDGES as TABLE
        edges = CountedEdges(session, CqlRunner(session, 256), TABLE, 1)

        async def copy(i: int) -> None:
            partition, edge, lsn = 1000 + i % partitions, 10_000 + i, 100 + i
            async with limit:
                if kind == "likes":
                    await store.write_like_copy(partition, edge, True, lsn)
                else:
                    await store.apply_follow(edge, partition, since, lsn)

        async def count(partition: int, changes: list[Any]) -> None:
            async with limit:
                await edges.apply(partition, changes)

        async def run(first: int, last: int) -> None:
            await asyncio.gather(*(copy(i) for i in range(first, last)))
            for b in range(first, last, OWNER_BATCH):
                grouped: dict[int, list[Any]] = {}
                for i in range(b, min(last, b + OWNER_BATCH)):
                    grouped.setdefault(1000 + i % partitions, []).append(
                        OwnedChange(EdgeChange(10_000 + i, True, 100 + i), i))
                await asyncio.gather(*(count(p, c) for p, c in grouped.items()))
    else:
        async def run(first: int, last: int) -> None:
            await asyncio.gather(*(one(i) for i in range(first, last)))

    try:
        await run(0, WARM_UP)
        cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        await run(WARM_UP, WARM_UP + n)
        elapsed, cpu1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        return {"per_s": n / elapsed, "cpu_us": cpu / n * 1e6}
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=120)
        session.cluster.shutdown()


def measure(root: Path, kind: str, n: int, partitions: int) -> dict[str, float]:
    """One measurement in a fresh process running the variant's code."""
    out = subprocess.run([sys.executable, __file__, "--inside", str(root), kind, str(n), str(partitions)],
                         cwd=root, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--inside":
        root, kind, n, partitions = Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        sys.path.insert(0, str(root))
        os.chdir(root)
        print(json.dumps(asyncio.run(_measure(root, kind, n, partitions))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-root", type=Path, required=True)
    ap.add_argument("--changes", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    variants = {"baseline": args.baseline_root, "current": ROOT}
    results: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    for _ in range(args.repeats):
        for shape, partitions in SHAPES.items():
            for kind in ("follows", "likes"):
                for label, root in variants.items():
                    r = measure(root, kind, args.changes, partitions)
                    results.setdefault((label, kind, shape), []).append(r)
                    print(f"[{label}] {kind:<7} {shape:<6} {r['per_s']:>7,.0f}/s  {r['cpu_us']:>6,.0f} us CPU/change",
                          flush=True)
    print(f"\nmedians of {args.repeats}\nvariant    kind     shape   changes/s  worker CPU us/change")
    for (label, kind, shape), rs in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        print(f"{label:<10} {kind:<8} {shape:<6} {statistics.median(r['per_s'] for r in rs):>10,.0f}"
              f"  {statistics.median(r['cpu_us'] for r in rs):>10,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
