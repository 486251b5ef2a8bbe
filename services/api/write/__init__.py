"""The write path's decisions.

* ``idempotency``: Idempotency-Key decisions for ``POST /v1/posts`` (pure)
* ``idgen``: Snowflake ids, with node ids leased in Postgres
* ``users``: users made on their first authenticated request
* ``visibility``: who may see, like or delete a post (pure)
"""
