"""The CDC relay checked against real Debezium (``make debezium-check``).

* ``check``: both capture the same changes on a scratch database, then compare
* ``compare``: field-by-field comparison of the two sets of records (pure)
* ``connector.properties``, ``worker.properties``: Debezium's Kafka Connect settings
"""
