"""Webhook batches: each message succeeds or fails alone (a poison message, a KMS or DynamoDB error,
a receiver's 500 fail that message only, and deliveries that succeeded are not sent again); a
poison message is parked in the dead-letter queue after the last try, not retried forever; and an
SQS error after a committed change leaves it to the sweep's drain, never to the caller."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from chalice.test import Client
from standardwebhooks import Webhook  # the Standard Webhooks reference library, not our own signing

from chalicelib.base import config
from chalicelib.net import notify
from chalicelib.store import agents as agent_store
from chalicelib.store import outbox, queues, vault
from local import workers
from tests.conftest import Admin, Mcp, Vendor, serving
from tests.test_observability import lines, metrics


@dataclass
class Hook:
    """A webhook receiver on 127.0.0.1 that answers 204 and keeps what it received."""

    url: str
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)


@pytest.fixture
def hook() -> Iterator[Hook]:
    state = Hook(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as base:
        state.url = f"{base}/hook"
        yield state


def verified(secret: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """The delivery's JSON, once its Standard Webhooks signature checks out."""
    return Webhook(secret).verify(body, headers)


@pytest.fixture
def shop(admin: Admin, vendor: Vendor, settings_env: Any) -> None:
    """One read tool to promote; retries without waiting."""
    settings_env(WORKSET_WEBHOOK_RETRY_BASE_SECONDS="0")
    admin.publish(vendor="shop", name="a", description="Tool a.", annotations={"readOnlyHint": True},
                  input_schema={"type": "object"}, request={"method": "GET", "url": f"{vendor.url}/a"})


def _hooked_agent(admin: Admin, client: Client, name: str, url: str) -> dict[str, Any]:
    """An agent whose webhook is `url`, which has promoted one tool (one message queued)."""
    created = admin.create_agent(name, webhook_url=url)
    Mcp(client, created["api_key"]).call("promote", {"vendor": "shop", "name": "a"})
    return created


def _receive_all(expected: int) -> list[dict[str, Any]]:
    queue = config.settings().webhook_queue
    messages: list[dict[str, Any]] = []
    for _ in range(10):
        messages += queues.receive(queue, wait_seconds=0, max_messages=expected - len(messages))
        if len(messages) == expected:
            return messages
    raise AssertionError(f"only {len(messages)} of {expected} messages came")


def _lambda_event(client: Client, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The event Lambda's SQS source would hand over for these messages."""
    event = client.events.generate_sqs_event(message_bodies=[m["Body"] for m in messages],
                                             queue_name=config.settings().webhook_queue)
    for record, message in zip(event["Records"], messages):
        record.update(messageId=message["MessageId"], receiptHandle=message["ReceiptHandle"])
        record["attributes"]["ApproximateReceiveCount"] = message["Attributes"]["ApproximateReceiveCount"]
    return event


def _kms_refuses_for(monkeypatch: pytest.MonkeyPatch, agent_id: str) -> None:
    decrypt = vault.decrypt

    def refusing(ciphertext: bytes, *, account_id: str, connection_id: str) -> str:
        if connection_id == agent_id:
            raise ClientError({"Error": {"Code": "KMSInvalidStateException", "Message": "key pending deletion"}},
                              "Decrypt")
        return decrypt(ciphertext, account_id=account_id, connection_id=connection_id)

    monkeypatch.setattr(vault, "decrypt", refusing)


def _send_raw(body: str) -> None:
    queue = config.settings().webhook_queue
    queues._sqs().send_message(QueueUrl=queues._url(queue), MessageBody=body)


def test_a_batch_of_ten_with_three_failures_reports_exactly_those_three(
    admin: Admin, client: Client, shop: None, hook: Hook, vendor: Vendor, logged: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN seven agents whose webhook takes deliveries, one whose secret KMS will not decrypt, one
    # whose receiver answers 500, each with one change queued, and a message that is not JSON
    good = [_hooked_agent(admin, client, f"good{index}", hook.url) for index in range(7)]
    locked = _hooked_agent(admin, client, "locked", hook.url)
    vendor.status = 500
    down = _hooked_agent(admin, client, "down", vendor.url + "/hook")
    _send_raw("{not json")
    messages = _receive_all(10)
    by_agent = {json.loads(m["Body"]).get("agent_id") if m["Body"] != "{not json" else "poison": m["MessageId"]
                for m in messages}
    _kms_refuses_for(monkeypatch, locked["id"])
    logged.clear()
    # WHEN the Lambda consumer gets the ten in one batch
    answer = client.lambda_.invoke("webhook_consumer", _lambda_event(client, messages)).payload
    # THEN exactly the three failures are reported, and nothing escaped the batch
    assert sorted(failure["itemIdentifier"] for failure in answer["batchItemFailures"]) == sorted(
        [by_agent["poison"], by_agent[locked["id"]], by_agent[down["id"]]])
    # AND each of the seven was delivered once, signed with its own agent's secret
    secrets = {agent["id"]: agent["webhook_secret"] for agent in good}
    delivered = [verified(secrets[json.loads(body)["params"]["agent_id"]], headers, body)
                 for headers, body in hook.received]
    assert sorted(d["params"]["agent_id"] for d in delivered) == sorted(secrets)
    assert len({headers["webhook-id"] for headers, _ in hook.received}) == 7
    assert len(vendor.received) == 1  # the receiver that answered 500 was tried once
    # AND one line per delivery says how each ended, without a secret
    deliveries = lines(logged, "webhook.delivery")
    assert len(deliveries) == 10
    ended = {line["message_id"]: line for line in deliveries}
    assert [ended[by_agent[agent["id"]]]["outcome"] for agent in good] == ["delivered"] * 7
    assert (ended[by_agent["poison"]]["reason"], ended[by_agent["poison"]]["error"]) == ("poison", "PoisonMessage")
    assert (ended[by_agent[locked["id"]]]["reason"], ended[by_agent[locked["id"]]]["error"]) == ("error", "ClientError")
    assert (ended[by_agent[down["id"]]]["reason"], ended[by_agent[down["id"]]]["receiver_status"]) == (
        "webhook_failed", 500)
    assert sum(metrics(line)["WebhookDeliveries"]["value"] for line in deliveries) == 7
    assert sum(metrics(line)["WebhookFailures"]["value"] for line in deliveries) == 3
    assert sum(metrics(line)["WebhookDeadLettered"]["value"] for line in deliveries) == 0
    for agent in [*good, locked, down]:
        assert agent["webhook_secret"] not in logged.text


def test_a_dynamodb_error_fails_its_message_alone(admin: Admin, client: Client, shop: None, hook: Hook,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN two agents with a change queued each, and DynamoDB failing to read one of them
    first = _hooked_agent(admin, client, "first", hook.url)
    second = _hooked_agent(admin, client, "second", hook.url)
    messages = _receive_all(2)
    load_state = agent_store.load_state

    def failing(agent_id: str) -> Any:
        if agent_id == first["id"]:
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}},
                              "Query")
        return load_state(agent_id)

    monkeypatch.setattr(agent_store, "load_state", failing)
    # WHEN the batch is consumed
    failed = notify.consume([queues.Message(m["MessageId"], m["Body"], m["ReceiptHandle"], 1) for m in messages])
    # THEN only the first agent's message failed; the second was delivered
    assert failed == [m["MessageId"] for m in messages if json.loads(m["Body"])["agent_id"] == first["id"]]
    assert [json.loads(body)["params"]["agent_id"] for _, body in hook.received] == [second["id"]]


def test_a_poison_message_is_parked_in_the_dead_letter_queue_after_the_last_try(shop: None, logged: Any) -> None:
    # GIVEN a message that names no known type
    queue = config.settings().webhook_queue
    _send_raw(json.dumps({"type": "from_the_future", "agent_id": "ag1"}))
    # WHEN consumers take it as Lambda's event source would, until the queue is empty
    for _ in range(queues.MAX_RECEIVES + 3):
        workers.consume_once(queue, notify.consume, wait_seconds=0)
    # THEN it was tried MAX_RECEIVES times, the last counted as dead-lettered, and the body is kept
    tries = lines(logged, "webhook.delivery")
    assert [line["attempt"] for line in tries] == list(range(1, queues.MAX_RECEIVES + 1))
    assert [line["dead_lettered"] for line in tries] == [False] * (queues.MAX_RECEIVES - 1) + [True]
    assert metrics(tries[-1])["WebhookDeadLettered"]["value"] == 1
    parked = queues.receive(f"{queue}-dlq", wait_seconds=0)
    assert [json.loads(m["Body"])["type"] for m in parked] == ["from_the_future"]


def test_a_promote_whose_announcement_meets_an_sqs_error_still_succeeds_and_the_drain_delivers_it(
    admin: Admin, client: Client, shop: None, hook: Hook, logged: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN an agent with a webhook, and SQS refusing the next send
    agent = admin.create_agent("hooked", webhook_url=hook.url)
    mcp = Mcp(client, agent["api_key"])
    send = queues.send

    def refusing(name: str, bodies: list[dict[str, Any]]) -> None:
        raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "try later"}}, "SendMessageBatch")

    monkeypatch.setattr(queues, "send", refusing)
    # WHEN the agent promotes a tool
    result = mcp.call("promote", {"vendor": "shop", "name": "a"})
    # THEN it is told of its success, the tool is promoted, and the outbox keeps the news
    assert result["isError"] is False
    assert "shop__a" in mcp.tool_names()
    assert outbox.pending() == [agent["id"]]
    [failure] = lines(logged, "webhook.enqueue_failed")
    assert (failure["agent_id"], failure["error"], failure["left_to"]) == (agent["id"], "ClientError", "sweep drain")
    # AND once SQS is back, the sweep's drain hands it over and the receiver gets it, signed
    monkeypatch.setattr(queues, "send", send)
    assert admin.call("POST", "/v1/sweep").status_code == 200
    assert outbox.pending() == []
    workers.consume_once(config.settings().webhook_queue, notify.consume, wait_seconds=0)
    [(headers, body)] = hook.received
    params = verified(agent["webhook_secret"], headers, body)["params"]
    assert (params["agent_id"], params["size"]) == (agent["id"], 1)


def test_a_decision_whose_announcement_meets_an_sqs_error_still_answers(
    admin: Admin, client: Client, shop: None, hook: Hook, vendor: Vendor, logged: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a run waiting on a person, and SQS refusing sends
    agent = admin.create_agent("hooked", webhook_url=hook.url)
    admin.publish(vendor="shop", name="w", description="Write.", annotations={"destructiveHint": False},
                  input_schema={"type": "object"}, request={"method": "POST", "url": f"{vendor.url}/w"})
    run_id = Mcp(client, agent["api_key"]).call("run_tool", {"vendor": "shop", "name": "w", "input": {}})[
        "structuredContent"]["run_id"]

    def refusing(name: str, bodies: list[dict[str, Any]]) -> None:
        raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "try later"}}, "SendMessageBatch")

    monkeypatch.setattr(queues, "send", refusing)
    # WHEN a person approves it
    answer = admin.call("POST", f"/v1/approvals/{run_id}/approve")
    # THEN the approval answers with the finished run (the run ran once), and the failure is logged
    assert answer.status_code == 200 and answer.json_body["status"] == "succeeded"
    assert len(vendor.received) == 1
    assert [line["run_id"] for line in lines(logged, "webhook.enqueue_failed")] == [run_id]


def _refusing(error: Exception) -> Any:
    def change_message_visibility(**_: Any) -> None:
        raise error
    return change_message_visibility


@pytest.mark.parametrize("error, failure", [
    (ClientError({"Error": {"Code": "AccessDenied", "Message": "not granted"}}, "ChangeMessageVisibility"),
     "ClientError"),
    (ClientError({"Error": {"Code": "QueueDoesNotExist", "Message": "gone"}}, "ChangeMessageVisibility"),
     "ClientError"),
    (EndpointConnectionError(endpoint_url="https://sqs.us-east-1.amazonaws.com/"), "EndpointConnectionError"),
    (ClientError({"Error": {"Code": "ReceiptHandleIsInvalid", "Message": "stale"}}, "ChangeMessageVisibility"),
     None),
    (ClientError({"Error": {"Code": "AWS.SimpleQueueService.MessageNotInflight", "Message": "not in flight"}},
                 "ChangeMessageVisibility"), None),
])
def test_putting_a_failed_message_back_logs_every_refusal_but_a_stale_receipt(
    error: Exception, failure: str | None, logged: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN SQS refusing to change a message's visibility (or out of reach)
    queue = config.settings().webhook_queue
    monkeypatch.setattr(queues._sqs(), "change_message_visibility", _refusing(error))
    # WHEN a failed delivery is put back with its backoff
    queues.retry_later(queue, "receipt", 5)
    # THEN it never raises (the queue's own visibility timeout applies), and anything but a receipt
    # that went stale is logged as a failure naming the queue
    failures = lines(logged, "queue.retry_later")
    assert [(line["error"], line["queue"]) for line in failures] == ([(failure, queue)] if failure else [])


def test_putting_back_a_message_already_deleted_is_quiet(shop: None, logged: Any) -> None:
    # GIVEN a message received and then deleted, so its receipt is stale
    queue = config.settings().webhook_queue
    _send_raw(json.dumps({"type": "tools_list_changed", "agent_id": "ag1"}))
    (message,) = queues.receive(queue, wait_seconds=0)
    queues.delete(queue, message["ReceiptHandle"])
    # WHEN it is put back
    queues.retry_later(queue, message["ReceiptHandle"], 5)
    # THEN SQS's refusal is expected: nothing is logged
    assert lines(logged, "queue.retry_later") == []
