"""The template's SQS queues (`QUEUES`): named as the settings name them, each with its dead-letter
queue after `queues.MAX_RECEIVES` deliveries, a visibility timeout for its Lambda consumer, SSE
with SQS-managed keys; the app consumes exactly those queues, and a consumer answers partial
batch responses exactly when its queue says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from chalicelib.base import config as app_config
from tests.infra import (
    DEAD_LETTER_RETENTION_SECONDS,
    QUEUES,
    VISIBILITY_PER_FUNCTION_TIMEOUT,
    Queue,
    queue_problems,
    stage_config,
    stages,
    template,
)


def consumer_timeout(stage: str, queue: Queue) -> int:
    """The consumer's timeout as Chalice resolves it (lambda_functions may override it)."""
    return int(stage_config(stage, queue.consumer).lambda_timeout)


@pytest.mark.parametrize("queue", QUEUES, ids=lambda queue: queue.setting)
@pytest.mark.parametrize("stage", stages())
def test_queues_are_named_as_the_code_names_them_with_their_dead_letter_queues(stage: str, queue: Queue) -> None:
    assert queue.name(stage).startswith(f"workset-{stage}-")
    assert queue_problems(template(), stage, queue, worker_timeout=consumer_timeout(stage, queue)) == []


def test_the_app_consumes_exactly_the_queues_of_the_template() -> None:
    """`on_sqs_message` handlers (as the tests' settings name the queues) against `QUEUES`."""
    from chalice.app import SQSEventConfig

    from app import app

    consumed = {(source.name, source.queue, source.queue_arn)
                for source in app.event_sources if isinstance(source, SQSEventConfig)}
    assert consumed == {(queue.consumer, getattr(app_config.settings(), queue.setting), None) for queue in QUEUES}


def test_consumers_answer_batch_item_failures_exactly_as_their_queues_declare(client: Any) -> None:
    """A consumer flagged `reports_batch_item_failures` answers Lambda's partial batch response
    (the packaged event source then must carry ReportBatchItemFailures); the others answer
    nothing, and fail a batch by raising. Asked with an empty batch, through Chalice's handler."""
    for queue in QUEUES:
        event = client.events.generate_sqs_event(message_bodies=[], queue_name=queue.name("dev"))
        answer = client.lambda_.invoke(queue.consumer, event).payload
        if queue.reports_batch_item_failures:
            assert answer == {"batchItemFailures": []}, queue.consumer
        else:
            assert answer is None, queue.consumer


def _main(doc: dict[str, Any], queue: Queue) -> dict[str, Any]:
    return doc["Resources"][queue.logical_id]


def _dead_letters(doc: dict[str, Any], queue: Queue) -> dict[str, Any]:
    return doc["Resources"][queue.dead_letter_id]


def _sub(name: str) -> dict[str, str]:
    return {"Fn::Sub": name}


def _queue_misnamed(doc: dict[str, Any], queue: Queue) -> None:
    _main(doc, queue)["Properties"]["QueueName"] = _sub(_main(doc, queue)["Properties"]["QueueName"]["Fn::Sub"] + "s")


def _queue_without_stage(doc: dict[str, Any], queue: Queue) -> None:
    _main(doc, queue)["Properties"]["QueueName"] = queue.name("dev").replace("-dev-", "-")


def _dead_letters_misnamed(doc: dict[str, Any], queue: Queue) -> None:
    name = _dead_letters(doc, queue)["Properties"]["QueueName"]["Fn::Sub"]
    _dead_letters(doc, queue)["Properties"]["QueueName"] = _sub(name.replace("-dlq", "-dead"))


def _three_receives(doc: dict[str, Any], queue: Queue) -> None:
    _main(doc, queue)["Properties"]["RedrivePolicy"]["maxReceiveCount"] = 3


def _no_redrive(doc: dict[str, Any], queue: Queue) -> None:
    del _main(doc, queue)["Properties"]["RedrivePolicy"]


def _redrive_to_a_name(doc: dict[str, Any], queue: Queue) -> None:
    _main(doc, queue)["Properties"]["RedrivePolicy"]["deadLetterTargetArn"] = "arn:aws:sqs:us-east-1:1:other-dlq"


def _redrive_to_another_queues_dead_letters(doc: dict[str, Any], queue: Queue) -> None:
    other = next(other for other in QUEUES if other != queue)
    _main(doc, queue)["Properties"]["RedrivePolicy"]["deadLetterTargetArn"] = {
        "Fn::GetAtt": [other.dead_letter_id, "Arn"]}


def _no_dead_letter_queue(doc: dict[str, Any], queue: Queue) -> None:
    del doc["Resources"][queue.dead_letter_id]


def _local_visibility(doc: dict[str, Any], queue: Queue) -> None:
    _main(doc, queue)["Properties"]["VisibilityTimeout"] = 60  # what `queues.ensure` sets locally


def _default_visibility(doc: dict[str, Any], queue: Queue) -> None:
    del _main(doc, queue)["Properties"]["VisibilityTimeout"]  # 30 s


def _dead_letters_kept_four_days(doc: dict[str, Any], queue: Queue) -> None:
    del _dead_letters(doc, queue)["Properties"]["MessageRetentionPeriod"]


def _queue_kept_as_long_as_its_dead_letters(doc: dict[str, Any], queue: Queue) -> None:
    _main(doc, queue)["Properties"]["MessageRetentionPeriod"] = DEAD_LETTER_RETENTION_SECONDS


def _kms_encrypted(doc: dict[str, Any], queue: Queue) -> None:
    _main(doc, queue)["Properties"].pop("SqsManagedSseEnabled")
    _main(doc, queue)["Properties"]["KmsMasterKeyId"] = "alias/aws/sqs"


def _unencrypted(doc: dict[str, Any], queue: Queue) -> None:
    _main(doc, queue)["Properties"].pop("SqsManagedSseEnabled")


def _dead_letters_unencrypted(doc: dict[str, Any], queue: Queue) -> None:
    _dead_letters(doc, queue)["Properties"]["SqsManagedSseEnabled"] = False


def _queue_retained(doc: dict[str, Any], queue: Queue) -> None:
    _main(doc, queue)["DeletionPolicy"] = "Retain"


def _fifo(doc: dict[str, Any], queue: Queue) -> None:
    _main(doc, queue)["Properties"]["FifoQueue"] = True


@pytest.mark.parametrize(
    "break_it",
    [_queue_misnamed, _queue_without_stage, _dead_letters_misnamed, _three_receives, _no_redrive, _redrive_to_a_name,
     _redrive_to_another_queues_dead_letters, _no_dead_letter_queue, _local_visibility, _default_visibility,
     _dead_letters_kept_four_days, _queue_kept_as_long_as_its_dead_letters, _kms_encrypted, _unencrypted,
     _dead_letters_unencrypted, _queue_retained, _fifo],
)
def test_a_broken_queue_fails_the_check(break_it: Callable[[dict[str, Any], Queue], None]) -> None:
    for queue in QUEUES:  # each queue broken alone; the others stay as they are
        broken = template()
        break_it(broken, queue)
        assert queue_problems(broken, "dev", queue, worker_timeout=consumer_timeout("dev", queue)) != [], queue.setting


@pytest.mark.parametrize("queue", QUEUES, ids=lambda queue: queue.setting)
def test_a_longer_consumer_timeout_needs_a_longer_visibility_timeout(queue: Queue) -> None:
    """The relation is checked, not a number: a consumer given a timeout just past a sixth of the
    visibility timeout (in .chalice/config.json) fails."""
    visibility = int(template()["Resources"][queue.logical_id]["Properties"]["VisibilityTimeout"])
    longest = visibility // VISIBILITY_PER_FUNCTION_TIMEOUT
    assert queue_problems(template(), "dev", queue, worker_timeout=longest) == []
    assert queue_problems(template(), "dev", queue, worker_timeout=longest + 1) != []
    window = visibility - VISIBILITY_PER_FUNCTION_TIMEOUT * longest + 1  # and so does a batching window
    assert queue_problems(template(), "dev", queue, worker_timeout=longest, batching_window=window) != []
