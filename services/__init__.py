"""The product; no service imports another.

* ``api/``: the feed API: writes, feed pages and their SSE stream
* ``cdc/``: the CDC relay: Postgres WAL to Kafka, Debezium envelopes
* ``fanout/``: the fan-out worker: posts into inboxes, follows and blocks into copies
* ``ranker/``: the ranker worker: likes and features into rank keys
* ``shared/``: what more than one service needs, knowing none of them
"""
