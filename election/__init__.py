"""Controller election by quorum lease (not built yet: see issue 5)."""

__all__: list[str] = []
