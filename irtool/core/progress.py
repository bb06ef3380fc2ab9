"""A one-line progress report for builds that take a while, on a terminal only.

`irtool.build` and the tools report their stage (lowering, generating code, compiling k of n
modules) on stderr when it is a TTY and the build has run for more than `DELAY` seconds, the
line rewritten in place and cleared at the end; piped or redirected output never sees it. The
line is only written at stage changes and finished compilations: no thread (a build forks its
compile workers, and forking a process that runs threads is unsafe).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

DELAY = 1.0
CLEAR = "\r\x1b[K"


class Progress:
    def __init__(self, stream: TextIO | None = None, delay: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty is not None and isatty())
        self.delay, self.clock = DELAY if delay is None else delay, clock
        self.started = clock()
        self.shown = False
        self.stage, self.done, self.total = "", 0, 0

    def start(self, stage: str, total: int = 0) -> None:
        """A new stage, of `total` steps when it counts them."""
        self.stage, self.done, self.total = stage, 0, total
        self._show()

    def advance(self) -> None:
        self.done += 1
        self._show()

    def close(self) -> None:
        """Clears the line (when one was written)."""
        if self.shown:
            self.stream.write(CLEAR)
            self.stream.flush()
            self.shown = False

    def _show(self) -> None:
        elapsed = self.clock() - self.started
        if not self.enabled or elapsed < self.delay:
            return
        count = f" {self.done}/{self.total}" if self.total else ""
        self.stream.write(f"{CLEAR}irtool: {self.stage}{count} ({elapsed:.1f} s)")
        self.stream.flush()
        self.shown = True
