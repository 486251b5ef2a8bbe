"""What storing first-page snapshots costs Cassandra, by how they are grouped into requests.

    .venv/bin/python -m bench.read.snapshot_writes [--snapshots-per-s 1100] [--blob 2400]
        [--per-request 5,16,64] [--seconds 12] [--shapes row,batch]

A first page built with reuse off stores its snapshot behind the page
(``services/api/snapshots/snapshot_writer.py``): what one process places within the
coalescing delay is one slot, stored as one row of ``feed_snapshot_slots``. This sends
the same stream of snapshots (``--snapshots-per-s`` blobs of ``--blob`` bytes, paced
evenly) to the running stack's keyspace, grouped ``--per-request`` to a request, in
two shapes:

- ``row``: one slot row holding them all (what the writer does);
- ``batch``: one clustering row per snapshot in the slot's partition, sent as one
  unlogged single-partition batch (one request, one mutation).

It prints, per run, the node's CPU (``/proc``, every Cassandra process of the stack; the
idle rate is sampled first and shown apart) in cores and µs per snapshot, and this
process's CPU per snapshot (the driver's side). The rows are written with a 60 s TTL.
Figures are for comparing shapes within one run: other work on the machine shares the
node.
"""
from __future__ import annotations

import argparse
import os
import time

from cassandra.query import BatchStatement, BatchType

from bench.harness.servers import stack_cpu_meter
from services.api.snapshots import snapshot
from services.shared.clients import cql
from services.shared.settings import Settings

TTL_S = 60


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.read.snapshot_writes", description=__doc__)
    parser.add_argument("--snapshots-per-s", type=float, default=1100.0)
    parser.add_argument("--blob", type=int, default=2400, help="bytes per snapshot")
    parser.add_argument("--per-request", default="5,16,64")
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--shapes", default="row,batch")
    args = parser.parse_args(argv)

    settings = Settings()
    cluster = cql.cluster(settings)
    session = cluster.connect(settings.cassandra_keyspace)
    insert = session.prepare("INSERT INTO feed_snapshot_slots (slot, part, payload) VALUES (?, ?, ?) "
                             f"USING TTL {TTL_S}")
    node_cpu = stack_cpu_meter("cassandra")
    blob = os.urandom(args.blob)
    run = os.urandom(4).hex()

    before = node_cpu()
    time.sleep(5)
    idle = (node_cpu() - before) / 5
    print(f"node idle: {idle:.3f} cores")
    for shape in args.shapes.split(","):
        for per in (int(p) for p in args.per_request.split(",")):
            rate = args.snapshots_per_s / per
            node0, own0, t0 = node_cpu(), time.process_time(), time.monotonic()
            futures, sent = [], 0
            while time.monotonic() - t0 < args.seconds:
                slot = f"bench-{run}-{shape}-{per}-{sent}"
                items = [(i, f"v-{slot}-{i}", 0, blob) for i in range(per)]
                if shape == "row":
                    futures.append(session.execute_async(insert, (slot, 0, snapshot.pack_slot(items))))
                else:
                    batch = BatchStatement(batch_type=BatchType.UNLOGGED)
                    for item in items:
                        batch.add(insert, (slot, item[0], snapshot.pack_slot([item])))
                    futures.append(session.execute_async(batch))
                sent += 1
                pause = t0 + sent / rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            for f in futures:
                f.result()
            seconds = time.monotonic() - t0
            node = node_cpu() - node0
            own = time.process_time() - own0
            snapshots = sent * per
            print(f"{shape:5} {per:4d} a request, {sent / seconds:7.1f} requests/s: node {node / seconds:.2f} cores "
                  f"({(node - idle * seconds) / seconds:.2f} over idle), {1e6 * node / snapshots:6.0f} µs a snapshot; "
                  f"client {1e6 * own / snapshots:5.0f} µs a snapshot (computed)", flush=True)
    cluster.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
