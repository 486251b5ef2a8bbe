"""The fan-out worker (docs/fanout.md).

* ``app``: the faust agents and their wiring; ``__main__``: runs the worker
* ``post_events``: a post's changes: its copy, then push to inboxes or unpush; a batch's
  old posts together
* ``backlog``: which posts of a batch go together, and what each needs (pure)
* ``push_rounds``: a batch's inbox pushes written together, grouped by reader
* ``relation_events``: follows and blocks: copies, follower counts, backfill, clean-up
* ``account_events``: suspensions, unsuspends and deletions: the account copy
* ``profile_events``: users changes: the copy of their names (``user_profiles``)
* ``rank_moves``: moves a post's rows when the ranker moves its key
* ``audience``: who gets a post, where its rows sort (pure)
* ``tiering``: which authors are pushed, which merged at read time (pure)
* ``tier_store``: the tiers' state in Cassandra
* ``inbox``: reader inboxes: push, move, unpush, purge, trim
* ``copies``: the Cassandra copies of posts, timelines, follows, blocks and user names
* ``cleanup``: which inbox rows must go (pure)
* ``inactive``: the sweeper that flags readers who stopped reading
* ``returning``: brings a returning reader's inbox back
* ``rebuild``: refills a reader's inbox from their authors' timelines
* ``verifier``: the visibility verifier; ``copy_audit``: copies against Postgres, and repair
* ``metrics``: the worker's metrics
* ``jobs/``: operator commands over the fan-out's data
"""
