"""Store clients more than one service uses: Cassandra and Postgres sessions, reader activity, counted edges, node health."""
