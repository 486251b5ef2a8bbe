"""``python -m bench``: which benchmark answers which question, and how to run it."""
from __future__ import annotations

import sys

# (command, question it answers), by subject (bench/<subject>/); every bench module that can
# be run is here (tests/unit/test_bench_index.py). The shared harness is bench/harness/.
INDEX: dict[str, list[tuple[str, str]]] = {
    "the whole pipeline": [
        ("make bench | make bench-full  (bench.run)",
         "Does the pipeline meet its targets (docs/architecture.md) against its baselines "
         "(reads vs a pull service, fan-out vs the raw writer and the floor, freshness, "
         "streams at scale)?"),
        ("python -m bench.run.capacity RESULT.json",
         "What cores, processes, nodes and partitions does a stated load need, from a run's costs?"),
        ("python -m bench.run.drain  (beside make run)",
         "How fast does the demo's backlog drain, and does goodput hold up while it does?"),
        ("python -m bench.harness.stack_cpu  (after make run)",
         "How many CPU-seconds has each component of the stack and the services used so far?"),
        ("python -m bench.run.streams_at_scale",
         "Do 1,000 readers of one author get their streams opened and the post within 0.5 s?"),
    ],
    "reads": [
        ("make bench-read  (bench.read.grid)",
         "Feed pages/s and latency against the strongest pull service, over history x follows?"),
        ("make bench-read-ab  (bench.read.ab)", "Is this change to the read path faster or slower?"),
        ("python -m bench.read.pull_service", "The pull baseline alone, serving the same database."),
        ("python -m bench.read.rank_rows", "What do rank-key moves cost in tombstones and rows after a month?"),
        ("python -m bench.read.snapshot_writes",
         "What does storing first pages' snapshots cost Cassandra, by how many go to a request?"),
        ("python -m bench.read.fence_start",
         "How long does an API take to be ready over a visibility log of 1M entries, at what memory?"),
    ],
    "fan-out": [
        ("python -m bench.fanout", "Fan-out rows/s against the best raw writer and the contract's floor?"),
        ("python -m bench.fanout.raw_writer", "The best raw Cassandra writer on this stack, alone."),
        ("python -m bench.fanout.history_drain", "How long does a month of bulk-loaded posts take to fan out (--fanout-workers N: N processes)?"),
        ("python -m bench.fanout.follows", "How fast does one worker apply follows and likes?"),
        ("python -m bench.fanout.counted_changes", "What does counting follows and likes cost per change?"),
        ("python -m bench.fanout.counted_step", "The counting step alone: changes/s of the stores."),
    ],
    "CDC": [
        ("python -m bench.cdc", "Relay throughput and lag against raw decode and produce?"),
        ("python -m bench.cdc.debezium", "The relay against real Debezium 3.6 on the same changes?"),
    ],
    "writes and ids": [
        ("python -m bench.write.api", "POST /v1/posts throughput and p95; Snowflake ids per second?"),
        ("python -m bench.write.ids", "What does the id's type cost an index, against the layout's ceiling?"),
    ],
}


def main() -> int:
    print(__doc__.splitlines()[0].split(": ", 1)[1].capitalize() + "\n")
    for subject, rows in INDEX.items():
        print(f"{subject}:")
        for command, question in rows:
            print(f"  {command}\n      {question}")
        print()
    print("Results are written to bench/out/; kept runs are in bench/results/, each with a README.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
