"""End-to-end harness: the real local stack in a subprocess (`python -m local`), driven over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "wsa_e2e_" + uuid.uuid4().hex
START_SECONDS = 60


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

    url: str
    token: str
    process: subprocess.Popen

    def admin(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.url}{path}", data=data, method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
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


def start_stack(data_dir: Path, env: dict[str, str] | None = None) -> Stack:
    """Start `python -m local` on a free port and wait until it says READY."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("AWS_", "WORKSET_"))}
    environment.update(WORKSET_ADMIN_TOKEN=ADMIN_TOKEN, PYTHONUNBUFFERED="1", **(env or {}))
    process = subprocess.Popen(
        [sys.executable, "-m", "local", "--port", "0", "--no-demo", "--data", str(data_dir)],
        cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    deadline = time.monotonic() + START_SECONDS
    seen = []
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith("READY "):
            threading.Thread(target=process.stdout.read, daemon=True).start()  # keep the pipe drained
            return Stack(url=line.split()[1], token=ADMIN_TOKEN, process=process)
    process.kill()
    raise RuntimeError("the local stack did not start:\n" + "".join(seen))


def stop_stack(stack: Stack) -> None:
    stack.process.terminate()
    try:
        stack.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        stack.process.kill()


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = start_stack(tmp_path_factory.mktemp("stack"))
    yield running
    stop_stack(running)
