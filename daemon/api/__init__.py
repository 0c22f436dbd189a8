"""The agent's local HTTP API: the server and its routes, access rules, the
client the CLI uses, metrics, the callers that wait on events, and the
snapshot and commands the handlers reach the agent through (port.py).

The server is loaded once the node is up and joining, not at the agent's
start; the agent's start needs only `access` (a setting) and `watch`."""
