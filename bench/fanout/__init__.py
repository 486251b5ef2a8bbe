"""The fan-out: rows/s against the best raw Cassandra writer and the contract's floor
(``python -m bench.fanout``), a month of history drained, follows and likes applied, and
what counting costs."""
