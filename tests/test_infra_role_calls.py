"""Each function's role against the AWS calls that function really makes: the scheduled sweep,
the sweep worker and the webhook consumer are invoked through their Lambda entry points (Chalice's
test client) in a scenario that gives each work (an agent with a webhook, a promoted tool, an
agent over its cap), every AWS call of each invocation is recorded, and each must be allowed by
that function's own role (infra/resources.json). The roles' split (tests/test_infra_roles.py) can
only be narrower than what the code needs if this fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import boto3
import pytest

from chalicelib.base import config as app_config
from chalicelib.store import queues
from tests.conftest import Admin, Mcp, Vendor, serving
from tests.iam import (
    Call,
    allows,
    dynamodb_calls,
    kms_call,
    record_aws_fixture,  # noqa: F401 - fixture `record_aws`
    sqs_call,
)
from tests.infra import AwsCall, role_policy


def _calls(recorded: list[AwsCall]) -> list[Call]:
    """The recorded calls as IAM authorizes them (names without the test stage's prefix)."""
    prefix = app_config.settings().table_prefix + "-"
    key_arn = boto3.client("kms").describe_key(KeyId=app_config.settings().kms_key_id)["KeyMetadata"]["Arn"]
    found = []
    for service, operation, params, answer in recorded:
        if service == "dynamodb":
            for call in dynamodb_calls(operation, params):
                assert call.table is not None and call.table.startswith(prefix), call
                found.append(Call(call.action, call.table[len(prefix):], call.index))
        elif service == "kms":
            found.append(kms_call(operation, params, answer, key_arn))
        elif service == "sqs":
            call = sqs_call(operation, params)
            assert call.queue is not None and call.queue.startswith(prefix), call
            found.append(Call(call.action, queue=call.queue[len(prefix):]))
        else:
            raise AssertionError(f"{service}:{operation}: no role grants {service}")
    return found


def denied(function: str, recorded: list[AwsCall]) -> list[tuple[str, str]]:
    """The recorded calls the function's role does not allow (the stage dev's ARNs)."""
    document = role_policy("dev", function)
    return sorted({call.request("dev")[:2] for call in _calls(recorded) if not allows(document, *call.request("dev"))})


@pytest.fixture
def receiver() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as base:
        yield f"{base}/hook"


def test_each_function_makes_only_calls_its_own_role_allows(
        client: Any, admin: Admin, vendor: Vendor, receiver: str, settings_env: Any,
        record_aws: list[AwsCall]) -> None:
    # GIVEN an agent with a webhook that promoted a tool (a delivery waits on the webhook queue),
    # over a cap of one
    settings_env(WORKSET_WEBHOOK_RETRY_BASE_SECONDS="0")
    created = admin.create_agent("hooked", webhook_url=receiver)
    for name in ("a", "b"):
        admin.publish(vendor="shop", name=name, description=f"Tool {name}.", annotations={"readOnlyHint": True},
                      input_schema={"type": "object"}, request={"method": "GET", "url": f"{vendor.url}/{name}"})
    mcp = Mcp(client, created["api_key"])
    mcp.call("promote", {"vendor": "shop", "name": "a"})
    mcp.call("promote", {"vendor": "shop", "name": "b"})
    admin.call("PATCH", f"/v1/agents/{created['id']}", {"cap": 1})
    ran: dict[str, list[AwsCall]] = {}

    # WHEN the schedule fires the sweep
    del record_aws[:]
    event = client.events.generate_cw_event(source="aws.events", detail_type="Scheduled Event", detail={},
                                            resources=["arn:aws:events:us-east-1:123456789012:rule/sweep"])
    client.lambda_.invoke("sweep", event)
    ran["Sweep"] = list(record_aws)

    # AND the worker takes a batch of agents from the work queue
    del record_aws[:]
    event = client.events.generate_sqs_event(message_bodies=[json.dumps({"agent_ids": [created["id"]]})],
                                             queue_name=app_config.settings().sweep_queue)
    client.lambda_.invoke("sweep_worker", event)
    ran["SweepWorker"] = list(record_aws)

    # AND the consumer delivers what waits on the webhook queue
    queue = app_config.settings().webhook_queue
    messages = queues.receive(queue, wait_seconds=0, max_messages=10)
    assert messages, "a delivery waits"
    del record_aws[:]
    event = client.events.generate_sqs_event(message_bodies=[m["Body"] for m in messages], queue_name=queue)
    for record, message in zip(event["Records"], messages, strict=True):
        record.update(messageId=message["MessageId"], receiptHandle=message["ReceiptHandle"])
    client.lambda_.invoke("webhook_consumer", event)
    ran["WebhookConsumer"] = list(record_aws)

    # THEN each did AWS work, and every call it made is one its own role allows
    for function, recorded in ran.items():
        assert recorded, f"{function} made no AWS call: the scenario gave it nothing to do"
        assert denied(function, recorded) == [], function
    # and the consumer decrypted the webhook's signing secret, which only its KMS grant allows
    assert any(call.action == "kms:Decrypt" for call in _calls(ran["WebhookConsumer"]))


def test_a_role_narrower_than_the_calls_fails_the_check(record_aws: list[AwsCall]) -> None:
    # the consumer's calls, judged by the sweep's role (which decrypts nothing)
    boto3.client("kms").encrypt(KeyId=app_config.settings().kms_key_id, Plaintext=b"x",
                                EncryptionContext={"account_id": "a", "connection_id": "c"})
    recorded = [c for c in record_aws if c[0] == "kms"]
    assert denied("Sweep", recorded) != [] and denied("APIHandler", recorded) == []
