"""The DNS interface: every agent answers for the cluster domain (docs/operations.md, "DNS")."""
