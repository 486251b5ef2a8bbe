"""CDC: the relay against raw decode and produce (``python -m bench.cdc``), and against real
Debezium 3.6 on the same changes."""
