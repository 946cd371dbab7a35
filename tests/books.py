"""What the app's state says, read the way the fault tests check it afterwards: an agent's books
(the size it is counted at, its promotions, its History), its runs and leases, what each queue
holds; the setup those tests share (the read and write tools, an agent with a webhook) and the
background steps they drive (the sweep, its worker).

A test module imports the fixtures it uses (`fast_backoff`, autouse there; `hooked_fixture`, which
its tests ask for as `hooked`), with `# noqa: F401` as conftest imports `faults`.
"""

from __future__ import annotations

import json
import secrets
from datetime import datetime
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.base.clock import iso, parse_iso
from chalicelib.base.config import settings
from chalicelib.net import notify
from chalicelib.store import agents as agent_store
from chalicelib.store import base, queues
from chalicelib.store.records import AgentState
from tests.conftest import Admin, Mcp, Vendor

READ = {"vendor": "unleashed", "name": "list-sales-orders"}
WRITE = {"vendor": "unleashed", "name": "create-order"}
FIRST_CLASS = "unleashed__list-sales-orders"  # READ's tool name once promoted
ANSWER = {"orders": [{"id": 1}]}  # what the vendor fixture answers


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The app's retry budget keeps its shape, without its wait (for every test of a module that
    imports it)."""
    monkeypatch.setattr(base, "BACKOFF_BASE_SECONDS", 0.001)


@pytest.fixture(name="hooked")
def hooked_fixture(admin: Admin, client: Client, vendor: Vendor) -> tuple[dict[str, Any], Mcp]:
    """An agent with a webhook (its deliveries are not under test here: the queue is)."""
    created = admin.create_agent("hooked", webhook_url=f"{vendor.url}/hook")
    return created, Mcp(client, created["api_key"])


# --- setup ----------------------------------------------------------------------------------------

def publish_read(admin: Admin, vendor: Vendor, **extra: Any) -> None:
    """READ, calling the vendor fixture."""
    admin.publish(request={"method": "GET", "url": f"{vendor.url}/orders"}, **extra)


def call_write(admin: Admin, vendor: Vendor, mcp: Mcp) -> str:
    """WRITE published (calling the vendor fixture; not read-only, so a person approves each call)
    and called through run_tool by `mcp`'s agent: answers the id of its run, waiting on a person."""
    admin.publish(name="create-order", description="Create a sales order.", annotations={"destructiveHint": False},
                  input_schema={"type": "object", "properties": {"customer": {"type": "string"}}},
                  request={"method": "POST", "url": f"{vendor.url}/orders"})
    return mcp.call("run_tool", {**WRITE, "input": {"customer": "acme"}})["structuredContent"]["run_id"]


def publish_with_connection(admin: Admin, vendor: Vendor) -> str:
    """READ, whose calls carry a new connection's secret; answers the secret."""
    secret = "sk_live_" + secrets.token_hex(8)
    response = admin.call("POST", "/v1/connections", {"vendor": "unleashed", "auth": {"type": "bearer", "token": secret}})
    assert response.status_code == 201, response.body
    publish_read(admin, vendor, connection=response.json_body["id"])
    return secret


# --- the books and the runs -----------------------------------------------------------------------

def agent_state(agent_id: str) -> AgentState:
    """The agent's state item: its leases, its lease revision, its promotions, what it was told."""
    state = agent_store.load_state(agent_id)
    assert state is not None
    return state


def _events(admin: Admin, agent_id: str) -> list[dict[str, Any]]:
    return admin.call("GET", f"/v1/agents/{agent_id}/history").json_body["items"]


def books(admin: Admin, agent_id: str) -> tuple[int, int, int]:
    """(size the agent is counted at, promotions stored, promoted-minus-demoted History events)."""
    size = admin.call("GET", f"/v1/agents/{agent_id}").json_body["size"]
    promotions = len(admin.call("GET", f"/v1/agents/{agent_id}/working-set").json_body["items"])
    moves = {"promoted": +1, "demoted": -1}  # pins and unpins leave the set as it is
    return size, promotions, sum(moves.get(event["action"], 0) for event in _events(admin, agent_id))


def history(admin: Admin, agent_id: str) -> list[tuple[str, str, str]]:
    """The agent's History, oldest first, as (name, action, cause)."""
    return [(event["name"], event["action"], event["cause"]) for event in reversed(_events(admin, agent_id))]


def fetch_run(admin: Admin, run_id: str) -> dict[str, Any]:
    """The run, as the admin API shows it."""
    response = admin.call("GET", f"/v1/runs/{run_id}")
    assert response.status_code == 200, response.body
    return response.json_body


def run_statuses(admin: Admin, agent_id: str) -> list[str]:
    """The status of each of the agent's runs, as the admin API lists them."""
    return [run["status"] for run in admin.call("GET", f"/v1/agents/{agent_id}/runs").json_body["items"]]


def lease_ends_at(admin: Admin, run_id: str) -> datetime:
    """When the run's lease ends."""
    return parse_iso(fetch_run(admin, run_id)["lease_expires_at"])


# --- the queues -----------------------------------------------------------------------------------

def take_all(queue: str) -> list[dict[str, Any]]:
    """Every message now visible on `queue`, taken off it as a consumer would (the messages stay
    invisible for the queue's visibility timeout, so a later call sees only newer ones)."""
    found: list[dict[str, Any]] = []
    while batch := queues.receive(queue, wait_seconds=0):
        found += batch
    return found


def take_bodies(queue: str) -> list[dict[str, Any]]:
    """The bodies of `take_all(queue)`."""
    return [json.loads(message["Body"]) for message in take_all(queue)]


def finished_runs(bodies: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(run id, status) of each run_finished among these webhook queue bodies."""
    return [(body["run_id"], body["status"]) for body in bodies if body["type"] == notify.RUN_FINISHED_TYPE]


# --- the background steps -------------------------------------------------------------------------

def sweep_at(admin: Admin, at: datetime) -> dict[str, Any]:
    """The sweep, through the admin API, as if the time were `at`; answers its report."""
    response = admin.call("POST", "/v1/sweep", {"now": iso(at)})
    assert response.status_code == 200, response.body
    return response.json_body


def work(client: Client, bodies: list[dict[str, Any]]) -> None:
    """The sweep worker Lambda, handed these work queue messages by its SQS event source."""
    event = client.events.generate_sqs_event(message_bodies=[json.dumps(body) for body in bodies],
                                             queue_name=settings().sweep_queue)
    client.lambda_.invoke("sweep_worker", event)
