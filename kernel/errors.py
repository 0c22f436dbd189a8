"""shoal's errors, one hierarchy. What the CLI does with each:

    ShoalError                 one line on stderr, exit 1
    ├── ConfigError            a setting is wrong: names it; exit 2
    ├── DataDirError           the data directory is unusable or in use; exit 2
    ├── ApiError               an agent's API could not be reached or said no; exit 1
    ├── VersionError           the cluster needs a newer build than this one; exit 3
    ├── WriteRefused           a write this agent cannot stamp rightly (its clock); API 503
    └── FenceRefused           a write under a deposed controller's epoch; API 409

Remote input (datagrams, frames, API bodies) never raises these: it is
counted and dropped, or answered with a 4xx.
"""

from __future__ import annotations


class ShoalError(Exception):
    """Base of every error shoal reports to a user."""

    exit_code = 1


class ConfigError(ShoalError):
    """A configuration value is missing, malformed or inconsistent."""

    exit_code = 2


class DataDirError(ShoalError):
    """The data directory cannot be created, read, written, or is locked."""

    exit_code = 2


class VersionError(ShoalError):
    """The cluster runs a feature level this build does not support: the
    agent stops rather than misread what the others send (kernel/versions.py)."""

    exit_code = 3


class ApiError(ShoalError):
    """A client command could not talk to the agent, or the agent refused."""


class WriteRefused(ShoalError):
    """A write that would be stamped wrongly: this agent's clock is too far
    from its peers', or a newer version of the key, stamped ahead of this
    clock, is waiting to be accepted. Nothing was written."""


class FenceRefused(ShoalError):
    """A fenced write (or an unfenced one to a fenced key) that a higher
    controller epoch has overtaken: the writer acts for a deposed
    controller. Nothing was written.

    Attributes:
        fence: the epoch the write was made under (0: none).
        epoch: the higher epoch that refuses it.
    """

    def __init__(self, message: str, fence: int, epoch: int) -> None:
        super().__init__(message)
        self.fence = fence
        self.epoch = epoch
