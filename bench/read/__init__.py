"""Read benchmarks: our feed API against the strongest pull service (``make bench-read``).

* ``grid``: the grid over history x follows, ours against pull, over HTTP
* ``graph``: the grid's data: author pools, reader cells, the rows the pipeline would write
* ``seed``: loads that data into the bench's own Postgres and Cassandra
* ``report``: the grid's JSON, Markdown, ratios, target verdicts and plot
* ``pull_service``: the pull baseline, a fan-out-on-read service on the same Postgres
* ``wrk``: ``make bench``'s read phase, under wrk
* ``ab``: A/B of two source trees on one dataset (``make bench-read-ab``)
* ``rank_rows``: rank-key rows after a simulated month: tombstones, rows per move
* ``fence_start``: an API started over a large visibility log: time to ready, memory
* ``snapshot_writes``: what storing first pages' snapshots costs Cassandra, by request size
"""
