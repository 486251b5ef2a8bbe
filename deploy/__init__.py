"""Running the product; imports ``services/``, never ``bench/``.

* ``stack/``: the local stack: Postgres, Kafka, Cassandra and Prometheus processes
* ``migrate``, ``migrations/``: versioned migrations of the three stores, one command
* ``services``: starts and stops the four services beside the stack (several workers a role)
* ``assignment``: which partitions each worker of a consumer group holds
* ``supervise``: runs one service and restarts it when it dies
* ``demo``: ``make run``'s demo data, through the real pipeline
* ``workload``: a synthetic social graph and its bulk loader (the benchmarks use it too)
* ``lag``: the lag command: groups, topics and the replication slot
* ``pipeline_progress``: whether the pipeline still gets through its backlog
* ``debezium/``: the relay checked against real Debezium
* ``grafana/``, ``prometheus/``: the dashboard, alert rules and their tests
* ``maven/``: the jars' Maven projects
* ``secured-stack.env``: the secured stack's client settings
"""
