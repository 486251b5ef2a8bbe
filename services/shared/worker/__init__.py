"""The Kafka side of a process.

* ``faust_app``: the faust app, raw topics and our view of a message
* ``eager_handoff``: faust's fetcher hands each message to its stream without a task
* ``committed_seek``: the seek to the committed offsets also seeks uncommitted partitions
* ``batch_consumer``: an agent's loop over a stream, in batches
* ``poison_guard``: one message through a handler under the failure rules
* ``event_publisher``: the idempotent producer of output events
* ``notices``: tells every API process which serving copies changed
* ``count_owner``: the agent side of counts with one writer
* ``kafka_consumers``: the API's consumers (no group)
* ``kafka_failover``: clients that stop asking a broker that just failed
* ``health``: a worker's liveness (its loops) and readiness (its group, its stores)
"""
