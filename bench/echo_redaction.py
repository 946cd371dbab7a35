"""What redacting a vendor's answer costs (`vendor.redact`, `vendor.redact_text`): a JSON answer
of 10,000 short strings, and 1 MB of text (the answer cap), with one connection secret (a bearer
token) and with it two keys a tool's definition pastes (a header's, a URL query's); side by side
with the redaction at BEFORE (main before pasted keys joined the secrets: no base64 forms, no
search of a short string first), read from git, in the same run.

    python bench/echo_redaction.py

Medians of 7 runs, interleaved; wall-clock, so say the machine's load.
"""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chalicelib.calls import vendor

BEFORE = "d0b4395"
TOKEN = "at-3f9c2a7e41b8d6c05e9f1a2b3c4d5e6f"
SECRETS = {
    "connection only": (f"Bearer {TOKEN}", TOKEN),
    "connection + 2 pasted keys": (f"Bearer {TOKEN}", TOKEN, "sk_live_headerkey_0123456789", "qk/secret+value-0123"),
}
ANSWER = {"items": [{"id": index, "name": f"contact {index}", "email": f"user{index}@example.com",
                     "note": "see https://example.com/a%2Fb?x=1"} for index in range(2500)]}
TEXT = ("lorem ipsum dolor sit amet, consectetur adipiscing elit \\u00e9 %20 " * 16000)[: 1 << 20]
RUNS = 7


def _before() -> ModuleType:
    """chalicelib/calls/vendor.py as it was at BEFORE (its imports resolve to today's modules)."""
    root = Path(__file__).resolve().parent.parent
    source = subprocess.run(["git", "show", f"{BEFORE}:chalicelib/calls/vendor.py"], cwd=root, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "vendor_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("vendor_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> None:
    before = _before()
    print(f"{'secrets':28} {'JSON 10k strings ms: before':>27} {'after':>7} {'1 MB text ms: before':>21} {'after':>7}")
    for label, secrets in SECRETS.items():
        row = []
        for work in ("tree", "text"):
            timings: dict[str, list[float]] = {"before": [], "after": []}
            for _ in range(RUNS):  # interleaved: the machine's load falls on both alike
                for name, module in (("before", before), ("after", vendor)):
                    if work == "tree":
                        call = (lambda module=module, secrets=secrets: module.redact(ANSWER, secrets))
                    else:
                        call = (lambda module=module, secrets=secrets: module.redact_text(TEXT, secrets, cut=True))
                    timings[name].append(timeit.timeit(call, number=3) / 3 * 1e3)
            row += [statistics.median(timings["before"]), statistics.median(timings["after"])]
        print(f"{label:28} {row[0]:27.1f} {row[1]:7.1f} {row[2]:21.1f} {row[3]:7.1f}")


if __name__ == "__main__":
    main()
