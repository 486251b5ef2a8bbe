"""Local stack manager: real PostgreSQL, Kafka and Cassandra processes, no Docker.

``python -m deploy.stack up|down|status|logs|reset|env [--nodes 1|3]``

* ``__main__``: the command line
* ``layout``: where the stack lives and its addresses and ports
* ``toolchain``: the programs it needs (JDK 17, Maven, PostgreSQL 15, Prometheus, the
  postgres exporter) and the jar cache
* ``process``: starting, watching and stopping its server processes
* ``postgres``, ``kafka``, ``cassandra``, ``prometheus``: each server, one node or three
* ``exporters``: the stores' Prometheus exporters (the JMX exporter's agent in every
  Kafka and Cassandra JVM, Debian's postgres exporter beside Postgres)
* ``security``: the three-node stack's CA, certificates and passwords
* ``cgroups``: a cgroup per server, so the fault suite can cut one off the network
* ``workers``: the services' processes per role and their ports (for ``deploy.services`` and Prometheus)
* ``templates/``: the JVMs' logging configuration
"""
