"""shoal: cluster membership for machines on a LAN.

The repository's top-level folders are this package's sub-packages
(pyproject maps `shoal` onto the repository root); docs/architecture.md
draws the layers and says where each behaviour lives.
"""

from shoal import native as _native

__version__ = "0.2.0"
__all__ = ["__version__"]

# Before any other module of shoal loads: the compiled modules, or their
# sources when SHOAL_PURE is set or a source changed (native.py).
_native.select(__path__[0])
