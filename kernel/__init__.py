"""The shared pure kernel below the three cores: the core contract, the
error tree, hashes (docs/architecture.md)."""

__all__: list[str] = []
