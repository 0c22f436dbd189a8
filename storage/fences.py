"""The fence rule, whole (issue 21): when a write under a controller epoch is refused.

A write may carry the controller epoch it is made under (its fence). Two
facts can refuse it, known at two places: the writing agent knows the
highest controller epoch it has seen (node/composition.py), and the replica
knows the epoch of the key's current version (storage/store.py). Both ask
`check` here, with what they know, so the rule and its one counter
(`fence_refused`) live in one place:

- the writer knows an epoch other than the fence: above it, the writer
  acts for a deposed controller; below it, the fence is not an epoch this
  agent has seen;
- the key holds a version under an epoch above the fence (any epoch, for
  an unfenced write, fence 0): the write would lose to it everywhere,
  since versions order by epoch first (storage/records.py).
"""

from __future__ import annotations

from shoal.kernel.counters import Counters
from shoal.kernel.errors import FenceRefused


def refusal(fence: int, known: int | None, stored: int | None) -> FenceRefused | None:
    """Why a write under `fence` is refused, or None when it may go on.

    Args:
        fence: the write's epoch (0: unfenced).
        known: the highest controller epoch the writer knows, when the
            caller knows it (None: not checked here).
        stored: the epoch of the key's current version, when the caller
            knows it (None: not checked here).
    """
    if known is not None and known != fence:
        if known > fence:
            why = (f"this agent knows controller epoch {known}, above the write's fence "
                   f"{fence}: the writer acts for a deposed controller")  # fmt: skip
        else:
            why = f"fence {fence} is above the highest controller epoch this agent knows ({known})"
        return FenceRefused(why, fence, known)
    if stored is not None and stored > fence:
        what = f"under fence {fence}" if fence else "without a fence"
        return FenceRefused(
            f"this key was written under controller epoch {stored}: a write {what} "
            "would lose to it (the writer acts for a deposed controller)",
            fence,
            stored,
        )
    return None


def check(counters: Counters, fence: int, known: int | None, stored: int | None) -> None:
    """Refuse a write (see `refusal`), counting it in `fence_refused`.

    Raises:
        FenceRefused: the rule refuses the write.
    """
    refused = refusal(fence, known, stored)
    if refused is not None:
        counters.bump("fence_refused")
        raise refused
