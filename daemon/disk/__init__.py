"""The agent's disk side: the data directory (identity, election state),
group commit, and the persister that releases sends once writes are durable."""
