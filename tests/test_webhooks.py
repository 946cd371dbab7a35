"""The webhook queue: one signed message per change batch, retried with backoff, parked in the
dead-letter queue after the last try, nothing lost."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from chalicelib.base import config
from chalicelib.base.clock import iso, utcnow
from chalicelib.store import queues
from local import workers
from tests.conftest import Admin, Mcp, Vendor, serving

DAY_LATER = 22


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1 that checks Standard Webhooks signatures with the reference
    library (not our own signing)."""

    url: str
    secret: str = ""
    fail_first: int = 0
    always_fail: bool = False
    attempts: int = 0
    received: list[dict[str, Any]] = field(default_factory=list)
    bad_signatures: int = 0

    def verify(self, headers: dict[str, str], body: bytes) -> bool:
        try:
            Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError:
            return False
        return True


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.attempts += 1
            if state.always_fail or state.attempts <= state.fail_first:
                self.send_response(503)
            else:
                headers = {k.lower(): v for k, v in self.headers.items()}
                if state.verify(headers, body):
                    state.received.append({"id": headers["webhook-id"], "body": json.loads(body)})
                else:
                    state.bad_signatures += 1
                self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as base:
        state.url = f"{base}/hook"
        yield state


@pytest.fixture
def hooked(admin: Admin, client, receiver: Receiver, vendor: Vendor, settings_env) -> tuple[dict[str, Any], Mcp]:
    """An agent whose webhook is the receiver (retries without waiting), and three tools."""
    settings_env(WORKSET_WEBHOOK_RETRY_BASE_SECONDS="0")
    created = admin.create_agent("hooked", webhook_url=receiver.url)
    receiver.secret = created["webhook_secret"]
    for name in ("a", "b", "c"):
        admin.publish(vendor="shop", name=name, description=f"Tool {name}.", annotations={"readOnlyHint": True},
                      input_schema={"type": "object"}, request={"method": "GET", "url": f"{vendor.url}/{name}"})
    return created, Mcp(client, created["api_key"])


def _drain_queue(max_rounds: int = 20) -> int:
    """Run the consumer the way Lambda's event source would until the queue is empty."""
    handled = 0
    for _ in range(max_rounds):
        received = workers.consume_once(config.settings().webhook_queue, workers.consumers()[
            config.settings().webhook_queue], wait_seconds=0)
        handled += received
        if not received:
            break
    return handled


def _waiting(queue: str) -> int:
    client = queues._sqs()
    attributes = client.get_queue_attributes(QueueUrl=queues._url(queue), AttributeNames=["All"])["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])


def test_a_promotion_reaches_the_webhook_signed_once(hooked, receiver: Receiver) -> None:
    agent, mcp = hooked
    mcp.call("promote", {"vendor": "shop", "name": "a"})
    _drain_queue()
    assert receiver.bad_signatures == 0
    assert len(receiver.received) == 1
    message = receiver.received[0]
    assert message["body"]["method"] == "notifications/tools/list_changed"
    params = message["body"]["params"]
    assert (params["agent_id"], params["size"], params["event_id"]) == (agent["id"], 1, message["id"])


def test_a_sweep_that_demotes_several_tools_sends_one_message(hooked, receiver: Receiver, admin: Admin) -> None:
    _agent, mcp = hooked
    for name in ("a", "b", "c"):
        mcp.call("promote", {"vendor": "shop", "name": name})
    _drain_queue()
    receiver.received.clear()
    from datetime import timedelta

    report = admin.call("POST", "/v1/sweep", {"now": iso(utcnow() + timedelta(days=DAY_LATER))}).json_body
    assert len(report["demoted"]) == 3
    _drain_queue()
    assert [m["body"]["params"]["size"] for m in receiver.received] == [0]


def test_a_receiver_down_for_the_first_tries_gets_the_message_after_retries(hooked, receiver: Receiver) -> None:
    _agent, mcp = hooked
    receiver.fail_first = 2
    mcp.call("promote", {"vendor": "shop", "name": "a"})
    _drain_queue()
    assert receiver.attempts == 3
    assert len(receiver.received) == 1
    assert _waiting(config.settings().webhook_queue) == 0


def test_a_receiver_always_down_parks_the_message_in_the_dead_letter_queue(hooked, receiver: Receiver) -> None:
    agent, mcp = hooked
    receiver.always_fail = True
    mcp.call("promote", {"vendor": "shop", "name": "a"})
    _drain_queue()
    assert receiver.attempts == queues.MAX_RECEIVES
    dead_letters = queues.receive(f"{config.settings().webhook_queue}-dlq", wait_seconds=0)
    assert len(dead_letters) == 1
    assert json.loads(dead_letters[0]["Body"])["agent_id"] == agent["id"]
    assert _waiting(config.settings().webhook_queue) == 0


def test_another_agents_change_is_not_sent_to_this_webhook(hooked, receiver: Receiver, admin: Admin,
                                                           client) -> None:
    other = Mcp(client, admin.create_agent("quiet")["api_key"])
    other.call("promote", {"vendor": "shop", "name": "a"})
    _drain_queue()
    assert receiver.received == []


def test_the_lambda_consumer_reports_only_the_failed_messages_of_a_batch(
    hooked, receiver: Receiver, admin: Admin, client, vendor: Vendor
) -> None:
    # GIVEN a batch of three changes: two for the hooked agent, whose receiver takes them, and one
    # for an agent whose receiver answers 500
    _, mcp = hooked
    vendor.status = 500
    down = admin.create_agent("down", webhook_url=f"{vendor.url}/hook")
    Mcp(client, down["api_key"]).call("promote", {"vendor": "shop", "name": "a"})
    mcp.call("promote", {"vendor": "shop", "name": "a"})
    mcp.call("promote", {"vendor": "shop", "name": "b"})
    queue = config.settings().webhook_queue
    messages: list[dict[str, Any]] = []
    for _ in range(10):  # SQS may hand over fewer than asked for at a time
        if len(messages) < 3:
            messages += queues.receive(queue, wait_seconds=0, max_messages=3 - len(messages))
    assert len(messages) == 3
    event = client.events.generate_sqs_event(message_bodies=[m["Body"] for m in messages], queue_name=queue)
    for record, message in zip(event["Records"], messages):
        # the real ids and receipts, so the backoff applies to the real message
        record.update(messageId=message["MessageId"], receiptHandle=message["ReceiptHandle"])
    # WHEN the Lambda consumer gets them in one batch
    answer = client.lambda_.invoke("webhook_consumer", event).payload
    # THEN only the message for the failing receiver is reported; the other two were delivered
    failed = [m["MessageId"] for m in messages if json.loads(m["Body"])["agent_id"] == down["id"]]
    assert len(failed) == 1
    assert [failure["itemIdentifier"] for failure in answer["batchItemFailures"]] == failed
    assert len(receiver.received) == 2 and receiver.bad_signatures == 0
    assert len(vendor.received) == 1


def test_the_signing_secret_is_shown_once_and_a_private_webhook_is_refused_outside_local(
    admin: Admin, receiver: Receiver, settings_env
) -> None:
    created = admin.create_agent("hooked", webhook_url=receiver.url)
    assert created["webhook_secret"].startswith("whsec_")
    fetched = admin.call("GET", f"/v1/agents/{created['id']}").json_body
    assert "webhook_secret" not in fetched and fetched["webhook_url"] == receiver.url
    settings_env(WORKSET_ALLOW_PRIVATE_NETWORK="false")
    response = admin.call("PATCH", f"/v1/agents/{created['id']}", {"webhook_url": "http://169.254.169.254/x"})
    assert response.status_code == 400
    assert response.json_body["error"]["field"] == "webhook_url"
    assert admin.call("GET", f"/v1/agents/{created['id']}").json_body["webhook_url"] == receiver.url


def test_a_finished_approval_is_announced_on_the_webhook(hooked, receiver: Receiver, admin: Admin,
                                                         vendor: Vendor) -> None:
    _agent, mcp = hooked
    admin.publish(vendor="shop", name="w", description="Write.", annotations={"destructiveHint": False},
                  input_schema={"type": "object"}, request={"method": "POST", "url": f"{vendor.url}/w"})
    run_id = mcp.call("run_tool", {"vendor": "shop", "name": "w", "input": {}})["structuredContent"]["run_id"]
    admin.call("POST", f"/v1/approvals/{run_id}/approve")
    _drain_queue()
    finished = [m["body"] for m in receiver.received if m["body"]["method"] == "notifications/workset/run_finished"]
    assert [(b["params"]["run_id"], b["params"]["status"]) for b in finished] == [(run_id, "succeeded")]


# --- the webhook URL's check: what it tells, how long it may take -----------------------------------

INTERNAL = "10.20.30.40"


def test_a_webhook_url_whose_name_resolves_privately_is_refused_without_the_address(
        admin: Admin, agent: dict[str, Any], settings_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.net import outbound

    # GIVEN a deployment that calls no private address, and a name that resolves to one inside it
    settings_env(WORKSET_ALLOW_PRIVATE_NETWORK="false")
    monkeypatch.setattr(outbound, "system_resolver", lambda host, port: [INTERNAL])
    # WHEN an agent's webhook is set to it
    response = admin.call("PATCH", f"/v1/agents/{agent['id']}", {"webhook_url": "https://hooks.tenant.test/x"})
    # THEN it is refused, saying why, without telling the tenant the deployment's internal address
    assert response.status_code == 400 and response.json_body["error"]["field"] == "webhook_url"
    assert "private" in response.json_body["error"]["message"] and INTERNAL not in response.body.decode()
    assert admin.call("GET", f"/v1/agents/{agent['id']}").json_body["webhook_url"] is None


def test_a_webhook_urls_name_that_never_resolves_is_held_to_the_webhook_timeout(
        admin: Admin, agent: dict[str, Any], settings_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from chalicelib.net import outbound
    from tests.conftest import within

    # GIVEN a name whose name server never answers (the tenant's own: it can stall a lookup for
    # the resolver's whole retry budget, and the API request with it)
    settings_env(WORKSET_WEBHOOK_TIMEOUT_SECONDS="0.3")
    released = threading.Event()

    def stalled(host: str, port: int) -> list[str]:
        released.wait(20)
        return ["127.0.0.1"]

    monkeypatch.setattr(outbound, "system_resolver", stalled)
    try:
        # WHEN an agent's webhook is set to it
        response = within(10, lambda: admin.call("PATCH", f"/v1/agents/{agent['id']}",
                                                 {"webhook_url": "https://stalls.tenant.test/x"}))
        # THEN the check gives up at the webhook timeout, refusing it, and nothing is saved
        assert response.status_code == 400 and response.json_body["error"]["field"] == "webhook_url"
        assert "did not answer within 0.3 s" in response.json_body["error"]["message"]
        assert not released.is_set()
    finally:
        released.set()
    assert admin.call("GET", f"/v1/agents/{agent['id']}").json_body["webhook_url"] is None
