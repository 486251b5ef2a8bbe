"""The feed read use cases: candidates -> eligibility -> rank -> snapshot -> page.

* ``reader``: ``FeedReader``, the first-page and next-page use cases the route calls
* ``reuse``: a first page that shows the reader's last snapshot again
* ``candidates``: the top of each source (inbox, celebrity, fallback authors), merged
* ``user_lists``: ``UserLists``, an author's posts and a user's followers and following
* ``graph``: ``PageGraph``, the reader's follows and blocks as one page needs them
* ``preferences``: the reader's stored feed order
* ``activity``: reads recorded; returning readers announced to the fan-out
* ``awaiting``: several reads awaited together, or in turn when served from memory
* ``metrics``: ``FeedMetrics``, the read path's metrics
* ``wiring``: opening and closing the read path's clients in the app's lifespan
"""
