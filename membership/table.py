"""MemberTable: the one place where SWIM's state rules are applied.

Theory of operation (SWIM §4.2, memberlist state.go aliveNode/suspectNode/
deadNode). A member is ALIVE, SUSPECT, DEAD or LEFT at an incarnation that
only the member itself raises. Precedence between two claims about the same
member:

    Alive(i)   overrides Alive(j), Suspect(j), Dead(j), Left(j)  when i > j
    Suspect(i) overrides Alive(j)                                when i >= j
    Dead(i)    overrides Alive(j), Suspect(j)                    when i >= j
    Left(i)    overrides Alive(j), Suspect(j), Dead(j)           when i >= j

Identity: a member is a (name, node id) pair. An Alive with a known name and
another node id is a *name conflict* while the known member is alive or
suspect (refused); once the known member is dead or has left, the newcomer
replaces it (a machine reinstalled, or a data directory lost).

Ghosts: a reaped member leaves a tombstone (node id, incarnation) for as long
as it was kept before reaping, and an Alive at or below that incarnation is
refused; so a stale full-state sync cannot bring a removed node back, while
the real node, which always refutes with a higher incarnation, can.

Methods return a `Transition` label, or an `Ignored` reason for the caller's
counters. The table never decides *when* (timers live in SwimNode).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Iterable
from typing import Final

from shoal.kernel.contract import Address
from shoal.kernel.versions import incompatible
from shoal.membership.member import Member, MemberState, NodeIdentity

ALIVE, SUSPECT, DEAD, LEFT = (
    MemberState.ALIVE,
    MemberState.SUSPECT,
    MemberState.DEAD,
    MemberState.LEFT,
)
_LIVE = (ALIVE, SUSPECT)

# Alive rows shared between views: id(identity) -> the last alive row built
# for it (the row holds the identity, so its id is not reused while cached).
# Rows are values, so whose view holds which object changes nothing; shared,
# the rows a mass join reads 17.8 M times stay in the cache instead of a
# million private copies (1,000 simulated nodes: see `alive_row`).
_ALIVE_ROWS: Final[dict[int, Member]] = {}
_ALIVE_ROWS_MAX: Final = 65536


def alive_row(ident: NodeIdentity, inc: int) -> Member:
    """The row `Member(ident, inc, ALIVE)`, shared with every view that holds
    the same one. Measured (`shoal simulate --nodes 1000 --duration 60 --seed
    1 --crash 2`, compiled, run beside d84a340): CPU 0.95x; the old-news test
    of each alive claim reads a row that is in the cache."""
    row = _ALIVE_ROWS.get(id(ident))
    if row is not None and row.ident is ident and row.incarnation == inc:
        return row
    if len(_ALIVE_ROWS) >= _ALIVE_ROWS_MAX:
        _ALIVE_ROWS.clear()
    row = _ALIVE_ROWS[id(ident)] = Member(ident, inc, ALIVE)
    return row


class Transition(enum.Enum):
    """What an applied claim did to the view."""

    JOINED = "joined"  # new member, or back from dead/left
    RENEWED = "renewed"  # higher incarnation, nothing visible changed
    UPDATED = "updated"  # address or tags changed
    REFUTED = "refuted"  # suspect -> alive
    SUSPECTED = "suspected"
    DIED = "died"
    LEFT = "left"


class Ignored(enum.Enum):
    """Why a claim changed nothing (each is a counter)."""

    STALE = "stale"
    UNKNOWN = "unknown"
    NAME_CONFLICT = "name_conflict"
    GHOST = "ghost"
    ALREADY = "already"
    INCOMPATIBLE = "incompatible"  # versions that do not overlap ours


def _sample(
    items: list[str],
    has: Callable[[str], bool],
    rng: random.Random,
    k: int,
    exclude: tuple[str, ...],
) -> list[str]:
    """Up to `k` distinct random names of `items`, none of them in `exclude`."""
    n = len(items)
    available = n - sum(1 for e in exclude if has(e))
    k = min(k, available)
    if k <= 0:
        return []
    if k * 3 > n:  # dense: shuffle a filtered copy
        pool = [x for x in items if x not in exclude]
        return rng.sample(pool, k)
    chosen: list[str] = []
    while len(chosen) < k:  # sparse: rejection sampling, O(k) expected
        name = items[rng.randrange(n)]
        if name not in exclude and name not in chosen:
            chosen.append(name)
    return chosen


class IndexedSet:
    """Names with O(1) add, remove and uniform random sampling."""

    __slots__ = ("_items", "_pos")

    def __init__(self) -> None:
        self._items: list[str] = []
        self._pos: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._pos

    def add(self, name: str) -> None:
        """Add `name` if absent."""
        if name not in self._pos:
            self._pos[name] = len(self._items)
            self._items.append(name)

    def discard(self, name: str) -> None:
        """Remove `name` if present (swap with the last item)."""
        i = self._pos.pop(name, None)
        if i is None:
            return
        last = self._items.pop()
        if i < len(self._items):
            self._items[i] = last
            self._pos[last] = i

    def sample(self, rng: random.Random, k: int, exclude: tuple[str, ...] = ()) -> list[str]:
        """Up to `k` distinct random names, none of them in `exclude`."""
        return _sample(self._items, self._pos.__contains__, rng, k, exclude)

    def items(self) -> list[str]:
        """The names, in no meaningful order (but deterministic)."""
        return self._items


class LiveList:
    """The names of the live (alive or suspect) members other than self.

    The same interface as `IndexedSet` in one pointer per name instead of
    about 80 bytes: membership is read from the member rows.
    A removal scans the list at C speed (tens of µs at 10,000 members) and
    happens only when a member dies or leaves. In the simulator, 10,000
    nodes hold 10^8 view entries, and an `IndexedSet`'s position dict and
    int objects cost about 70 B of each: 7 GB.
    """

    __slots__ = ("_items", "_members", "_self")

    def __init__(self, members: dict[str, Member], self_name: str) -> None:
        self._items: list[str] = []
        self._members = members
        self._self = self_name

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        m = self._members.get(name)  # type: ignore[call-overload]
        return m is not None and m.state in _LIVE and name != self._self

    def append(self, name: str) -> None:
        """Add a name that was not live (the table knows which)."""
        self._items.append(name)

    def extend(self, names: Iterable[str]) -> None:
        """Add names that were not live."""
        self._items.extend(names)

    def remove(self, name: str) -> None:
        """Remove a name that was live."""
        self._items.remove(name)

    def sample(self, rng: random.Random, k: int, exclude: tuple[str, ...] = ()) -> list[str]:
        """Up to `k` distinct random names, none of them in `exclude`."""
        return _sample(self._items, self.__contains__, rng, k, exclude)

    def items(self) -> list[str]:
        """The names, in the order they became live (deterministic)."""
        return self._items


class MemberTable:
    """One node's view of the cluster, itself included."""

    def __init__(self, self_ident: NodeIdentity, incarnation: int, now: float) -> None:
        self.self_name = self_ident.name
        # Read-only for everyone but this class; exposed for the hot path.
        self.members: dict[str, Member] = {}
        self._tombstones: dict[str, tuple[bytes, int]] = {}
        # When each dead or left member went down (its reap and its gossip
        # expiry are checked against it); rows do not carry times, so that
        # views can share them.
        self._down_at: dict[str, float] = {}
        # Members other than self that are alive or suspect.
        self.live = LiveList(self.members, self.self_name)
        # Where each suspect or dead member listens -> (its name, since when
        # it is lost, not alive): tested per datagram (SwimNode.heard_from).
        self.lost: dict[Address, tuple[str, float]] = {}
        # Bumped on every change of any row: other cores compare it to know
        # when the view changed, without subscribing to events.
        self.version = 0
        self.members[self.self_name] = Member(self_ident, incarnation, ALIVE)
        self.versions = self_ident.versions

    # -- reading -------------------------------------------------------------

    def get(self, name: str) -> Member | None:
        """The member called `name`, if known."""
        return self.members.get(name)

    def addr_of(self, name: str) -> Address:
        """Where the known member `name` listens (it must be known)."""
        m = self.members.get(name)
        assert m is not None
        return m.ident.addr

    def name_of(self, node_id: bytes) -> str | None:
        """The name of the member with `node_id`, if known (a scan: for the
        API, not the protocol)."""
        for m in self.members.values():
            if m.ident.node_id == node_id:
                return m.ident.name
        return None

    @property
    def me(self) -> Member:
        """This node's own row."""
        return self.members[self.self_name]

    def __len__(self) -> int:
        return len(self.members)

    def all(self) -> list[Member]:
        """Every member, self included, in the order they became known."""
        return list(self.members.values())

    def down_at(self, name: str) -> float | None:
        """When the dead or left member `name` went down (None: it is not down)."""
        return self._down_at.get(name)

    def num_live(self) -> int:
        """Alive or suspect members, self included when not leaving."""
        return len(self.live) + (1 if self.me.state in (ALIVE, SUSPECT) else 0)

    # -- applying claims -----------------------------------------------------

    def apply_alive(self, ident: NodeIdentity, inc: int, now: float) -> Transition | Ignored:
        """Apply `Alive(inc, ident)` about another member."""
        if ident.versions is not self.versions and incompatible(self.versions, ident.versions):
            return Ignored.INCOMPATIBLE  # memberlist's verifyProtocol: never merged
        m = self.members.get(ident.name)
        if m is None:
            tomb = self._tombstones.get(ident.name)
            if tomb is not None and tomb[0] == ident.node_id and inc <= tomb[1]:
                return Ignored.GHOST
            self._tombstones.pop(ident.name, None)
            self.members[ident.name] = row = alive_row(ident, inc)
            if self.lost:
                self._track_lost(row, row, now)
            self.live.append(ident.name)
            self.version += 1
            return Transition.JOINED
        if m.ident.node_id != ident.node_id:
            if m.state in (ALIVE, SUSPECT):
                return Ignored.NAME_CONFLICT
            self._set(m, alive_row(ident, inc), now)
            return Transition.JOINED
        if inc <= m.incarnation:
            return Ignored.STALE
        self._set(m, alive_row(ident, inc), now)
        previous = m.state
        if previous in (DEAD, LEFT):
            return Transition.JOINED
        if previous is SUSPECT:
            return Transition.REFUTED
        return Transition.UPDATED if m.ident != ident else Transition.RENEWED

    def adopt(self, rows: dict[str, Member]) -> None:
        """Start knowing the alive members `rows` (name -> row; this node's
        own name, if there, is skipped), without an event: the simulator's
        formed start, which gives every view the same rows. Only into a view
        that knows nobody else yet. Dict and list copies at C speed: 10^8
        rows at 10,000 nodes took 24 % of a 35-s run one by one.
        """
        assert len(self.members) == 1, "adopt only into an empty view"
        me = self.members[self.self_name]
        self.members.update(rows)
        self.members[self.self_name] = me
        self.live.extend(rows)
        if self.self_name in rows:
            self.live.remove(self.self_name)
        self.version += 1

    def apply_suspect(self, name: str, inc: int, now: float) -> Transition | Ignored:
        """Apply `Suspect(inc, name)` about another member."""
        m = self.members.get(name)
        if m is None:
            return Ignored.UNKNOWN
        if inc < m.incarnation or m.state in (DEAD, LEFT):
            return Ignored.STALE
        if m.state is SUSPECT and inc == m.incarnation:
            return Ignored.ALREADY
        # A suspicion at a higher incarnation than the one we hold is a new
        # one: the member refuted ours (we missed it) and was suspected again.
        # Counted as a confirmation of ours instead, it declared a live member
        # dead at once whenever ours had outlived its timeout (simulator: 100
        # nodes, 10 % loss, 79 observers reported one live member failed).
        self._set(m, Member(m.ident, inc, SUSPECT), now)
        return Transition.SUSPECTED

    def apply_dead(self, name: str, inc: int, now: float, left: bool) -> Transition | Ignored:
        """Apply `Dead(inc, name)` or, with `left`, `Leave(inc, name)`."""
        m = self.members.get(name)
        if m is None:
            return Ignored.UNKNOWN
        if inc < m.incarnation:
            return Ignored.STALE
        if left:
            if m.state is LEFT:
                return Ignored.ALREADY
            self._set(m, Member(m.ident, inc, LEFT), now)
            return Transition.LEFT
        if m.state in (DEAD, LEFT):
            return Ignored.ALREADY
        self._set(m, Member(m.ident, inc, DEAD), now)
        return Transition.DIED

    def set_self(self, state: MemberState, inc: int, now: float, ident: NodeIdentity) -> None:
        """Record this node's own state (only SwimNode decides it)."""
        row = alive_row(ident, inc) if state is ALIVE else Member(ident, inc, state)
        self._set(self.me, row, now)

    def reap(self, name: str) -> Member | None:
        """Forget a dead or left member, keeping a tombstone against ghosts."""
        m = self.members.get(name)
        if m is None or m.state not in (DEAD, LEFT) or name == self.self_name:
            return None
        del self.members[name]
        self._down_at.pop(name, None)
        entry = self.lost.get(m.ident.addr)
        if entry is not None and entry[0] == name:
            del self.lost[m.ident.addr]
        self.version += 1
        self._tombstones[name] = (m.ident.node_id, m.incarnation)
        return m

    def forget_tombstone(self, name: str, node_id: bytes) -> None:
        """Drop a ghost guard once it has been kept long enough."""
        tomb = self._tombstones.get(name)
        if tomb is not None and tomb[0] == node_id and name not in self.members:
            del self._tombstones[name]

    def _track_lost(self, old: Member, new: Member, now: float) -> None:
        """Keep `lost` in step with a changed row: a suspect or dead member
        is lost since it was last alive; a live one at an address takes it
        from a lost one (a reinstalled machine, say: not a heal sign)."""
        lost = self.lost
        name = new.ident.name
        since = now
        entry = lost.get(old.ident.addr)
        if entry is not None and entry[0] == name:
            since = entry[1]
            del lost[old.ident.addr]
        if new.state is SUSPECT or new.state is DEAD:
            lost[new.ident.addr] = (name, since)
        elif new.state is ALIVE:
            lost.pop(new.ident.addr, None)

    def _set(self, old: Member, new: Member, now: float) -> None:
        """Replace the row `old` with `new` (same name) at `now`."""
        self.version += 1
        name = new.ident.name
        self.members[name] = new
        state = new.state
        if state is DEAD or state is LEFT:
            self._down_at[name] = now
        else:
            self._down_at.pop(name, None)
        if self.lost or state is SUSPECT or state is DEAD:
            self._track_lost(old, new, now)
        was_live = old.state in _LIVE
        if name == self.self_name or was_live == (state in _LIVE):
            return
        if was_live:
            self.live.remove(name)
        else:
            self.live.append(name)
