"""The only place that builds clients of the three stores, from their settings blocks.

* ``kafka``: confluent-kafka producers, consumers and admin clients; aiokafka producers
  and consumers; faust's broker URLs and credentials. TLS and SASL from ``KafkaSettings``.
* ``cql``: cassandra-driver clusters and sessions (auth provider, ``ssl_context``) from
  ``CassandraSettings``.
* ``pg``: psycopg 3 connections and pools, and the relay's psycopg2 replication
  connection, from ``PostgresSettings`` (``sslmode``, ``sslrootcert``, a full conninfo).
* ``preflight``: one connection to each store at a process's start; a wrong password, an
  untrusted CA or a wrong host name ends the process with one line naming the store and
  the setting.

A test (tests/unit/test_layout.py) fails on any other module that builds a client.
"""
