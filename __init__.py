"""shoal: cluster membership for machines on a LAN.

The repository's top-level folders are this package's sub-packages
(pyproject maps `shoal` onto the repository root); docs/architecture.md
draws the layers and says where each behaviour lives.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
