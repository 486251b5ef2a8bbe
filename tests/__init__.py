"""The test suite (`make test`): pure logic (`unit/`), real stores and services
(`integration/`), the whole pipeline end to end (`e2e/`), the fault suite (`faults/`,
`make faults`) and the helpers they share (`support/`)."""
