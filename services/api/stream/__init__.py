"""Server-sent events for the feed: per-process Kafka consumer, routing hub, eligibility gate, leases, sessions."""
