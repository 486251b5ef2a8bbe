"""Write benchmarks.

* ``api``: POST /v1/posts throughput and p95; Snowflake ids per second
* ``ids``: the id generator against its layout's ceiling; what the key type costs an index
"""
