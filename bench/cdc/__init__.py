"""CDC benchmarks (``python -m bench.cdc``).

* ``relay``: the relay's throughput and lag against raw decode and raw produce
* ``debezium``: the relay against real Debezium 3.6 on the same changes
* ``__main__``: runs ``relay``
"""
