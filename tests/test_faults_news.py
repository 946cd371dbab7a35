"""News of a change reaches the agent despite faults (issue 11, items 4 and 7): a webhook batch
stops starting deliveries its Lambda has no time left for; run_finished and list_changed that SQS
refused wait in the outbox for the sweep, queued once; a legacy client whose seen mark fails is
told again until the mark holds; a promote whose announcement SQS refuses still succeeds.
Faults: tests/faults.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from chalicelib.base.clock import utcnow
from chalicelib.base.config import settings
from chalicelib.net import notify
from chalicelib.store import outbox, queues
from tests.books import (
    FIRST_CLASS,
    READ,
    agent_state,
    books,
    call_write,
    fast_backoff,  # noqa: F401 - fixture
    fetch_run,
    finished_runs,
    hooked_fixture,  # noqa: F401 - fixture `hooked`
    publish_read,
    sweep_at,
    take_all,
    take_bodies,
)
from tests.conftest import Admin, Mcp, Vendor, log_lines, serving
from tests.faults import Faults, marks_seen, sends_to

# --- item 4: a webhook batch stops starting deliveries its Lambda has no time left for ------------

@pytest.fixture
def receiver() -> Iterator[tuple[str, list[bytes]]]:
    """A webhook receiver that answers 204; yields its URL and the bodies it got."""
    received: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        yield f"{url}/hook", received


def _three_queued_changes(admin: Admin, vendor: Vendor, url: str) -> list[queues.Message]:
    """Three agents with webhooks at `url`, each with one change queued; the messages, as SQS
    hands them to the consumer."""
    publish_read(admin, vendor)
    for index in range(3):
        created = admin.create_agent(f"hooked{index}", webhook_url=url)
        Mcp(admin.client, created["api_key"]).call("promote", READ)
    taken = take_all(settings().webhook_queue)
    assert len(taken) == 3
    return [queues.Message(m["MessageId"], m["Body"], m["ReceiptHandle"], 1) for m in taken]


def test_a_batch_stops_starting_deliveries_when_the_lambdas_time_cannot_cover_one_more(
    admin: Admin, vendor: Vendor, receiver: tuple[str, list[bytes]], faults: Faults, logged: Any,
) -> None:
    # GIVEN three queued changes, and a Lambda whose remaining time covers one delivery only
    url, received = receiver
    messages = _three_queued_changes(admin, vendor, url)
    one_delivery = int((settings().webhook_timeout_seconds + notify.DELIVERY_MARGIN_SECONDS) * 1000)

    def remaining_ms() -> int:  # the clock moves by deliveries made, not by wall time
        return one_delivery if not received else one_delivery - 1

    # WHEN the consumer gets the batch
    failed = notify.consume(messages, remaining_ms)
    # THEN the first was delivered, once; the other two are reported failed
    assert len(received) == 1
    assert json.loads(received[0])["params"]["agent_id"] == json.loads(messages[0].body)["agent_id"]
    assert failed == [messages[1].message_id, messages[2].message_id]
    # AND they were not attempted: no delivery line, no backoff set on them (SQS hands them out again)
    assert [line["message_id"] for line in log_lines(logged, "webhook.delivery")] == [messages[0].message_id]
    assert faults.seen[("sqs", "ChangeMessageVisibility")] == 0
    assert [line["left"] for line in log_lines(logged, "webhook.batch_cut")] == [2]


def test_a_batch_without_a_deadline_delivers_every_message(admin: Admin, vendor: Vendor,
                                                           receiver: tuple[str, list[bytes]]) -> None:
    # GIVEN three queued changes
    url, received = receiver
    messages = _three_queued_changes(admin, vendor, url)
    # WHEN the consumer gets the batch with no deadline to keep
    failed = notify.consume(messages)
    # THEN all three were delivered, each once
    assert failed == []
    assert sorted(json.loads(body)["params"]["agent_id"] for body in received) == sorted(
        json.loads(message.body)["agent_id"] for message in messages)


# --- item 7: announcements are never lost ---------------------------------------------------------

def test_run_finished_that_sqs_refused_is_queued_once_by_the_sweep(
    admin: Admin, hooked: tuple[dict[str, Any], Mcp], vendor: Vendor, faults: Faults,
) -> None:
    # GIVEN a write call of an agent with a webhook, waiting on a person, and the webhook queue
    # refusing every send
    agent, mcp = hooked
    run_id = call_write(admin, vendor, mcp)
    faults.fail("SendMessageBatch", service="sqs", code="InternalError",
                when=sends_to(settings().webhook_queue))
    # WHEN a person approves it
    approved = admin.call("POST", f"/v1/approvals/{run_id}/approve")
    # THEN the person gets the finished run, recorded, and no run_finished was queued
    assert faults.hits > 0
    assert approved.status_code == 200, approved.body
    assert approved.json_body["status"] == "succeeded"
    assert (fetch_run(admin, run_id)["status"], agent_state(agent["id"]).leases) == ("succeeded", {})
    assert take_bodies(settings().webhook_queue) == []
    # WHEN the queue is back and the sweep runs
    faults.clear()
    report = sweep_at(admin, utcnow())
    # THEN it queued exactly one run_finished for the run
    assert report["runs"]["announced"] == 1
    assert finished_runs(take_bodies(settings().webhook_queue)) == [(run_id, "succeeded")]
    # AND a further sweep queues none
    assert sweep_at(admin, utcnow())["runs"]["announced"] == 0
    assert take_bodies(settings().webhook_queue) == []


def test_a_legacy_client_whose_seen_mark_fails_is_told_again_until_the_mark_holds(
    admin: Admin, mcp: Mcp, agent: dict[str, Any], vendor: Vendor, faults: Faults,
) -> None:
    # GIVEN a tool, and the store refusing every mark of what a 2025-11-25 client was told
    publish_read(admin, vendor)
    faults.fail("UpdateItem", when=marks_seen)
    # WHEN the client promotes the tool
    promoted = mcp.post("tools/call", {"name": "promote", "arguments": READ})
    # THEN it gets its answer, carrying the list_changed notification
    assert faults.hits > 0
    assert promoted.json_body["result"]["structuredContent"]["size"] == 1
    assert [n["method"] for n in promoted.notifications] == ["notifications/tools/list_changed"]
    assert agent_state(agent["id"]).mcp_seen_seq == 0
    # WHEN it sends its next request while the mark still fails
    still = mcp.post("tools/list")
    # THEN that response tells it again (harmless: the list is the same)
    assert [n["method"] for n in still.notifications] == ["notifications/tools/list_changed"]
    assert agent_state(agent["id"]).mcp_seen_seq == 0
    # WHEN the mark works again and the client sends another request
    faults.clear()
    following = mcp.post("tools/list")
    # THEN that response tells it once more, and now the mark holds
    assert [n["method"] for n in following.notifications] == ["notifications/tools/list_changed"]
    assert FIRST_CLASS in [tool["name"] for tool in following.json_body["result"]["tools"]]
    state = agent_state(agent["id"])
    assert state.mcp_seen_seq == state.change_seq == 1
    # AND the response after that carries no notification
    assert mcp.post("tools/list").notifications == []


def test_a_promote_whose_announcement_sqs_refuses_succeeds_and_the_sweep_announces_it(
    admin: Admin, hooked: tuple[dict[str, Any], Mcp], vendor: Vendor, faults: Faults,
) -> None:
    # GIVEN an agent with a webhook, and SQS refusing every send
    agent, mcp = hooked
    publish_read(admin, vendor)
    faults.fail("SendMessageBatch", service="sqs", code="InternalError")
    # WHEN it promotes a tool
    answer = mcp.call("promote", READ)
    # THEN it is told of its success, the tool is promoted, and the news stays in the outbox
    assert faults.hits > 0
    assert answer["isError"] is False and answer["structuredContent"]["size"] == 1
    assert FIRST_CLASS in mcp.tool_names()
    assert books(admin, agent["id"]) == (1, 1, 1)
    assert outbox.pending() == [agent["id"]]
    assert take_bodies(settings().webhook_queue) == []
    # WHEN SQS is back and the sweep runs
    faults.clear()
    sweep_at(admin, utcnow())
    # THEN its drain queued the news once, and the outbox is empty
    [body] = take_bodies(settings().webhook_queue)
    assert (body["type"], body["agent_id"], body["size"]) == (notify.LIST_CHANGED_TYPE, agent["id"], 1)
    assert outbox.pending() == []
