"""What `infra/resources.json` holds as a whole: its own resources (the tables, the secrets key,
the queues and what watches them) and nothing else; what it adds to Chalice's resources (each
queue consumer's `DependsOn` on its queue, so that Lambda's event source is made after the queue,
and, on the event source of a consumer that answers `batchItemFailures`, `FunctionResponseTypes:
[ReportBatchItemFailures]`, without which Lambda ignores the answer and deletes the whole batch;
the API's name and its stage throttle); and its Stage parameter.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from chalicelib.store.models import TABLES
from tests.infra import (
    CHALICE_FUNCTIONS,
    QUEUES,
    REPORT_BATCH_ITEM_FAILURES,
    ROOT,
    overlays,
    own_resources,
    stages,
    template,
)
from tests.test_infra_throttle import THROTTLE


# What the fragment holds besides tables, key and queues (tests/test_deploy.py,
# tests/test_infra_alarms.py, tests/test_infra_roles.py, tests/test_infra_edge.py and
# tests/test_infra_data.py check each kind): the stage's public-url parameter, a log group per
# function and the API's access log, the alarms, their topic and the dashboard, a role per
# function, the optional backups.
def observability_types() -> list[str]:
    """Log groups, alarms (tests/test_infra_alarms.py), the dashboard, the roles, backups."""
    alarms = 2 * len(QUEUES) + len(CHALICE_FUNCTIONS) + 1 + 3 + 1 + 3 + 1  # the last: vendor failure rate
    return (["AWS::SSM::Parameter", "AWS::SNS::Topic", "AWS::SNS::Subscription", "AWS::CloudWatch::Dashboard"]
            + ["AWS::Logs::LogGroup"] * (len(CHALICE_FUNCTIONS) + 1)
            + ["AWS::CloudWatch::Alarm"] * alarms
            + ["AWS::IAM::Role"] * (len(CHALICE_FUNCTIONS) + 1)
            + ["AWS::Backup::BackupVault", "AWS::Backup::BackupPlan", "AWS::Backup::BackupSelection"])
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


TAGS = {"workset:stage": {"Ref": "Stage"}, "cost-center": {"Ref": "CostCenter"}}


def expected_overlays() -> dict[str, dict[str, Any]]:
    """What the fragment must add to Chalice's functions (each its role, tags, tracing and the
    stage's names; the consumers' wait for their queues and partial batch responses, by `QUEUES`)
    and to its API (name, throttle, endpoint type, tags, tracing, access log)."""
    access_log = template()["Resources"]["RestAPI"]["Properties"]["AccessLogSetting"]  # tests/test_infra_edge.py
    wanted: dict[str, dict[str, Any]] = {
        "RestAPI": {"Properties": {"Name": API_NAME, "DefinitionBody": {"info": {"title": API_NAME}},
                                   "MethodSettings": THROTTLE, "Tags": TAGS, "PropagateTags": True,
                                   "EndpointConfiguration": {"Type": {"Ref": "EndpointType"}},
                                   "TracingEnabled": {"Fn::If": ["TracesWithXRay", True, False]},
                                   "AccessLogSetting": access_log}}}
    for function in CHALICE_FUNCTIONS:
        wanted[function] = {"Properties": {
            "Role": {"Fn::GetAtt": [f"{function}Role", "Arn"]}, "Tags": TAGS, "PropagateTags": True,
            "Tracing": {"Ref": "Tracing"}, "AutoPublishAlias": "live",
            "Environment": {"Variables": {"WORKSET_STAGE": {"Ref": "Stage"},
                                          "WORKSET_TABLE_PREFIX": {"Fn::Sub": "workset-${Stage}"},
                                          "WORKSET_HISTORY_RETENTION_DAYS": {"Ref": "HistoryRetentionDays"}}}}}
    wanted["APIHandler"]["Properties"]["Environment"]["Variables"]["WORKSET_MAX_LISTENS_PER_ACCOUNT"] = {
        "Ref": "MaxListensPerAccount"}
    wanted["APIHandler"]["Properties"]["ReservedConcurrentExecutions"] = {
        "Fn::If": ["ReservesApiConcurrency", {"Ref": "ApiReservedConcurrency"}, {"Ref": "AWS::NoValue"}]}
    # the API's permission to invoke APIHandler names its alias (infra/alias_api.py points the routes there)
    wanted["APIHandlerInvokePermission"] = {"Properties": {"FunctionName": {"Ref": "APIHandlerAliaslive"}}}
    for queue in QUEUES:
        overlay = wanted[queue.consumer_id]
        overlay["DependsOn"] = [queue.logical_id]
        if queue.reports_batch_item_failures:
            overlay["Properties"]["Events"] = {queue.event_id: {"Properties": {
                "FunctionResponseTypes": [REPORT_BATCH_ITEM_FAILURES]}}}
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
    doc["Resources"]["SweepWorker"]["Properties"]["Events"] = {"SweepWorkerSqsEventSource": {"Properties": {
        "FunctionResponseTypes": [REPORT_BATCH_ITEM_FAILURES]}}}


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


@pytest.mark.parametrize(("stage", "allowed"), [
    ("dev", True), ("prod", True), ("staging-2", True), ("team-a-eu", True), ("a", True), ("a" * 21, True),
    ("a" * 22, False), ("Prod", False), ("2nd", False), ("a-", False), ("a--b", False), ("a_b", False), ("", False),
    ("dev;rm", False),
])
def test_the_stage_parameter_takes_any_well_formed_name(stage: str, allowed: bool) -> None:
    """Free-form stages (the chalice stages among them): names AWS accepts in every resource name
    built from it (tables, queues, a 64-character role name's prefix, the key alias)."""
    parameter = template()["Parameters"]["Stage"]
    assert "Default" not in parameter  # a template packaged for one stage must be told which
    assert (re.fullmatch(parameter["AllowedPattern"], stage) is not None) is allowed
    assert all(re.fullmatch(parameter["AllowedPattern"], known) for known in stages())
    script = (ROOT / "infra" / "build.sh").read_text()
    assert "export WORKSET_STAGE=$stage" in script
    if not allowed and stage:  # build.sh (and so deploy.sh) refuses it before building anything
        for command in ("build.sh", "deploy.sh"):
            checked = subprocess.run(["bash", str(ROOT / "infra" / command), stage, "/nonexistent/out"],
                                     capture_output=True, text=True, timeout=30, check=False)
            assert checked.returncode == 2 and "a stage is" in checked.stderr, (command, checked.stderr)
