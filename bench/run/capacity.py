"""The capacity model (docs/capacity.md): from the costs a bench run measured, the cores,
processes, nodes and Kafka partitions a stated load needs, per component.

    .venv/bin/python -m bench.run.capacity RESULT.json [--readers 1e6,1e7,1e8]
        [--pages-per-reader 20] [--reads-per-post 1000] [--next-share 0.25] [--peak 3]
        [--utilisation 0.6] [--cores-per-node 8] [--rf 3] [--markdown]

RESULT.json is a ``make bench`` / ``make bench-full`` result (``bench/run/main.py``; its
``costs`` section). Every cost is measured in that run, on its machine; every figure
printed here is computed from them and the stated load (the assumptions are printed with
it). One unit of work and its cost per core:

- a first page, a next page: the API process's CPU per page (wrk at the highest
  concurrency), and Cassandra's CPU per page over the read phase;
- an inbox row: the fan-out worker's and Cassandra's CPU per row over the history window
  (Cassandra's includes the ranker's and the API's few writes: an upper bound); at RF n a
  row costs n replicas, so Cassandra's write cost is multiplied by ``--rf`` (the bench
  stack is RF 1), and so is Kafka's (a record is written by every replica);
- a post announced: one author event; its cost is in the worker's per-row figure, and its
  records in Kafka's;
- a CDC event: the relay's and Postgres's CPU per event (Postgres's includes the COPY of
  the history: an upper bound);
- a Kafka record: the broker's CPU per record written (all topics of the run).

Python processes (API, fan-out worker, relay) use one core each: a component's cores
are also its processes, and the fan-out's processes need as many partitions of each
topic they consume (a faust worker owns whole partitions); the partitions each topic
needs are printed as the migrator's ``FEED_KAFKA_TOPIC_PARTITIONS``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DAY_S = 86_400


@dataclass(frozen=True)
class Load:
    readers: float             # daily readers
    pages_per_reader: float    # pages each reads a day (assumption)
    reads_per_post: float      # the target's: 1,000 feed reads per post written
    next_share: float          # share of pages that are next pages (assumption)
    peak: float                # peak hour / daily average (assumption)

    @property
    def pages_per_s(self) -> float:
        return self.readers * self.pages_per_reader / DAY_S * self.peak

    @property
    def posts_per_s(self) -> float:
        return self.pages_per_s / self.reads_per_post


@dataclass(frozen=True)
class Costs:
    """µs of CPU per unit of work, measured (bench/run/main.py's ``costs``)."""

    api_first_us: float
    api_next_us: float
    cassandra_read_us: float       # per page
    worker_row_us: float
    cassandra_row_us: float        # per inbox row at the bench's RF (1)
    rows_per_post: float           # hybrid inbox rows per post in the bench's history
    relay_event_us: float
    postgres_event_us: float
    cdc_events_per_post: float     # post + its likes, in the bench's history
    kafka_record_us: float
    records_per_post: float        # every topic, over the history window

    @classmethod
    def of(cls, result: dict[str, Any]) -> "Costs":
        costs = result.get("costs")
        if not costs:
            raise SystemExit("capacity: this result has no 'costs' (a bench run before 2026-12-04)")
        h, r = costs["history"], costs["reads"]

        def pick(d: dict[str, Any], prefix: str) -> float:
            for k, v in d.items():
                if k.startswith(prefix) and v is not None:
                    return float(v)
            raise SystemExit(f"capacity: no measured {prefix!r} in the result's costs")
        posts = h["posts"]
        return cls(api_first_us=pick(r, "API µs per first page"), api_next_us=pick(r, "API µs per next page"),
                   cassandra_read_us=pick(r, "Cassandra µs per page"),
                   worker_row_us=pick(h, "fan-out worker µs per inbox row"),
                   cassandra_row_us=pick(h, "Cassandra µs per inbox row"),
                   rows_per_post=h["inbox rows"] / posts,
                   relay_event_us=pick(h, "relay µs per CDC event"),
                   postgres_event_us=pick(h, "Postgres µs per CDC event"),
                   cdc_events_per_post=h["cdc events"] / posts,
                   kafka_record_us=pick(h, "Kafka µs per record"),
                   records_per_post=h["window"]["kafka records written"] / posts)


def plan(load: Load, c: Costs, *, utilisation: float, cores_per_node: int, rf: int) -> dict[str, Any]:
    """Cores per component at ``utilisation`` of each core, and what follows from them."""
    pages, posts = load.pages_per_s, load.posts_per_s
    rows = posts * c.rows_per_post
    api_us = (1 - load.next_share) * c.api_first_us + load.next_share * c.api_next_us

    def cores(per_s: float, us: float) -> float:
        return per_s * us / 1e6 / utilisation
    need = {
        "API processes": cores(pages, api_us),
        "fan-out workers": cores(rows, c.worker_row_us),
        "CDC relays": cores(posts * c.cdc_events_per_post, c.relay_event_us),
        "Cassandra": cores(pages, c.cassandra_read_us) + cores(rows, c.cassandra_row_us * rf),
        "Postgres": cores(posts * c.cdc_events_per_post, c.postgres_event_us),
        "Kafka": cores(posts * c.records_per_post, c.kafka_record_us * rf),
    }
    out: dict[str, Any] = {
        "daily readers": load.readers, "pages/s at peak": round(pages), "posts/s at peak": round(posts, 1),
        "inbox rows/s at peak": round(rows), "CDC events/s at peak": round(posts * c.cdc_events_per_post),
        "Kafka records/s at peak": round(posts * c.records_per_post),
        "cores": {k: round(v, 2) for k, v in need.items()},
    }
    out["processes"] = {k: max(1, math.ceil(need[k])) for k in ("API processes", "fan-out workers", "CDC relays")}
    # Cassandra and Kafka keep rf copies, so never fewer nodes than that.
    out["nodes"] = {k: max(1 if k == "Postgres" else rf, math.ceil(need[k] / cores_per_node))
                    for k in ("Cassandra", "Postgres", "Kafka")}
    # A faust worker owns whole partitions: at least one per worker, twice that to rebalance.
    out["partitions"] = topic_partitions(out["processes"]["fan-out workers"])
    out["posts partitions"] = out["partitions"]["posts"]
    # On shared cores (the bench's machine, or one pool of nodes) the component with the
    # most work saturates first as the load grows.
    out["saturates first"] = max(need, key=need.__getitem__)
    return out


# The topics the fan-out's workers consume (services/fanout/app.py): each worker needs a
# partition of each. The ranker's (likes, like-counts, rank-features) are not modelled:
# its cost per like was not measured, so they keep the default count.
FANOUT_TOPICS = ("posts", "follows", "blocks", "mutes", "users", "account_states",
                 "rank-key-moves", "reader-events", "follow-counts")
DEFAULT_PARTITIONS = 3


def topic_partitions(fanout_workers: int) -> dict[str, int]:
    """Partitions per topic for ``fanout_workers`` (computed): twice the workers, to
    rebalance, never under the default."""
    n = max(DEFAULT_PARTITIONS, 2 * fanout_workers)
    return {topic: n for topic in FANOUT_TOPICS}


def partitions_setting(partitions: dict[str, int]) -> str:
    """The migrator's setting that creates them (docs/deploy.md, "Kafka topics")."""
    return "FEED_KAFKA_TOPIC_PARTITIONS=" + ",".join(f"{t}={n}" for t, n in partitions.items())


def instance_limits(c: Costs, *, utilisation: float) -> dict[str, float]:
    """What one process (one core) of each Python component carries at ``utilisation``
    (computed). One relay reads one replication slot in order, so past its limit the
    Postgres shards (one slot and one relay each) are what scales it."""
    return {"pages/s per API process (first pages)": round(utilisation * 1e6 / c.api_first_us),
            "inbox rows/s per fan-out worker": round(utilisation * 1e6 / c.worker_row_us),
            "CDC events/s per relay (one slot)": round(utilisation * 1e6 / c.relay_event_us)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run.capacity", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("result", type=Path)
    ap.add_argument("--readers", default="1e6,1e7,1e8", help="daily readers, comma-separated")
    ap.add_argument("--pages-per-reader", type=float, default=20.0)
    ap.add_argument("--reads-per-post", type=float, default=1000.0)
    ap.add_argument("--next-share", type=float, default=0.25)
    ap.add_argument("--peak", type=float, default=3.0)
    ap.add_argument("--utilisation", type=float, default=0.6)
    ap.add_argument("--cores-per-node", type=int, default=8)
    ap.add_argument("--rf", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    result = json.loads(args.result.read_text())
    costs = Costs.of(result)
    plans = [plan(Load(float(n), args.pages_per_reader, args.reads_per_post, args.next_share, args.peak),
                  costs, utilisation=args.utilisation, cores_per_node=args.cores_per_node, rf=args.rf)
             for n in args.readers.split(",")]
    if args.json:
        print(json.dumps({"costs (µs, measured)": costs.__dict__, "plans (computed)": plans}, indent=1))
        return 0
    print(f"Measured in {args.result} ({result.get('meta', {}).get('machine', '?')}), µs of CPU per unit:")
    for k, v in costs.__dict__.items():
        print(f"  {k}: {v:.2f}")
    print(f"Assumed: {args.pages_per_reader:g} pages per daily reader, {args.reads_per_post:g} reads per post, "
          f"{args.next_share:.0%} next pages, peak {args.peak:g}x the daily average, cores at "
          f"{args.utilisation:.0%}, {args.cores_per_node} cores a node, RF {args.rf}.")
    print("All figures below are computed.\n")
    for k, v in instance_limits(costs, utilisation=args.utilisation).items():
        print(f"  {k}: {v:,}")
    print()
    head = ["daily readers", "pages/s", "posts/s", "rows/s", *plans[0]["cores"], "API procs",
            "fan-out procs", "relays", "Cassandra nodes", "Kafka nodes", "posts partitions", "saturates first"]
    print("| " + " | ".join(head) + " |")
    print("|" + " ---: |" * (len(head) - 1) + " --- |")
    for p in plans:
        cells = [f"{p['daily readers']:,.0f}", f"{p['pages/s at peak']:,}", f"{p['posts/s at peak']:,}",
                 f"{p['inbox rows/s at peak']:,}", *(f"{v:,.1f} cores" for v in p["cores"].values()),
                 *(f"{v:,}" for v in p["processes"].values()), f"{p['nodes']['Cassandra']:,}",
                 f"{p['nodes']['Kafka']:,}", f"{p['posts partitions']:,}", p["saturates first"]]
        print("| " + " | ".join(cells) + " |")
    print("\nPartitions per topic (computed; the migrator's setting, before the topics exist):")
    for p in plans:
        print(f"  {p['daily readers']:,.0f} daily readers: {partitions_setting(p['partitions'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
