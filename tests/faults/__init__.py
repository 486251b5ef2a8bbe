"""The fault suite (``make faults``): scenarios on the three-node stack, a ledger of
acknowledged writes, and a checker against Postgres and the API. Not collected by
pytest (no ``test_*`` modules): it needs the three-node stack and runs for minutes."""
