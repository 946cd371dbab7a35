"""The stage policies against the DynamoDB, KMS and SQS calls the store really makes (the fixture
`store_calls`, tests/store_tour.py): each call must be allowed, and the policy may grant nothing
that no call needs, except what Lambda's SQS event sources do with the consumer's role (receive,
delete, read attributes) on exactly the queues they consume; the store puts a message back
(`queues.retry_later`) on the queues of `QUEUES` marked so, and nowhere else.
(tests/test_policies.py checks that the committed policy files are what infra/policies.py writes.)
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import Any

import pytest

from tests.iam import (
    Call,
    allows,
    as_list,
    record_aws_fixture,  # noqa: F401 - fixture `record_aws`, which `store_calls` uses
    statements_of,
)
from tests.infra import QUEUES, policy, queue_arn, stages, table_prefix
from tests.store_tour import store_calls_fixture  # noqa: F401 - fixture `store_calls`

# What Lambda's SQS event source does with the consuming function's role (the three actions of
# the managed policy AWSLambdaSQSQueueExecutionRole). SAM adds no policy of its own to a function
# that has a role, as Chalice's functions all do: the stage policy grants them.
EVENT_SOURCE_ACTIONS = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
# Every SQS action (a wider grant must show up as allowed here).
SQS_ACTIONS = [
    "sqs:AddPermission", "sqs:CancelMessageMoveTask", "sqs:ChangeMessageVisibility", "sqs:CreateQueue",
    "sqs:DeleteMessage", "sqs:DeleteQueue", "sqs:GetQueueAttributes", "sqs:GetQueueUrl",
    "sqs:ListDeadLetterSourceQueues", "sqs:ListMessageMoveTasks", "sqs:ListQueueTags", "sqs:ListQueues",
    "sqs:PurgeQueue", "sqs:ReceiveMessage", "sqs:RemovePermission", "sqs:SendMessage", "sqs:SetQueueAttributes",
    "sqs:StartMessageMoveTask", "sqs:TagQueue", "sqs:UntagQueue",
]


# What chalicelib/base/config.py (not the store) calls: the stage's parameters in SSM.
CONFIG_ACTIONS = ("ssm:GetParameter",)


def call_grant_problems(document: dict[str, Any], stage: str, calls: list[Call]) -> list[str]:
    """What is wrong with a policy for the calls the store makes (nothing: []): a call it denies,
    an action it grants that no call (nor Lambda's event sources) needs."""
    problems = []
    denied = sorted({call.request(stage)[:2] for call in calls if not allows(document, *call.request(stage))})
    if denied:
        problems.append(f"denies calls the store makes: {denied}")
    needed = {call.action.lower() for call in calls}
    if QUEUES:  # and Lambda's event sources, through the consumers' roles
        needed |= {action.lower() for action in EVENT_SOURCE_ACTIONS}
    # and chalicelib/base/config.py's reads of the stage's parameters (tests/test_deploy.py checks on what)
    needed |= {action.lower() for action in CONFIG_ACTIONS}
    granted = {
        action.lower()
        for statement in statements_of(document)
        for action in as_list(statement["Action"])
        if not action.lower().startswith("logs:")
    }
    if granted != needed:
        problems.append(f"granted but never needed: {sorted(granted - needed)}; "
                        f"needed but never granted: {sorted(needed - granted)}")
    return problems


@pytest.mark.parametrize("stage", stages())
def test_policy_allows_every_call_the_store_makes_and_nothing_more(stage: str, store_calls: list[Call]) -> None:
    needed = {call.action.lower() for call in store_calls}
    assert {"kms:encrypt", "kms:decrypt", "sqs:getqueueurl", "sqs:sendmessage", "sqs:changemessagevisibility",
            "dynamodb:query"} <= needed
    assert call_grant_problems(policy(stage), stage, store_calls) == [], f"policy-{stage}.json"


def queue_grant_problems(document: dict[str, Any], stage: str, calls: list[Call]) -> list[str]:
    """What is wrong with a policy's SQS grants (nothing: []). Sending and putting back: the
    actions the store's calls need, on the queues they name. Consuming: what Lambda's event
    sources do, on the queues of `QUEUES`. Nothing else of SQS on any queue, nothing on a
    dead-letter queue, nothing of another stage."""
    expected = {(call.action, queue_arn(f"{table_prefix(stage)}-{call.queue}"))
                for call in calls if call.queue is not None}
    expected |= {(action, queue_arn(queue.name(stage)))
                 for queue in QUEUES for action in EVENT_SOURCE_ACTIONS}
    problems = []
    granted = set()
    for statement in statements_of(document):
        actions = as_list(statement["Action"])
        if any(action.startswith("sqs:") for action in actions):
            if not all(action.startswith("sqs:") for action in actions) or "Condition" in statement:
                problems.append(f"an SQS statement mixes services or has conditions: {statement}")
            granted |= {(action, resource) for action in actions for resource in as_list(statement["Resource"])}
    if granted != expected:
        problems.append(f"SQS grants {sorted(granted - expected)} beyond, and lack {sorted(expected - granted)}")
    for queue in QUEUES:
        name = queue.name(stage)
        here = {action for action, resource in expected if fnmatch.fnmatchcase(queue_arn(name), resource)}
        for action in SQS_ACTIONS:  # on each queue exactly its own actions
            if allows(document, action, queue_arn(name)) != (action in here):
                problems.append(f"{action} on {name}: {'granted' if action not in here else 'denied'}")
            if allows(document, action, queue_arn(f"{name}-dlq")):
                problems.append(f"{action} on {name}-dlq")
            for other in set(stages()) - {stage}:
                if allows(document, action, queue_arn(queue.name(other))):
                    problems.append(f"{action} on {queue.name(other)} (stage {other})")
    return problems


@pytest.mark.parametrize("stage", stages())
def test_policy_reaches_exactly_the_stage_queues(stage: str, store_calls: list[Call]) -> None:
    assert queue_grant_problems(policy(stage), stage, store_calls) == []
    # spelled out for the webhooks: the consumer puts a failed delivery back with its backoff there,
    # and nowhere else
    retry = "sqs:ChangeMessageVisibility"
    assert [queue.setting for queue in QUEUES if queue.retried_later] == ["webhook_queue"]
    assert allows(policy(stage), retry, queue_arn(f"workset-{stage}-webhooks"))
    for name in (f"workset-{stage}-sweep", f"workset-{stage}-webhooks-dlq", f"workset-{stage}-sweep-dlq"):
        assert not allows(policy(stage), retry, queue_arn(name)), name


def _statements(document: dict[str, Any], sid: str) -> list[dict[str, Any]]:
    """The statements of that Sid in every role (`policy` prefixes each with its function)."""
    found = [statement for statement in statements_of(document) if statement.get("Sid", "").endswith(f".{sid}")]
    assert found, sid
    return found


WEBHOOKS = "arn:aws:sqs:us-east-1:123456789012:workset-dev-webhooks"
SWEEP = "arn:aws:sqs:us-east-1:123456789012:workset-dev-sweep"


def _retry_on_the_sweep_queue_instead(document: dict[str, Any]) -> None:
    for statement in _statements(document, "WorksetWebhookRetries"):
        statement["Resource"] = [SWEEP]


def _retry_on_both_queues(document: dict[str, Any]) -> None:
    for statement in _statements(document, "WorksetWebhookRetries"):
        statement["Resource"].append(SWEEP)


def _retry_on_every_queue_of_the_stage(document: dict[str, Any]) -> None:
    for statement in _statements(document, "WorksetWebhookRetries"):
        statement["Resource"] = ["arn:aws:sqs:us-east-1:123456789012:workset-dev-*"]


def _retry_on_the_dead_letters(document: dict[str, Any]) -> None:
    for statement in _statements(document, "WorksetWebhookRetries"):
        statement["Resource"] = [f"{WEBHOOKS}-dlq"]


def _no_retry(document: dict[str, Any]) -> None:
    for statement in _statements(document, "WorksetWebhookRetries"):
        document["Statement"].remove(statement)


def _webhooks_not_consumed(document: dict[str, Any]) -> None:
    for statement in _statements(document, "WorksetQueueEventSource"):
        if WEBHOOKS in statement["Resource"]:
            statement["Resource"].remove(WEBHOOKS)


def _webhooks_not_sent(document: dict[str, Any]) -> None:
    for statement in _statements(document, "WorksetQueuesSend"):
        statement["Resource"].remove(WEBHOOKS)


def _no_outbox_index(document: dict[str, Any]) -> None:
    outbox = "arn:aws:dynamodb:us-east-1:123456789012:table/workset-dev-agents/index/outbox"
    for statement in _statements(document, "WorksetIndexes"):
        if outbox in statement["Resource"]:
            statement["Resource"].remove(outbox)


def _webhook_secret_without_its_context(document: dict[str, Any]) -> None:
    for statement in _statements(document, "WorksetSecretsKey"):
        statement["Condition"]["ForAllValues:StringEquals"]["kms:EncryptionContextKeys"] = ["account_id"]


@pytest.mark.parametrize(
    "break_it",
    [_retry_on_the_sweep_queue_instead, _retry_on_both_queues, _retry_on_every_queue_of_the_stage,
     _retry_on_the_dead_letters, _no_retry, _webhooks_not_consumed,
     _webhooks_not_sent, _no_outbox_index, _webhook_secret_without_its_context],
)
def test_a_broken_policy_fails_the_checks(break_it: Callable[[dict[str, Any]], None],
                                          store_calls: list[Call]) -> None:
    broken = policy("dev")
    break_it(broken)
    assert broken != policy("dev")
    assert call_grant_problems(broken, "dev", store_calls) + queue_grant_problems(broken, "dev", store_calls) != []
