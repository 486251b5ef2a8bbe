"""Running the product: the local stack (`stack/`), migrations (`migrate.py`,
`migrations/`), the services supervisor (`services.py`), the demo and its data (`demo.py`,
`workload.py`), operators' tools (`lag.py`), dashboards and alerts (`grafana/`,
`prometheus/`), and the Debezium check (`debezium/`). Imports `services/`, never `bench/`."""
