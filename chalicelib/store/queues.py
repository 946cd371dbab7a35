"""SQS: the queues Workset hands work to (the sweep's batches; the webhook outbox later)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.base import log
from chalicelib.base.config import settings

SEND_BATCH = 10  # SQS takes at most ten messages per SendMessageBatch
MAX_RECEIVES = 5  # deliveries before a message is parked in the dead-letter queue


@dataclass(frozen=True)
class Message:
    """One queued message as an event source (Lambda's, or the local stack's) hands it over."""

    message_id: str
    body: str
    receipt_handle: str
    receive_count: int


@lru_cache(maxsize=1)
def _sqs() -> Any:
    return boto3.client("sqs", region_name=settings().aws_region)


@lru_cache(maxsize=8)
def _url(name: str) -> str:
    return _sqs().get_queue_url(QueueName=name)["QueueUrl"]


def send(name: str, bodies: list[dict[str, Any]]) -> None:
    """Put each body on the queue as one JSON message."""
    for start in range(0, len(bodies), SEND_BATCH):
        chunk = bodies[start:start + SEND_BATCH]
        entries = [{"Id": str(index), "MessageBody": json.dumps(body)} for index, body in enumerate(chunk)]
        answer = _sqs().send_message_batch(QueueUrl=_url(name), Entries=entries)
        if answer.get("Failed"):
            raise RuntimeError(f"SQS refused {len(answer['Failed'])} message(s) for {name}")


def ensure(name: str) -> str:
    """Create a queue and its dead-letter queue where they do not exist (local stack and tests;
    in AWS, infra/ declares them)."""
    client = _sqs()
    dead = client.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dead_arn = client.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": dead_arn, "maxReceiveCount": str(MAX_RECEIVES)})
    url = client.create_queue(QueueName=name, Attributes={"RedrivePolicy": policy, "VisibilityTimeout": "60"})
    return url["QueueUrl"]


def receive(name: str, *, wait_seconds: int = 1, max_messages: int = 10) -> list[dict[str, Any]]:
    """Messages waiting on a queue (the local stack's stand-in for Lambda's event source)."""
    answer = _sqs().receive_message(QueueUrl=_url(name), WaitTimeSeconds=wait_seconds,
                                    MaxNumberOfMessages=max_messages, AttributeNames=["ApproximateReceiveCount"])
    return answer.get("Messages", [])


# What SQS answers when the message is no longer ours to put back: its receipt went stale (it was
# received again, or deleted) or it is not in flight. Expected now and then; the query-protocol
# spelling of the second is "AWS.SimpleQueueService.MessageNotInflight".
_GONE = frozenset({"ReceiptHandleIsInvalid", "MessageNotInflight"})


def retry_later(name: str, receipt_handle: str, seconds: int) -> None:
    """Make a message that failed visible again after `seconds` (the retry's backoff). Best
    effort: if it fails, the queue's own visibility timeout applies. A stale receipt is expected
    and passes quietly; any other refusal (an AccessDenied from a policy that does not grant it)
    or SQS out of reach is logged as a failure."""
    try:
        _sqs().change_message_visibility(QueueUrl=_url(name), ReceiptHandle=receipt_handle,
                                         VisibilityTimeout=seconds)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code", "").rpartition(".")[2] not in _GONE:
            log.failure("queue.retry_later", error, queue=name)
    except BotoCoreError as error:
        log.failure("queue.retry_later", error, queue=name)


def delete(name: str, receipt_handle: str) -> None:
    """Acknowledge a message that was handled."""
    _sqs().delete_message(QueueUrl=_url(name), ReceiptHandle=receipt_handle)
