"""CDC relay: Postgres WAL (pgoutput over publication feed_cdc) -> Kafka, Debezium envelopes.

Layout: ``pgoutput`` decodes the protocol, ``column_rendering`` and ``envelope`` map a row
change to Kafka records (pure), ``ack_frontier`` decides what may be confirmed (pure);
``snapshot``, ``stream``, ``catalog``, ``slot`` and ``publisher`` are the I/O around them,
and ``relay`` runs it all. See docs/cdc.md.
"""
