"""MerkleTree: a fixed-shape hash tree over a replica's records.

Theory of operation. Every key has a fixed place: its leaf is the first
``4 * depth`` bits of BLAKE2b(key), so the tree has ``16 ** depth`` leaves
and fan-out 16, and two replicas place every key in the same leaf whatever
they hold. A node of the tree is (level, index); level 0 is the root, the
children of (l, i) are (l + 1, 16 i) .. (l + 1, 16 i + 15), and the leaves
under (l, i) are one contiguous range (`leaf_range`), which the store can
scan by prefix.

Each node holds two numbers: the *sum* (mod 2^64) of the 64-bit digests of
all records below it, and their *count*. Sums instead of hashes of the
children (as Cassandra and Riak combine theirs) make the tree incremental
at no cost: writing one record adds ``new - old`` to the depth + 1 nodes on
its path, O(depth), with no rehash of siblings and no dirty marks to chase
before a comparison. Two replicas holding the same records have the same
sums everywhere; a node whose sums differ has a differing record below it.
The price: a sum of 64-bit digests is not collision-resistant against an
adversary who chooses records, but such an adversary is a member with the
cluster key, who can overwrite any key anyway. An accidental collision
(2^-64 per comparison) leaves one difference unrepaired until the next
write under that node changes the sum.

The tree is sparse (empty nodes are absent from the dicts), so a small
store costs little memory even with 65,536 leaves; that matters in the
simulator, which holds a tree per node. It is rebuilt from the store at
start (`add` for every record).
"""

from __future__ import annotations

from shoal.kernel.hashes import blake2b

FANOUT_BITS = 4
FANOUT = 1 << FANOUT_BITS
MAX_DEPTH = 6
MASK64 = 2**64 - 1


def leaf_of(key: bytes, depth: int) -> int:
    """The leaf index of `key` in a tree of `depth` levels below the root."""
    h = int.from_bytes(blake2b(key, digest_size=4).digest(), "big")
    return h >> (32 - FANOUT_BITS * depth)


class MerkleTree:
    """Sums and counts of record digests per tree node (module docstring)."""

    __slots__ = ("depth", "levels")

    def __init__(self, depth: int) -> None:
        """An empty tree with `16 ** depth` leaves (depth 1..MAX_DEPTH)."""
        assert 1 <= depth <= MAX_DEPTH
        self.depth = depth
        # levels[l][index] = [sum, count]; absent means empty.
        self.levels: list[dict[int, list[int]]] = [{} for _ in range(depth + 1)]

    def leaf_of(self, key: bytes) -> int:
        """The leaf index of `key` in this tree."""
        return leaf_of(key, self.depth)

    def add(self, leaf: int, digest: int) -> None:
        """Count one more record with `digest` under `leaf`."""
        shift = FANOUT_BITS * self.depth
        for level in self.levels:
            index = leaf >> shift
            node = level.get(index)
            if node is None:
                level[index] = [digest, 1]
            else:
                node[0] = (node[0] + digest) & MASK64
                node[1] += 1
            shift -= FANOUT_BITS

    def remove(self, leaf: int, digest: int) -> None:
        """Forget one record with `digest` under `leaf`."""
        shift = FANOUT_BITS * self.depth
        for level in self.levels:
            index = leaf >> shift
            node = level[index]
            node[1] -= 1
            if node[1] == 0:
                assert node[0] == digest, "tree sum out of step with the store"
                del level[index]
            else:
                node[0] = (node[0] - digest) & MASK64
            shift -= FANOUT_BITS

    def replace(self, leaf: int, old: int, new: int) -> None:
        """A record under `leaf` changed from digest `old` to `new`."""
        delta = (new - old) & MASK64
        shift = FANOUT_BITS * self.depth
        for level in self.levels:
            node = level[leaf >> shift]
            node[0] = (node[0] + delta) & MASK64
            shift -= FANOUT_BITS

    def node(self, level: int, index: int) -> tuple[int, int]:
        """(sum, count) of one node; (0, 0) when nothing is below it."""
        node = self.levels[level].get(index)
        return (0, 0) if node is None else (node[0], node[1])

    @property
    def count(self) -> int:
        """How many records the tree covers."""
        return self.node(0, 0)[1]

    def children(self, level: int, index: int) -> list[tuple[int, int, int]]:
        """(index, sum, count) of the non-empty children of a node."""
        below = self.levels[level + 1]
        out = []
        for child in range(index * FANOUT, index * FANOUT + FANOUT):
            node = below.get(child)
            if node is not None:
                out.append((child, node[0], node[1]))
        return out

    def leaf_range(self, level: int, index: int) -> tuple[int, int]:
        """The leaves under a node, as [first, end)."""
        shift = FANOUT_BITS * (self.depth - level)
        return index << shift, (index + 1) << shift
