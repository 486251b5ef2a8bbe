"""Contract suites: one per store Protocol, run against the in-memory store (tests/unit)
and the Cassandra one (tests/integration), so the fakes cannot drift from the real thing.

A suite is a class whose tests take a ``subject`` fixture; a test module subclasses it
(``Test...``) and provides the fixture.

* ``feed_store_contract``: ``FeedPort``, the read path's store
* ``inbox_store_contract``: ``InboxPort``, the fan-out's inboxes
* ``common``: ids and times built as the real code builds them
"""
