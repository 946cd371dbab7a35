"""What the local stack says while it starts: each step as it begins, and a line at least every
8 s while one lasts (a first start loads two models and seeds the demo), so it never looks stuck."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

EVERY_SECONDS = 8.0  # under 10 s with room for a busy machine's scheduling


class Progress:
    """Steps of a start, told as they begin; a daemon thread repeats the current one every
    `every` seconds until `done()`."""

    def __init__(self, say: Callable[[str], None] = lambda line: print(line, flush=True),
                 every: float = EVERY_SECONDS) -> None:
        self._say, self._every = say, every
        self._step, self._since = "", time.monotonic()
        self._began = self._last = self._since  # _last: when a line was last said
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def step(self, what: str) -> None:
        """Say that `what` begins (and keep saying so while it lasts)."""
        with self._lock:
            self._step, self._since = what, time.monotonic()
            self._last = self._since
            self._say(f"  {what}")
        if self._thread is None:
            self._thread = threading.Thread(target=self._tick, daemon=True, name="start-progress")
            self._thread.start()

    def done(self) -> float:
        """Stop telling; the seconds the start took."""
        with self._lock:  # no line after this one returns
            self._done.set()
        return time.monotonic() - self._began

    def _tick(self) -> None:
        """Say the current step again once `every` seconds passed without a line."""
        while not self._done.wait(max(0.0, self._last + self._every - time.monotonic())):
            with self._lock:
                now = time.monotonic()
                if self._done.is_set() or now - self._last < self._every:
                    continue
                self._last = now
                self._say(f"  ... still {self._step} ({now - self._since:.0f} s)")
