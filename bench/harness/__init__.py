"""What every benchmark shares; the tests use parts of it, and nothing here imports them.

* ``pipeline``: the pipeline as a bench runs it: own stores and topics, services, lag
* ``cdc_events``: Debezium-format CDC events built by hand
* ``costs``: CPU meters and the per-unit costs of a window
* ``stack_cpu``: CPU so far of the running stack and services, by component
* ``servers``: the two HTTP services under test, as subprocesses
* ``wrk_load``: HTTP load from wrk with a generated Lua script
* ``http_load``: closed-loop HTTP load in Python
* ``profiling``: py-spy over a worker for a measured window
* ``verdicts``: a target's verdict, computed from the measured value
"""
