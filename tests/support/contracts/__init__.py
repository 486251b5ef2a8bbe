"""Contract suites: one set of tests per store Protocol, run against the in-memory store
(tests/unit) and the Cassandra one (tests/integration), so the fakes cannot drift from
the real thing (arroyo's pattern). A suite is a class whose tests take a ``subject``
fixture; a test module subclasses it (``Test...``) and provides the fixture."""
