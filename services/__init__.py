"""The product: the feed API (`api/`), the CDC relay (`cdc/`), the fan-out (`fanout/`) and
the ranker (`ranker/`), and what they share (`shared/`). No service imports another."""
