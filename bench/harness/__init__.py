"""What every benchmark shares: the pipeline as a bench runs it (its own database, keyspace
and topics, the services as processes, lag sampling, a consumer group caught up),
hand-built CDC events (cdc_events.py), CPU meters and per-unit costs, the servers under
test, HTTP load (wrk, and a Python closed loop) and targets' verdicts. The tests use the
CDC events and the group wait too; nothing here imports the tests."""
