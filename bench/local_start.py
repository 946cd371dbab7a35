"""How long `./dev up` takes to serve, the first time (a fresh virtual environment) and the second,
and the longest it stays silent while doing so (issue 28, goal 2: a line at least every 10 s).

    nice -n 10 python3 bench/local_start.py [--cached] [--keep] [--before]

Runs `./dev up --port 0 --data <tmp>/data` with `VENV=<tmp>/venv` (a new folder: the project's
own .venv is never touched), timing each line it prints until `READY`, then stops it with SIGTERM
(as Ctrl-C would) and starts it again on the same venv and data. Without `--cached` pip's
download cache is off (PIP_NO_CACHE_DIR=1), as on a fresh machine; with it, wheels pip cached
earlier are reused. Prints each start's seconds to READY, its longest silence, the venv's size and
its count of installed distributions (machine-independent: what `up` installs).

`--before` first does the same with `./dev` as it was before issue 28 (commit bbada58: it
installed requirements-dev.txt, the test tools too, and printed nothing while it did), run from a
temporary folder that links the project's code and requirement files, so its `.venv` is made there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READY_SECONDS = 1800


BEFORE = "bbada58"  # the last commit whose ./dev up installed the test tools too
LINKED = ("app.py", "chalicelib", "local", ".chalice", "requirements.txt", "requirements-local.txt",
          "requirements-dev.txt", "requirements-nodeps.txt")


def start(venv: Path, data: Path, cached: bool, dev: Path = ROOT / "dev") -> tuple[float, float, list[str]]:
    """One `./dev up`: seconds to READY, the longest gap between two printed lines, the lines."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "WORKSET_"))}
    env.update({"VENV": str(venv), "PYTHONUNBUFFERED": "1"})
    if not cached:
        env["PIP_NO_CACHE_DIR"] = "1"
    began = time.monotonic()
    process = subprocess.Popen([str(dev), "up", "--port", "0", "--data", str(data)], cwd=dev.parent, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert process.stdout is not None
    last, longest, lines = began, 0.0, []
    try:
        for line in process.stdout:
            now = time.monotonic()
            longest = max(longest, now - last)
            last = now
            lines.append(f"{now - began:7.1f} s  {line.rstrip()}")
            if line.startswith("READY "):
                return now - began, longest, lines
            if now - began > READY_SECONDS:
                break
        raise RuntimeError("./dev up did not get ready:\n" + "\n".join(lines[-40:]))
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


def old_dev(folder: Path) -> Path:
    """The ./dev of commit BEFORE in `folder`, beside links to the project's code and requirements
    (it makes its venv at `folder/.venv`, whatever VENV says)."""
    folder.mkdir()
    for name in LINKED:
        (folder / name).symlink_to(ROOT / name)
    script = folder / "dev"
    script.write_bytes(subprocess.run(["git", "show", f"{BEFORE}:dev"], cwd=ROOT, check=True,
                                      capture_output=True).stdout)
    script.chmod(0o755)
    return script


def distributions(venv: Path) -> int:
    return len(list(venv.glob("lib/python3*/site-packages/*.dist-info")))


def size_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cached", action="store_true", help="let pip use its download cache")
    parser.add_argument("--keep", action="store_true", help="keep the temporary venv and data")
    parser.add_argument("--before", action="store_true", help="first measure ./dev as it was before issue 28")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="workset-start-"))
    venv, data = folder / "venv", folder / "data"
    try:
        if args.before:
            dev = old_dev(folder / "before")
            old, old_gap, old_lines = start(folder / "unused", folder / "before-data", args.cached, dev)
            print("\n".join(old_lines))
            old_venv = folder / "before" / ".venv"
            old_size = size_mb(old_venv)
            old_summary = (f"before (commit {BEFORE}), first start: {old:.1f} s to READY, longest silence "
                           f"{old_gap:.1f} s; venv: {distributions(old_venv)} distributions, {old_size:.0f} MB")
            shutil.rmtree(old_venv, ignore_errors=True)  # the machine's disk is shared
        first, first_gap, first_lines = start(venv, data, args.cached)
        print("\n".join(first_lines))
        second, second_gap, _ = start(venv, data, args.cached)
        print(f"first start (fresh venv{', pip cache on' if args.cached else ', no pip cache'}): "
              f"{first:.1f} s to READY, longest silence {first_gap:.1f} s")
        print(f"second start (same venv and data): {second:.1f} s to READY, longest silence {second_gap:.1f} s")
        print(f"ratio first/second: {first / second:.1f}x")
        if args.before:
            print(old_summary)
            print(f"ratio before/now: first start {old / first:.2f}x, venv size {old_size / size_mb(venv):.2f}x")
        print(f"venv: {distributions(venv)} distributions, {size_mb(venv):.0f} MB")
    finally:
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
