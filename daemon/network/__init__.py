"""The agent's network side: the wire format, sockets and datagrams,
streams and key commands, addresses, and the discovery glue."""
