"""Local stack manager: real PostgreSQL, Kafka and Cassandra processes, no Docker.

``python -m deploy.stack up|down|status|logs|reset|env [--nodes 1|3]``
"""
