"""CDC relay: Postgres WAL (pgoutput, publication ``feed_cdc``) -> Kafka, Debezium envelopes.

See docs/cdc.md. Pure: ``pgoutput``, ``column_rendering``, ``envelope``, ``ack_frontier``.

* ``relay``: the process: slot set-up, first snapshot, streaming, reconnection
* ``pgoutput``: decodes the pgoutput protocol
* ``column_rendering``: a column's text as Debezium would render it
* ``envelope``: a row change as Kafka records with Debezium's envelope
* ``ack_frontier``: which WAL position may be confirmed, from Kafka's acks
* ``stream``: streamed messages to records, acks tracked per transaction
* ``snapshot``: the first snapshot of the captured tables
* ``catalog``: captured tables and their keys, from the catalog
* ``slot``: the replication slot and the snapshot's durable state
* ``publisher``: the idempotent Kafka producer
* ``health``: the relay's liveness and readiness (its loop, its slot, a broker)
* ``metrics``: the relay's metrics; ``__main__``: runs the relay
"""
