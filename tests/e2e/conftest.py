"""End-to-end harness: the real local stack in a subprocess (`python -m local`), driven over HTTP.

Each stack's whole output (the app's JSON log lines, a traceback) is kept in a file under
test-artifacts/e2e/, and a failing test's report ends with what the stacks printed while it ran
(`pytest_runtest_makereport`): a crash's `*.internal_error` line is there, not lost with the stack.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from local import process
from local.process import ROOT, RunningStack

ADMIN_TOKEN = "wsa_e2e_" + uuid.uuid4().hex
ARTIFACTS = ROOT / "test-artifacts" / "e2e"
TAIL_LINES = 150  # of a stack's output, in a failing test's report
# How long a client waits for an answer. On a loaded 2-core machine a stack's first import or search
# loads the model and builds the index: 5-12 s measured at load 17, while the answer is right.
CLIENT_TIMEOUT_SECONDS = 60
KEEP_SECONDS = 24 * 3600  # a stack's output file is kept a day
__all__ = ["ROOT", "Stack", "stack_log", "start_stack", "stop_stack"]

_logs: list[Path] = []  # the output file of every stack this worker started
_read_from = pytest.StashKey[dict[Path, int]]()  # each file's size when the test began


def stack_log(data_dir: Path) -> Path:
    """A new file under test-artifacts/e2e/ for the output of a stack on `data_dir` (pass it to
    `process.start(log=...)`); a failing test's report shows its tail. Files of earlier days go
    (another worker's of this run are fresh, and stay)."""
    if not _logs:
        for old in ARTIFACTS.glob("*.log"):
            if time.time() - _modified(old) > KEEP_SECONDS:
                old.unlink(missing_ok=True)
    path = ARTIFACTS / f"{data_dir.name}-{uuid.uuid4().hex[:8]}.log"
    _logs.append(path)
    return path


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    item.stash[_read_from] = {path: _size(path) for path in _logs}
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test (or its fixture) gets a section per stack that printed while it ran: the
    last lines of that output."""
    report = yield
    if report.failed:
        began = item.stash.get(_read_from, {})
        for path in _logs:
            tail = _tail(path, began.get(path, 0))
            if tail:
                report.sections.append((f"Captured output of the local stack, {path.relative_to(ROOT)}", tail))
    return report


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _tail(path: Path, offset: int) -> str:
    """The last `TAIL_LINES` lines written to `path` after `offset` bytes ("" when none)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    cut = len(lines) - TAIL_LINES
    return "\n".join(([f"[{cut} earlier lines are in the file]"] if cut > 0 else []) + lines[-TAIL_LINES:])


@pytest.fixture(autouse=True)
def aws() -> Iterator[None]:
    """End-to-end tests talk to the stack's own emulator, never to the in-process moto."""
    yield


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Stack:
    """A running local stack and admin calls against it."""

    running: RunningStack

    @property
    def url(self) -> str:
        return self.running.url

    def admin(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.url}{path}", data=data, method=method,
            headers={"Authorization": f"Bearer {self.running.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=CLIENT_TIMEOUT_SECONDS) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def new_agent(self) -> dict[str, Any]:
        status, agent = self.admin("POST", "/v1/agents", {"name": f"agent-{uuid.uuid4().hex[:6]}"})
        assert status == 201, agent
        return agent

    def publish(self, spec: dict[str, Any]) -> None:
        status, body = self.admin("POST", "/v1/tools", spec)
        assert status == 201, body

    def books(self, agent_id: str) -> tuple[int, list[str], int]:
        """The agent's counted size, its working set's names, and its History's promotions minus demotions."""
        size = self.admin("GET", f"/v1/agents/{agent_id}")[1]["size"]
        names = [item["name"] for item in self.admin("GET", f"/v1/agents/{agent_id}/working-set")[1]["items"]]
        events = self.admin("GET", f"/v1/agents/{agent_id}/history?limit=100")[1]["items"]
        actions = [event["action"] for event in events]
        return size, names, actions.count("promoted") - actions.count("demoted")


def start_stack(data_dir: Path, env: dict[str, str] | None = None, *args: str, new_session: bool = False) -> Stack:
    return Stack(process.start(data_dir, ADMIN_TOKEN, env, *args, new_session=new_session, log=stack_log(data_dir)))


def stop_stack(stack: Stack) -> None:
    stack.running.stop()


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # a short listen hold, so a subscription that hears nothing closes quickly
    running = start_stack(tmp_path_factory.mktemp("stack"), {"WORKSET_LISTEN_HOLD_SECONDS": "3"}, "--announce-listens")
    yield running
    stop_stack(running)
