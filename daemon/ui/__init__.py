"""The status page every agent serves at `/ui/` (issue 24): static files
shipped in the package, read by `daemon/api/server.py`; no build step."""
