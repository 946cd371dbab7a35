"""What the garbage collector costs the suite: a pytest plugin that times every `gc.collect()`
made while the tests run (the app makes one at each index build or eviction) and prints, at the
end, how many there were, their seconds, the process's max RSS and how many objects are frozen.

    nice -n 5 .venv/bin/python -m pytest tests/test_costs.py tests/test_usage.py -q -s -p bench.suite_gc

Run it without `-n` (one process): each worker would print its own line. Every call is counted,
tests/conftest.py's collection after each test included (since it freezes what is left, the
app's own collections then scan only what the test made)."""

from __future__ import annotations

import gc
import resource
import time
from typing import Any

_real_collect = gc.collect
_made = {"calls": 0, "seconds": 0.0}


def _timed_collect(*args: Any, **named: Any) -> int:
    started = time.perf_counter()
    try:
        return _real_collect(*args, **named)
    finally:
        _made["calls"] += 1
        _made["seconds"] += time.perf_counter() - started


gc.collect = _timed_collect


def pytest_sessionfinish() -> None:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\ngc.collect: {_made['calls']} calls, {_made['seconds']:.1f} s; max RSS {rss:.0f} MB; "
          f"{gc.get_freeze_count()} objects frozen")
