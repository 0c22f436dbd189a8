"""The agent's network side: the wire format, sockets and datagrams,
streams and key commands, addresses, mDNS discovery and its glue."""
