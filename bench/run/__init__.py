"""The whole pipeline against its baselines (``make bench``, ``make bench-full``).

* ``main``: the run: phases in order, headline rows and verdicts
* ``phases``: the measurements of one run (reads, freshness, largest authors)
* ``mix``: freshness under the target read/write mix, open loop
* ``inactive``: inactive readers in a run: rows not written, returning readers
* ``streams_at_scale``: many readers of one author open their streams at once
* ``report``: one result as Markdown and PNG plots
* ``capacity``: the capacity model: what a stated load needs, from a run's costs
* ``drain``: goodput of a backlog drain beside ``make run``
* ``__main__``: runs ``main``
"""
