"""Store access more than one service uses, and the one owner of each Cassandra table.

Owners (statements, columns and row types; ``statements`` says how a service uses them):
``posts``, ``follows``, ``blocks``, ``likes``, ``inbox``, ``timelines``, ``tiers``,
``preferences``, ``snapshot_slots``, ``stream_leases``, ``activity`` (reader activity,
and which readers the fan-out skips), ``counted_edges`` (edges and their counts),
``accounts`` (suspended and deleted accounts),
``profiles`` (the copy of users' handles and display names).

* ``statements``: how an owner states its statements: ``Cql`` and ``Statements``
* ``cql_async``: driver futures bridged to asyncio
* ``write_coalescer``: concurrent single-row writes leave as shared batches
* ``read_coalescer``: concurrent single-partition reads leave as one ``IN`` read
* ``store_pressure``: a worker's statements in flight and retry budget
* ``store_health``: what this process's clients see of the nodes, as metrics
"""
