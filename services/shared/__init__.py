"""Code every service shares and that knows none of them.

* ``domain/``: the product's rules, pure
* ``contracts/``: what the parts agree on: topics and events
* ``stores/``: store access, and the one owner of each Cassandra table
* ``clients/``: the only builders of store clients
* ``worker/``: the Kafka side of a process
* ``settings/``: typed ``FEED_*`` settings
* ``secret_policy``: which signing secrets a process may start with
* ``runtime``: the garbage collector and switch interval of a service process
* ``health``: a background process's ``/metrics``, ``/healthz`` and ``/readyz``
"""
