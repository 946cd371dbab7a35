"""Time of the query hider (`urls.redacted_query`, `urls.redacted`) and of a tool URL template's
check (`definitions.checked_url`) on hostile templates of 10 KB and 100 KB: the ratio of the two
shows whether the time grows with the length (about 10x) or faster (a quadratic pattern: 100x).

    nice -n 10 python bench/query_hider_time.py

Each figure is the median of 5 runs of one call, in milliseconds. A stored URL is at most
`urls.MAX_CHARS` (2,000) characters, so the 100 KB cases are far past what reaches the hider.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chalicelib.net import urls
from chalicelib.tools import definitions


def _cases(size: int) -> dict[str, str]:
    """Query strings of about `size` characters that stress a pattern's backtracking."""
    return {
        "open braces": "k=" + "{" * size,
        "nested {{x}}": "k=" + "{{x}}" * (size // 5),
        "a near placeholder": "k=" + ("{" + "a" * 64) * (size // 65),  # one past the name's 64
        "placeholders": "k=" + "{query}" * (size // 7),
        "encoded braces": "k=" + "%7Bquery%7D" * (size // 11),
        "pairs": "a=b&" * (size // 4),
        "equals": "k" + "=" * size,
        "percent runs": "k=" + "%" * size,
    }


def _median_ms(function: Callable[[str], object], query: str) -> float:
    times = []
    for _ in range(5):
        start = time.perf_counter()
        function(query)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _checked(url: str) -> None:
    try:
        definitions.checked_url(url)
    except ValueError:
        pass  # refused (too long, a stray brace): the time to refuse is what is measured


def main() -> None:
    print(f"{'case':<20} {'function':<14} {'10 KB ms':>9} {'100 KB ms':>10} {'ratio':>6}")
    small, large = _cases(10_000), _cases(100_000)
    for name in small:
        for label, function in (("redacted_query", lambda q: urls.redacted_query(q)),
                                ("redacted", lambda q: urls.redacted(f"https://h.example/p?{q}#{q}")),
                                ("checked_url", lambda q: _checked(f"https://h.example/p?{q}"))):
            a = _median_ms(function, small[name])
            b = _median_ms(function, large[name])
            print(f"{name:<20} {label:<14} {a:>9.2f} {b:>10.2f} {b / a if a else 0:>6.1f}")


if __name__ == "__main__":
    main()
