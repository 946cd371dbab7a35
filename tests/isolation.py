"""What keeps the test workers apart when `./dev test` runs the suite in parallel (pytest-xdist,
`--dist loadfile`: each test file runs whole in one worker process).

Kept apart by the process or by the operating system, with nothing to do here:
- moto: `mock_aws` patches botocore inside the worker's own process (tests/conftest.py's `aws`);
  the local stacks each start their own emulator on a free port.
- ports: every stack, vendor stand-in and upstream server listens on a port the kernel picks
  (port 0, or a probe of one just before); tests/test_readme.py's stack takes the README's fixed
  ports (8000, 8001, 8100) inside a network namespace of its own.
- temporary folders: pytest gives each worker its own base folder (`tmp_path`, `tmp_path_factory`).
- a module's fixtures that start processes (a stack, a browser, the README's session): started
  once for the module, since the module never leaves its worker; the session-wide ones
  (tests/e2e's `stack`, `everything_url`) once in each worker that uses them.
- test-artifacts/console/: only tests/e2e/test_console_browser.py writes it.
- test-artifacts/e2e/: each local stack's output goes to a file of its own (a random name).

Shared, so taken one at a time (`one_at_a_time`): what writes into the checkout while it runs.
infra/build.sh fills `vendor/` at the root, which any `chalice package` started meanwhile would
ship, and both build into `.chalice/deployments/`."""

from __future__ import annotations

import fcntl
import hashlib
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from local.process import ROOT


def lock_path(name: str, root: Path = ROOT) -> Path:
    """The lock file for `name` in this checkout (another checkout has its own), outside the repo."""
    checkout = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"workset-tests-{checkout}-{name}.lock"


@contextmanager
def one_at_a_time(name: str, root: Path = ROOT) -> Iterator[None]:
    """Hold `name`'s lock for this checkout: a worker that asks while another holds it waits. The
    lock is the kernel's (flock), so a worker that dies lets go of it."""
    with open(lock_path(name, root), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
