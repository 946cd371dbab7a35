"""What `infra/resources.json` holds as a whole: its own resources (the tables, the secrets key,
the queues and what watches them) and nothing else; what it adds to Chalice's resources (each
queue consumer's `DependsOn` on its queue, so that Lambda's event source is made after the queue,
and, on the event source of a consumer that answers `batchItemFailures`, `FunctionResponseTypes:
[ReportBatchItemFailures]`, without which Lambda ignores the answer and deletes the whole batch;
the API's name and its stage throttle); and its Stage parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from chalicelib.store.models import TABLES
from tests.infra import CHALICE_FUNCTIONS, QUEUES, REPORT_BATCH_ITEM_FAILURES, overlays, own_resources, stages, template
from tests.test_infra_throttle import THROTTLE


# What the fragment holds besides tables, key and queues (tests/test_deploy.py checks each kind):
# the stage's public-url parameter, a log group per function, the alarms and their topic.
def observability_types() -> list[str]:
    """A log group per function; alarms: each dead-letter queue, each function's errors and
    throttles, the API's 5xx, each table's throttling, and the app's three metrics of trouble (sweep
    failures, run ends left unrecorded, replayed OAuth tokens)."""
    return (["AWS::SSM::Parameter", "AWS::SNS::Topic", "AWS::SNS::Subscription"]
            + ["AWS::Logs::LogGroup"] * len(CHALICE_FUNCTIONS)
            + ["AWS::CloudWatch::Alarm"] * (len(QUEUES) + 2 * len(CHALICE_FUNCTIONS) + 1 + len(TABLES) + 3))
# The API's name, which the 5XXError alarm names: one per stage (as Name, and as the definition's
# title, which API Gateway may take instead).
API_NAME = {"Fn::Sub": "workset-${Stage}"}


def test_the_template_holds_the_tables_the_secrets_key_and_the_queues_and_nothing_else() -> None:
    types = sorted(resource["Type"] for resource in own_resources(template()).values())
    assert types == sorted(["AWS::DynamoDB::Table"] * len(TABLES) + ["AWS::KMS::Key", "AWS::KMS::Alias"]
                           + ["AWS::SQS::Queue"] * 2 * len(QUEUES) + observability_types()
                           + ["AWS::WAFv2::WebACLAssociation"])  # the optional web ACL (test_infra_throttle.py)
    # and on Chalice's resources, only the consumers' wait for their queues (and the partial
    # batch responses of those that answer them), and the API's name and stage throttle
    assert overlays(template()) == expected_overlays()


def expected_overlays() -> dict[str, dict[str, Any]]:
    """What the fragment must add to Chalice's consumer functions, by `QUEUES`, and to its API."""
    wanted: dict[str, dict[str, Any]] = {
        "RestAPI": {"Properties": {"Name": API_NAME, "DefinitionBody": {"info": {"title": API_NAME}},
                                   "MethodSettings": THROTTLE}}}
    for queue in QUEUES:
        overlay: dict[str, Any] = {"DependsOn": [queue.logical_id]}
        if queue.reports_batch_item_failures:
            overlay["Properties"] = {"Events": {queue.event_id: {"Properties": {
                "FunctionResponseTypes": [REPORT_BATCH_ITEM_FAILURES]}}}}
        wanted[queue.consumer_id] = overlay
    return wanted


def _webhook_overlay_dropped(doc: dict[str, Any]) -> None:
    del doc["Resources"]["WebhookConsumer"]["Properties"]


def _webhook_overlay_on_a_misnamed_event(doc: dict[str, Any]) -> None:
    events = doc["Resources"]["WebhookConsumer"]["Properties"]["Events"]
    events["WebhookConsumerSqsEvent"] = events.pop("WebhookConsumerSqsEventSource")


def _webhook_overlay_misspelt(doc: dict[str, Any]) -> None:
    events = doc["Resources"]["WebhookConsumer"]["Properties"]["Events"]
    events["WebhookConsumerSqsEventSource"]["Properties"]["FunctionResponseTypes"] = ["ReportBatchItemFailure"]


def _partial_batches_on_the_sweep_worker(doc: dict[str, Any]) -> None:
    doc["Resources"]["SweepWorker"]["Properties"] = {"Events": {"SweepWorkerSqsEventSource": {"Properties": {
        "FunctionResponseTypes": [REPORT_BATCH_ITEM_FAILURES]}}}}


def _webhook_consumer_does_not_wait(doc: dict[str, Any]) -> None:
    del doc["Resources"]["WebhookConsumer"]["DependsOn"]


@pytest.mark.parametrize(
    "break_it",
    [_webhook_overlay_dropped, _webhook_overlay_on_a_misnamed_event, _webhook_overlay_misspelt,
     _partial_batches_on_the_sweep_worker, _webhook_consumer_does_not_wait],
)
def test_a_broken_overlay_fails_the_check(break_it: Callable[[dict[str, Any]], None]) -> None:
    broken = template()
    break_it(broken)
    assert overlays(broken) != expected_overlays()


def test_the_stage_parameter_allows_exactly_the_chalice_stages() -> None:
    parameter = template()["Parameters"]["Stage"]
    assert "Default" not in parameter  # a template packaged for one stage must be told which
    assert sorted(parameter["AllowedValues"]) == stages()
