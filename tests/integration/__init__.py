"""Integration tests: the API over real HTTP and the stores and workers against real
Postgres, Kafka and Cassandra (the stack `make test` starts)."""
