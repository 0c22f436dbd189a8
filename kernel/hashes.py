"""The two hash functions shoal uses, without hashlib's start-up cost.

Importing hashlib loads `_hashlib`, which initialises OpenSSL's digests:
about 4.5 ms of CPU, at every agent start, for functions shoal does not use.
blake2b (Merkle leaves, record digests) is CPython's own implementation in
`_blake2`, the very object `hashlib.blake2b` is. sha256 (the cluster tag)
is CPython's own `_sha256` (`_sha2` from 3.12), which gives the same
digests as OpenSSL's. When an interpreter lacks these modules, hashlib
provides both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the same objects, as typeshed types them
    from hashlib import blake2b, sha256
else:
    try:
        from _blake2 import blake2b
    except ImportError:  # pragma: no cover (not CPython)
        from hashlib import blake2b

    try:
        from _sha256 import sha256  # CPython 3.11
    except ImportError:  # pragma: no cover
        try:
            from _sha2 import sha256  # CPython 3.12 and later
        except ImportError:
            from hashlib import sha256

__all__ = ["blake2b", "sha256"]
