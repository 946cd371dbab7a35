"""What finding credential-shaped text costs (`sensitive.CREDENTIALS`): on a header value a tool's
definition sets (a request shape or a preview reads every literal header whose name says nothing)
and on an exception's message (every failure's log line), for values of the longest a header may
have (1,000 characters), against the pattern the log used before (main at 24edf59, its four words)
and the one main had at d0b4395 (before a value had to follow the `=`), read from git.

    python bench/secret_scan.py

Medians of 7 runs, each the mean of a batch of calls; wall-clock, so say the machine's load.
"""

from __future__ import annotations

import importlib.util
import re
import statistics
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path
from types import ModuleType

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
    "words, no value (-key * 250 + =)": "-key" * 250 + "=",
    "short parts, no value (-sig * 250 + =)": "-sig" * 250 + "=",
    "a typical value (application/json)": "application/json",
}
RUNS = 7


def _median_us(call: object, number: int) -> float:
    timer = timeit.Timer(call)  # type: ignore[arg-type]
    return statistics.median(timer.timeit(number) / number * 1e6 for _ in range(RUNS))


def _at(commit: str) -> ModuleType:
    """chalicelib/base/sensitive.py as it was at `commit`."""
    root = Path(__file__).resolve().parent.parent
    source = subprocess.run(["git", "show", f"{commit}:chalicelib/base/sensitive.py"], cwd=root, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / f"sensitive_{commit}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    main_then = _at("d0b4395").CREDENTIALS
    print(f"{'value':40} {'24edf59 µs':>11} {'d0b4395 µs':>11} {'now µs':>8}")
    for label, value in VALUES.items():
        number = 1 if "-" in value else 200  # the pattern before reads a dashed run once a `-`: seconds
        before = _median_us(lambda value=value: BEFORE.search(value), number)
        then = _median_us(lambda value=value: main_then.search(value), 50)
        after = _median_us(lambda value=value: sensitive.CREDENTIALS.search(value), 50)
        print(f"{label:40} {before:11.1f} {then:11.1f} {after:8.1f}")
    shape = {"method": "POST", "query": "", "headers": {f"x-h{index}": "v-" * 500 for index in range(50)}}
    whole = _median_us(lambda: toolbox.shown_shape(shape), 20)
    print(f"shown_shape of 50 headers of 1,000 characters (dashed): {whole / 1000:.1f} ms")


if __name__ == "__main__":
    main()
