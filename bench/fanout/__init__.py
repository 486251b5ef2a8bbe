"""Fan-out benchmarks (``python -m bench.fanout``).

* ``rows``: sustained fan-out rows/s against the best raw writer and the floor
* ``raw_writer``: the best raw Cassandra writer of the fan-out's rows
* ``floor``: the contract's floor: the least work any fan-out must do, cheapest client
* ``alike``: each side's CPU per row from a settled start to settled compactions
* ``history_drain``: a month of bulk-loaded posts, timed to lag 0
* ``follows``: follows and likes applied by one real worker
* ``counted_changes``: what counting follows and likes costs one worker
* ``counted_step``: the counting step alone, against the stores
* ``__main__``: runs ``rows``
"""
