"""The voter: what a voter may promise, and what must be durable first.

Theory of operation (Gray & Cheriton's leases; the grant is a promise, the
epoch a fencing token as Kafka's `controller_epoch`).

A voter holds at most one *grant*: (holder, epoch, until_at). It answers a
`LeaseRequest(seq, epoch, candidate, config)` with a `LeaseGrant` or a
`LeaseReject`, by this rule, checked in this order (`Voter.vote`):

1. **Configuration.** The request's voter configuration must be ours. A newer
   one is adopted on sight (as Raft servers use the newest configuration in
   their log); an older one is refused (`REJECT_CONFIG`, carrying ours, so
   the candidate adopts it). A node that is not a voter of it refuses
   (`REJECT_NOT_VOTER`). **Identity**: a voter is its name and its data
   directory's id (voters.py); a node the configuration names with another
   id refuses (`REJECT_IDENTITY`), and so it does for a candidate the
   configuration names with an id other than the one its request carries.
   A data directory that was wiped comes back with a new id, and
   everything below rests on what the old one wrote (the epochs granted,
   the log): it must not answer for it. Its name is not enough: the new
   directory has granted nothing and logged nothing, so it would grant any
   epoch to any candidate, and a candidate that lacks committed entries
   could win with its grant (KRaft's KIP-853). The candidate checks the id
   in each grant too (campaign.py), and the controller replaces the old
   identity (ranking.py, `next_config`).
2. **Yield.** If the grant we hold is our own, for a campaign still in
   flight, and a better-ranked candidate asks for an epoch at least ours,
   our campaign is abandoned (its epoch was never claimed: no majority
   granted it), so the grant is released and the better candidate may take
   even that epoch. A request below our epoch (a late copy, or a replayed
   old one) is no reason to give up.
3. **One grant at a time.** An unexpired grant to another holder is a
   refusal (`REJECT_HELD`, with the holder and the time left, so a candidate
   asks again the moment it ends). A voter refusing a better-ranked
   candidate this way holds off standing itself until that grant has ended
   and the candidate has had time to ask again.
4. **Renewal.** The holder of the grant, asking for the same epoch with a
   request newer (`seq`) than the last one this voter accepted from it, gets
   it extended: nothing new is promised, nothing new is written. A request
   not newer is a copy (the network's, or a replayer's): it extends nothing
   (the last accepted is answered again, an older one not at all), so a dead
   holder's captured renewals cannot hold a grant beyond the lease its last
   real renewal asked for.
5. **Epochs only grow.** A new grant's epoch must be above every epoch this
   node ever granted (`REJECT_EPOCH` otherwise), save the yielded one of 2.
6. **The log.** (Checked before 5, for a new grant only: a renewal promises
   nothing new.) The candidate's metadata log must be at least as up to
   date as ours: its last entry's (epoch, index) not below ours
   (`REJECT_LOG`; Raft's election restriction, §5.4.1). Every committed
   entry is durable on a majority of the voters, every grant of a new
   epoch comes from a majority, and two majorities share a voter; that
   voter granted only to a candidate whose log holds what its own log held,
   so the controller of every epoch starts with every entry committed in
   the epochs before (Raft's Leader Completeness, with the grant of an
   epoch as the vote of a term: each voter grants each epoch at most once,
   by 5, written before the grant leaves). Entries are appended only by
   the controller of their epoch, and a voter that granted a higher epoch
   refuses appends of a lower one (metalog/), so a deposed controller
   commits nothing. A new controller commits an entry of its own epoch
   (a no-op) before it answers reads or writes; until then it may hold
   entries of earlier epochs it cannot yet call committed (Raft §5.4.2).

**Durability.** A new grant raises `granted_epoch` and writes it, with the
configuration, through `Output.persist` (`PersistElection`) *before* the grant
can leave: every answer is queued with `Outbox.send_durable`, riding on the
last write made (this one) or on a barrier after earlier ones. An adopted
configuration is written the same way. A crash therefore never forgets an
epoch it granted, and a voter that restarts grants nothing for
`voter_grant_s` (`Voter.restart`): grants themselves are not written, so it
cannot know whether one is still running.

**How long a grant binds.** `lease_s * (1 + drift_ratio_max)` on the voter's
clock from when the request *arrived*; the holder counts its lease
`lease_s * (1 - drift_ratio_max)` from when it *sent* the request. With
every clock within `drift_ratio_max` of real time the grant outlasts the
lease, and any two majorities share a voter, so no two leases overlap.

**Release.** The holder's `LeaseRelease(epoch)` ends the grant at once
(graceful leave, or a campaign that missed its majority giving back what
it got).

**Pre-vote** (Raft's, Ongaro's thesis section 9.6). A candidate first sends
`PreVote(seq, epoch, ...)`, and campaigns for real only when a majority
would grant. `Voter.pre_vote` applies steps 1, 3 and 5 of the rule above to
the request as if it were real, and changes nothing: no configuration is
adopted, no campaign yielded, no epoch raised, seen or written, no grant
made. So the safety argument is untouched (a pre-vote promises nothing and
nothing relies on it), and a member cut off from a quorum, or one that
restarted and does not know the controller, asks again and again without
raising an epoch: a voter holding a live controller's grant refuses
(`REJECT_HELD`), and that grant *is* "recently heard from a leader" in
Raft's terms, kept alive by every renewal.

**Who holds an epoch** (`Voter.vouch`). A voter may forget *to whom* it
granted its highest epoch e (a restart keeps only e), or may have granted e
to a candidate that lost it. A notice of our configuration from X for
epoch e tells it that X won e, and X is the only node that can have:
every voter grants a given epoch as a new grant once (step 5, made durable
first) and any two majorities share a voter. If the voter's grant of e is
then to nobody it knows (after a restart), has run out, or is gone, it
takes X as that grant's holder, with the same `until_at`: X's renewals of e
are then renewals (step 4) instead of refusals that would cost the
controller a new epoch, and nothing is promised that was not bound
already. The grant's `seq` is set just below the notice's, so only
X's renewals from now on extend it, never copies of old ones. An epoch
granted under a lineage this node has since left is not vouched for: the
merged controller must still move above it.

What the rule needs to know of the rest of the node (the configuration,
the ranking, the campaign in flight, the log's position) it reads from an
`ElectionView`; what it decides beyond its own grant (adopting a
configuration, yielding our campaign, holding off, an epoch seen) it
records as decisions (decisions.py) for `LeaseElection` to carry out. Two
must be carried out before the rule can go on (adopting a newer
configuration, and yielding our campaign): `vote` returns them, and is
asked again once they are done.
"""

from __future__ import annotations

import msgspec

from shoal.election.config import LeaseConfig
from shoal.election.decisions import (
    Adopt,
    Decisions,
    ElectionView,
    Granted,
    HoldOff,
    SawEpoch,
    YieldCampaign,
)
from shoal.election.events import ElectionCounters, PersistElection
from shoal.election.messages import (
    REJECT_CONFIG,
    REJECT_EPOCH,
    REJECT_HELD,
    REJECT_IDENTITY,
    REJECT_LOG,
    REJECT_NOT_VOTER,
    LeaseGrant,
    LeaseReject,
    LeaseRequest,
    PreVote,
    PreVoteGrant,
)
from shoal.kernel.outbox import Outbox


class Grant(msgspec.Struct):
    """The one lease this voter has promised: to `holder`, for `epoch`,
    binding until `until_at` on this node's clock, by request `seq` (or a
    later renewal)."""

    holder: str
    epoch: int
    until_at: float
    seq: int = 0


class Voter:
    """The grant rule of one node and the state it rests on."""

    # False only in the test that shows the metadata log's checker catches
    # a vote without the up-to-date check (tests/sim/test_meta.py).
    check_log = True

    def __init__(self, name: str, config: LeaseConfig, out: Outbox, counters: ElectionCounters,
                 granted_epoch: int, view: ElectionView, decisions: Decisions,
                 node_id: bytes = b"") -> None:  # fmt: skip
        """Args:
        name: this node's name.
        node_id: this node's data directory's id (voters.py, "Identity").
        config: timing (`voter_grant_s`, `request_timeout_s`).
        out: the election's outbox (writes, and answers that wait for them).
        counters: the election's counters.
        granted_epoch: the highest epoch this node ever granted (persisted).
        view: what the rule reads of the rest of the node.
        decisions: where the rule records what the node is to do.
        """
        self.name = name
        self.node_id = node_id
        self.config = config
        self.out = out
        self.counters = counters
        self.granted_epoch = granted_epoch
        self.grant: Grant | None = None
        # Epochs up to this were granted under a lineage we left (a merge):
        # a notice of ours says nothing of who holds them (`vouch`).
        self.foreign_epoch = 0
        self._view = view
        self._decide = decisions.append

    def restart(self, now: float) -> None:
        """After a restart, bind as if a grant of the persisted epoch had
        just been made: one may be running, and nobody may be promised
        anything against it until it would have expired."""
        if self.granted_epoch > 0:
            self.grant = Grant("", self.granted_epoch, now + self.config.voter_grant_s)

    def vote(self, msg: LeaseRequest, now: float, yielded: int | None = None,
             ) -> LeaseGrant | LeaseReject | Adopt | YieldCampaign | None:  # fmt: skip
        """The rule (module docstring, steps 1-6); persists before granting.
        None: a copy of a renewal already accepted (no answer). `Adopt` or
        `YieldCampaign`: carry that out first, then ask again (with the
        epoch given up as `yielded`)."""
        view = self._view
        mine = view.voters
        if mine != msg.config:  # 1
            if msg.config.supersedes(mine):
                return Adopt(msg.config)
            return self.reject(msg, REJECT_CONFIG, now)
        refusal = self.identity_refusal(msg)
        if refusal is not None:
            return self.reject(msg, refusal, now)
        grant = self.grant
        if grant is not None and grant.holder == self.name and msg.epoch >= grant.epoch:  # 2
            if yielded is None:
                return YieldCampaign(msg.candidate)
        yielded_epoch = yielded or 0
        if grant is not None and grant.holder != msg.candidate and now < grant.until_at:  # 3
            if grant.holder != self.name and view.ranks_above_me(msg.candidate):
                # A better candidate will ask again when this grant ends: do
                # not stand against it meanwhile.
                self._decide(HoldOff(grant.until_at + 2 * self.config.request_timeout_s))
            return self.reject(msg, REJECT_HELD, now)
        self._decide(SawEpoch(msg.epoch))
        if grant is not None and grant.holder == msg.candidate and grant.epoch == msg.epoch:  # 4
            if msg.seq <= grant.seq:
                # A copy. The one accepted is answered again (its answer may
                # have been lost: the candidate re-sends before giving up),
                # but nothing is extended; older ones get nothing.
                self.counters.stale_messages += 1
                if msg.seq != grant.seq:
                    return None
                return LeaseGrant(msg.seq, msg.epoch, self.name, self._id_for(msg))
            grant.seq = msg.seq
            grant.until_at = now + self.config.voter_grant_s
            return LeaseGrant(msg.seq, msg.epoch, self.name, self._id_for(msg))
        if Voter.check_log and (msg.log_epoch, msg.log_index) < view.log_position():  # 6
            self.counters.log_refusals += 1
            return self.reject(msg, REJECT_LOG, now)
        if msg.epoch <= self.granted_epoch and not (msg.epoch == yielded_epoch > 0):  # 5
            # (The epoch of a campaign we just abandoned was never claimed and
            # never will be: the candidate we yielded to may take it.)
            return self.reject(msg, REJECT_EPOCH, now)
        self.granted_epoch = msg.epoch
        self.grant = Grant(msg.candidate, msg.epoch, now + self.config.voter_grant_s, msg.seq)
        self.out.persist(PersistElection(self.granted_epoch, mine))
        self.counters.grants += 1
        self._decide(Granted())
        return LeaseGrant(msg.seq, msg.epoch, self.name, self._id_for(msg))

    def pre_vote(self, msg: PreVote, now: float) -> PreVoteGrant | LeaseReject:
        """Whether `vote` would grant `msg` now, changing nothing (module
        docstring, "Pre-vote")."""
        self.counters.pre_votes_answered += 1
        view = self._view
        mine = view.voters
        if mine != msg.config and not msg.config.supersedes(mine):  # 1
            return self.reject(msg, REJECT_CONFIG, now)
        refusal = self.identity_refusal(msg)
        if refusal is not None:
            return self.reject(msg, refusal, now)
        grant = self.grant
        if (grant is not None and grant.holder == self.name and msg.epoch >= grant.epoch
                and view.would_yield(msg.candidate)):  # fmt: skip
            grant = None  # 2: ours would be given up for this candidate
        if grant is not None and grant.holder != msg.candidate and now < grant.until_at:  # 3
            if grant.holder != self.name and view.ranks_above_me(msg.candidate):
                self._decide(HoldOff(grant.until_at + 2 * self.config.request_timeout_s))
            return self.reject(msg, REJECT_HELD, now)
        if Voter.check_log and (msg.log_epoch, msg.log_index) < view.log_position():  # 6
            return self.reject(msg, REJECT_LOG, now)
        if msg.epoch <= self.granted_epoch:  # 5
            return self.reject(msg, REJECT_EPOCH, now)
        return PreVoteGrant(msg.seq, msg.epoch, self.name)

    def identity_refusal(self, msg: LeaseRequest | PreVote) -> int | None:
        """Why `msg`'s configuration does not let this node answer for
        itself (module docstring, step 1), or None: it is not a voter of it
        (`REJECT_NOT_VOTER`), or it names this node, or the candidate, with
        another data directory's id (`REJECT_IDENTITY`)."""
        config = msg.config
        if self.name not in config.voters:
            return REJECT_NOT_VOTER
        if not config.identifies(self.name, self.node_id):
            self.counters.identity_refusals += 1
            return REJECT_IDENTITY
        if msg.candidate_id and msg.candidate in config.voters and \
                not config.identifies(msg.candidate, msg.candidate_id):  # fmt: skip
            self.counters.identity_refusals += 1
            return REJECT_IDENTITY
        return None

    def vouch(self, holder: str, epoch: int, seq: int, now: float) -> None:
        """A notice of our configuration says `holder` won `epoch` (as of its
        request `seq`): make it the holder of our grant of that epoch, if we
        do not know that grant's holder or it has ended (module docstring,
        "Who holds an epoch")."""
        if epoch != self.granted_epoch or epoch <= self.foreign_epoch or holder == self.name:
            return
        grant = self.grant
        if grant is None:
            self.grant = Grant(holder, epoch, now, max(seq - 1, 0))
        elif (
            grant.epoch == epoch
            and grant.holder != holder
            and (grant.holder == "" or now >= grant.until_at)
        ):
            grant.holder, grant.seq = holder, max(seq - 1, 0)

    def reject(self, msg: LeaseRequest | PreVote, reason: int, now: float) -> LeaseReject:
        """A refusal of `msg`, with what the candidate needs to do better:
        the grant we hold and its time left, our highest epoch, and our
        configuration."""
        grant = self.grant
        holder, remaining_ms = "", 0
        if grant is not None and now < grant.until_at:
            holder, remaining_ms = grant.holder, int((grant.until_at - now) * 1000)
        return LeaseReject(msg.seq, self.name, reason, self.granted_epoch, holder, remaining_ms,
                           self._view.voters, self._id_for(msg))  # fmt: skip

    def _id_for(self, msg: LeaseRequest | PreVote) -> bytes:
        """Our node_id for an answer to `msg`: only to a candidate that sent
        its own (it reads the answer's new shape; messages.py)."""
        return self.node_id if msg.candidate_id else b""

    def release(self, holder: str, epoch: int) -> bool:
        """End the grant to `holder` for `epoch`, if that is the one held;
        whether it was."""
        grant = self.grant
        if grant is not None and grant.holder == holder and grant.epoch == epoch:
            self.grant = None
            return True
        return False
