"""What every benchmark shares: the pipeline as a bench runs it (its own database, keyspace
and topics, the services as processes, lag sampling), CPU meters and per-unit costs, the
servers under test, and HTTP load (wrk, and a Python closed loop)."""
