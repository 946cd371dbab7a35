"""End-to-end harness: the real local stack in a subprocess (`python -m local`), driven over HTTP."""

from __future__ import annotations

import json
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
__all__ = ["ROOT", "Stack", "start_stack", "stop_stack"]


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

    def books(self, agent_id: str) -> tuple[int, list[str], int]:
        """The agent's counted size, its working set's names, and its History's promotions minus demotions."""
        size = self.admin("GET", f"/v1/agents/{agent_id}")[1]["size"]
        names = [item["name"] for item in self.admin("GET", f"/v1/agents/{agent_id}/working-set")[1]["items"]]
        events = self.admin("GET", f"/v1/agents/{agent_id}/history?limit=100")[1]["items"]
        actions = [event["action"] for event in events]
        return size, names, actions.count("promoted") - actions.count("demoted")


def start_stack(data_dir: Path, env: dict[str, str] | None = None, *args: str, new_session: bool = False) -> Stack:
    return Stack(process.start(data_dir, ADMIN_TOKEN, env, *args, new_session=new_session))


def stop_stack(stack: Stack) -> None:
    stack.running.stop()


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # a short listen hold, so a subscription that hears nothing closes quickly
    running = start_stack(tmp_path_factory.mktemp("stack"), {"WORKSET_LISTEN_HOLD_SECONDS": "3"}, "--announce-listens")
    yield running
    stop_stack(running)
