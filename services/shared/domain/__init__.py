"""The product's rules, pure: no I/O, the clock is an argument.

* ``rules``: visibility, windows and shared formats, each written once
* ``ranking``: the ranking formula and the time-invariant rank key
* ``ids``: 64-bit Snowflake ids and clock drift
* ``edge_transitions``: what a change does to a counted edge and its count
* ``owned_counts``: counts with one writer each, ordered by topic offsets
* ``concurrency_limit``: statements in flight to the store: an AIMD limit
* ``retry_budget``: how many retries a worker may send: a token bucket
"""
