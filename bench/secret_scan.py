"""What finding credential-shaped text costs (`sensitive.CREDENTIALS`): on a header value a tool's
definition sets (a request shape or a preview reads every literal header whose name says nothing)
and on an exception's message (every failure's log line), for values of the longest a header may
have (1,000 characters), against the pattern the log used before (main at 24edf59, its four words).

    python bench/secret_scan.py

Medians of 7 runs, each the mean of a batch of calls; wall-clock, so say the machine's load.
"""

from __future__ import annotations

import re
import statistics
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chalicelib.base import sensitive
from chalicelib.catalog import toolbox

BEFORE = re.compile(  # base/log.py's _CREDENTIALS at 24edf59
    r"\b(?P<workset>ws[a-z]_)[\w-]+"
    r"|\b(?P<scheme>Bearer|Basic)\s+[^\s,;\"']+"
    r"|(?<=//)[^/\s@:]+:[^/\s@]+@"
    r"|\b(?P<name>[\w-]*(?:key|token|secret|password)[\w-]*)=[^\s&,;\"']+", re.IGNORECASE)
VALUES = {
    "letters (v * 1000)": "v" * 1000,
    "dashed (v- * 500)": "v-" * 500,
    "dashes (- * 1000)": "-" * 1000,
    "words (key- * 250)": "key-" * 250,
    "a typical value (application/json)": "application/json",
}
RUNS = 7


def _median_us(call: object, number: int) -> float:
    timer = timeit.Timer(call)  # type: ignore[arg-type]
    return statistics.median(timer.timeit(number) / number * 1e6 for _ in range(RUNS))


def main() -> None:
    print(f"{'value':38} {'before µs':>11} {'after µs':>10}")
    for label, value in VALUES.items():
        number = 1 if "-" in value else 200  # the pattern before reads a dashed run once a `-`: seconds
        before = _median_us(lambda value=value: BEFORE.search(value), number)
        after = _median_us(lambda value=value: sensitive.CREDENTIALS.search(value), 200)
        print(f"{label:38} {before:11.1f} {after:10.1f}")
    shape = {"method": "POST", "query": "", "headers": {f"x-h{index}": "v-" * 500 for index in range(50)}}
    whole = _median_us(lambda: toolbox.shown_shape(shape), 20)
    print(f"shown_shape of 50 headers of 1,000 characters (dashed): {whole / 1000:.1f} ms")


if __name__ == "__main__":
    main()
