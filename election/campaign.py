"""The campaign: the requests a candidate or controller has out, and their answers.

Theory of operation. A candidate first asks every voter whether it *would*
grant (`PreVote`, `Request.pre`; voter.py, "Pre-vote"), and with a majority
of would-grants asks for real. A candidate (and a controller renewing) asks every
voter of the request's configuration, and of the old one while a voter
change is carried, for a lease (`LeaseRequest(seq, epoch, ...)`; `seq`
tells this request's answers from stale ones). It has won once a majority
of each has granted. One request is in flight at a time (`Campaign.request`);
a new one replaces it.

Datagrams get lost and disks are slow, so a request is not simply sent and
waited for:

- **Resend.** A voter that has not answered by `_RESEND_AFTER` of the
  timeout is asked again, once: one lost datagram then costs a fraction of
  the timeout, not a failed campaign and a back-off.
- **Held grants.** A voter refusing because its grant to someone else ends
  within `_RETRY_HELD_S` is asked again right then (`retry_when_free`),
  instead of failing and duelling with the next candidate.
- **Late grants.** A campaign that nobody has refused waits past its timeout
  once (`wait_longer`), until just one renewal's time is left in the lease
  it would win: each grant waits for an fsync, and late grants are not
  refusals.
- **Renewals that won.** A won renewal is kept as `late` until the next
  one, and voters that have not answered it are asked again every
  `_RESEND_AFTER` of the timeout (`resend_late`), so that no voter's grant
  runs out under a live controller (docs/election.md, "Lost datagrams").

What winning, failing and refusals do to the node is `LeaseElection`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import msgspec

from shoal.election.config import LeaseConfig
from shoal.election.events import ElectionCounters
from shoal.election.messages import (
    REJECT_HELD,
    LeaseGrant,
    LeaseReject,
    LeaseRequest,
    PreVote,
    PreVoteGrant,
)
from shoal.election.view import Liveness, LivenessFn
from shoal.election.voters import VoterConfig

# A campaign re-asks a voter whose grant to someone else ends within this.
_RETRY_HELD_S = 0.5
# A request is sent again, once, to the voters that have not answered by this
# fraction of its timeout: one lost datagram (or answer) then costs a
# fraction of the timeout, not a failed campaign and a back-off.
_RESEND_AFTER = 0.5
_LIVE = Liveness.LIVE

SendFn = Callable[[str, object], None]
"""Send one message to a member by name (after every write made so far)."""


def _no_log() -> tuple[int, int]:
    return (0, 0)


class Request(msgspec.Struct):
    """One request for a lease, and what its voters answered."""

    seq: int
    epoch: int
    config: VoterConfig
    old: VoterConfig | None  # set when the request changes the voters
    sent_at: float
    deadline_at: float
    renewal: bool
    resend_at: float  # ask the voters that have not answered again, once
    extended: bool = False  # the deadline was moved once (`wait_longer`)
    pre: bool = False  # a pre-vote: would the voters grant? (nothing is granted)
    granted: set[str] = msgspec.field(default_factory=set)
    answered: set[str] = msgspec.field(default_factory=set)
    retry_at: dict[str, float] = msgspec.field(default_factory=dict)  # voter -> ask again

    def targets(self) -> list[str]:
        """The voters this request asks: of its configuration, and of the old one."""
        return sorted(set(self.config.voters) | set(self.old.voters if self.old else ()))

    def has_quorum(self) -> bool:
        """Whether a majority of the new and of the old voters granted."""
        granted = self.granted
        return self.config.has_quorum(granted) and (
            self.old is None or self.old.has_quorum(granted)
        )

    def message(self, candidate: str, log: tuple[int, int] = (0, 0),
                node_id: bytes = b"") -> LeaseRequest | PreVote:  # fmt: skip
        """The request as sent; `log` is the candidate's last log entry
        (epoch, index), for the voters' up-to-date check; `node_id` the
        candidate's, sent once the configurations have voter ids (all
        members read them then: voters.py, "Identity")."""
        if not self.config.ids and not (self.old is not None and self.old.ids):
            node_id = b""
        if self.pre:
            return PreVote(self.seq, self.epoch, candidate, self.config, *log, node_id)
        return LeaseRequest(self.seq, self.epoch, candidate, self.config, *log, node_id)

    def identified(self, voter: str, voter_id: bytes) -> bool:
        """Whether a grant from `voter` with `voter_id` is from the voter the
        configurations name (voters.py, "Identity"): a grant from a data
        directory other than the one named does not count."""
        for config in (self.config, self.old):
            if config is not None and voter in config.voters and \
                    not config.identifies(voter, voter_id):  # fmt: skip
                return False
        return True


class Campaign:
    """The request in flight, and the last won renewal (see module docstring)."""

    def __init__(self, name: str, config: LeaseConfig, counters: ElectionCounters,
                 seq: int, send_to: SendFn, liveness_of: LivenessFn | None) -> None:  # fmt: skip
        """Args:
        name: this node's name.
        config: timing (`request_timeout_s`, `holder_lease_s`).
        counters: the election's counters.
        seq: the first sequence number less one (random, so a restarted
            node's answers are not mistaken for its earlier run's).
        send_to: how a request reaches a voter.
        liveness_of: one member's liveness; voters gone from the view are
            not asked again for a won renewal.
        """
        self.name = name
        self.config = config
        self.counters = counters
        self.seq = seq
        self.request: Request | None = None
        # A renewal that won its majority, kept until the next one so that a
        # voter whose copy was lost is asked again (see `resend_late`).
        self.late: Request | None = None
        self._send_to = send_to
        # The last entry of this node's metadata log, (epoch, index), put in
        # every request (set by the node that composes the cores).
        self.log_position: Callable[[], tuple[int, int]] = _no_log
        self.node_id = b""  # this node's data directory's id (voters.py, "Identity")
        self._liveness_of = liveness_of

    def issue(self, now: float, epoch: int, config: VoterConfig, old: VoterConfig | None,
              renewal: bool, ask_self: Callable[[LeaseRequest | PreVote], None],
              pre: bool = False) -> None:  # fmt: skip
        """Send a new request (a pre-vote, with `pre`) to every voter it
        asks, in name order; this node's own vote is `ask_self`'s (in its
        place in that order, so the requests after it wait for the write it
        makes)."""
        assert not (pre and renewal)
        self.seq += 1
        self.late = None  # the new request asks every voter
        timeout = self.config.request_timeout_s
        req = Request(self.seq, epoch, config, old, now, now + timeout, renewal,
                      now + timeout * _RESEND_AFTER, pre=pre)  # fmt: skip
        self.request = req
        msg = req.message(self.name, self.log_position(), self.node_id)
        for voter in req.targets():
            if voter == self.name:
                ask_self(msg)
            else:
                self._send_to(voter, msg)

    def drop(self) -> list[Request]:
        """Forget the request in flight and the late renewal (leaving); the
        ones there were, whose grants the caller releases."""
        dropped = [r for r in (self.request, self.late) if r is not None]
        self.request = self.late = None
        return dropped

    # -- answers ----------------------------------------------------------------

    def record(self, msg: LeaseGrant | PreVoteGrant | LeaseReject) -> Request | None:
        """Note a voter's answer; the request in flight it answers, or None
        (an answer to the late renewal, or a stale one, counted)."""
        req = self.request
        if req is None or msg.seq != req.seq:
            late = self.late
            if late is not None and msg.seq == late.seq:
                late.answered.add(msg.voter)  # no need to ask it again
                return None
            self.counters.stale_messages += 1
            return None
        if not isinstance(msg, LeaseReject) and isinstance(msg, PreVoteGrant) != req.pre:
            self.counters.stale_messages += 1  # a pre-vote's answer to a real request, or back
            return None
        if isinstance(msg, LeaseGrant) and not req.identified(msg.voter, msg.voter_id):
            self.counters.identity_refusals += 1  # another data directory under its name
            return None
        req.answered.add(msg.voter)
        if not isinstance(msg, LeaseReject):
            req.granted.add(msg.voter)
        return req

    def retry_when_free(self, req: Request, msg: LeaseReject, now: float) -> float | None:
        """When the voter of `msg` is to be asked again, if its refusal is a
        grant to another that runs out in a moment (grants end up to
        2 * drift * lease apart); None when the refusal stands."""
        wait_s = msg.remaining_ms / 1000
        if msg.reason != REJECT_HELD or req.renewal or wait_s > _RETRY_HELD_S:
            return None
        retry_at = now + wait_s + 0.005
        req.retry_at[msg.voter] = retry_at
        req.deadline_at = max(req.deadline_at, retry_at + self.config.request_timeout_s)
        return retry_at

    def won(self, req: Request, now: float) -> None:
        """`req` has its majority: it is no longer in flight; a renewal is
        kept as `late` for the voters that have not answered."""
        if self.request is req:
            self.request = None
        if req.renewal:
            self.late = req
            if req.resend_at == float("inf"):  # already asked again once
                req.resend_at = now + self.config.request_timeout_s * _RESEND_AFTER

    def failed(self, req: Request) -> None:
        """`req` missed its majority: it is no longer in flight."""
        if self.request is req:
            self.request = None

    # -- timers -------------------------------------------------------------------

    def timed_out(self, req: Request, now: float) -> bool:
        """Whether `req` has failed by its deadline (after any extension)."""
        return now >= req.deadline_at and not self.wait_longer(req, now)

    def wait_longer(self, req: Request, now: float) -> bool:
        """Give an uncontested campaign more time, once: until there is just
        time left for one renewal within the lease it would win.

        Every grant waits for an fsync, the candidate's own and then the
        voter's: on a slow disk the answers come after `request_timeout_s`
        but are not refusals. Failing there would release the grants, back
        off and fail again the same way. Only a campaign that nobody has
        refused waits; the lease still counts from sending, so winning late
        is safe (it only shortens the first term)."""
        if req.renewal or req.pre or req.extended or not req.answered <= req.granted:
            return False
        until = req.sent_at + self.config.holder_lease_s - self.config.request_timeout_s
        if until <= now:
            return False
        req.extended = True
        req.deadline_at = until
        req.resend_at = now  # and ask the silent voters once more (`resend_due`)
        return True

    def resend_due(self, req: Request, now: float) -> None:
        """Ask again the voters of `req` whose time has come: once, all that
        have not answered; and each held voter whose grant has just ended."""
        msg = req.message(self.name, self.log_position(), self.node_id)
        if now >= req.resend_at:
            req.resend_at = float("inf")
            for voter in req.targets():
                if voter not in req.answered and voter not in req.retry_at:
                    self.counters.resends += 1
                    self._send_to(voter, msg)
        for voter, at in list(req.retry_at.items()):
            if now >= at:
                del req.retry_at[voter]
                req.answered.discard(voter)  # the resend covers the retry too
                resend_at = now + self.config.request_timeout_s * _RESEND_AFTER
                req.resend_at = min(req.resend_at, resend_at)
                self._send_to(voter, msg)

    def resend_late(self, now: float, renew_at: float) -> None:
        """Ask a voter that has not answered a won renewal again, every
        `request_timeout_s * _RESEND_AFTER`, until the next renewal (due at
        `renew_at`).

        A voter's grant runs `voter_grant_s` (2.04 s) from the request's
        arrival; with renewals 1 s apart a voter that misses one and is not
        asked again may see its grant end before the next one arrives, and
        then it stands: a new epoch for nothing. The simulator (5 nodes,
        20 runs of 600 s) counted new epochs with the
        controller alive: at 3 % loss 27 without these resends, 2 with the
        old 0.6 s renewals, 0 with them; at 10 % loss 421, 26 and 0. A lost
        copy costs one more datagram; a healthy cluster sends none. Voters
        the view reports dead or left are not asked again."""
        late = self.late
        if late is None or now < late.resend_at:
            return
        step = self.config.request_timeout_s * _RESEND_AFTER
        for voter in late.targets():
            if voter in late.answered or voter == self.name:
                continue
            if self._liveness_of is not None and self._gone(voter):
                continue
            self.counters.resends += 1
            self._send_to(voter, late.message(self.name, self.log_position(), self.node_id))
        late.resend_at = now + step
        if late.resend_at >= renew_at:
            self.late = None  # the next renewal asks everyone

    def _gone(self, voter: str) -> bool:
        assert self._liveness_of is not None
        liveness = self._liveness_of(voter)
        return liveness is not None and liveness is not _LIVE

    def deadlines(self) -> Iterable[float]:
        """Every time at which the campaign has something to do."""
        req = self.request
        if req is not None:
            yield req.deadline_at
            yield req.resend_at
            yield from req.retry_at.values()
        if self.late is not None:
            yield self.late.resend_at
