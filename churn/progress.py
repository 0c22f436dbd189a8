"""One progress line on stderr while the job runs (rewritten in place on a
terminal, one line per step otherwise)."""

from __future__ import annotations

import sys
import time


class Steps:
    """`next(text)` starts a step; `done(text)` ends the line."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.k = 0
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()

    def _line(self, text: str) -> str:
        return f"churn [{self.k}/{self.total}] {time.monotonic() - self.started:6.1f}s  {text}"

    def next(self, text: str) -> None:
        """Report that a step has started."""
        self.k = min(self.k + 1, self.total)
        if self.tty:
            sys.stderr.write("\r\033[K" + self._line(text))
        else:
            sys.stderr.write(self._line(text) + "\n")
        sys.stderr.flush()

    def done(self, text: str) -> None:
        """End the progress line with a final message."""
        self.k = self.total
        end = "\r\033[K" if self.tty else ""
        sys.stderr.write(end + self._line(text) + "\n")
        sys.stderr.flush()
