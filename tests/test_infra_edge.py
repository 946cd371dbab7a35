"""The stack as an account's rules see it: every taggable resource carries the stage and the cost
center; the API's endpoint type is a parameter (REGIONAL by default), its stage is throttled and
writes JSON access logs, X-Ray is a switch, and APIHandler may have reserved concurrency.
Checked on infra/resources.json and on the packaged template (`chalice package` + the fragment).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.infra import CHALICE_FUNCTIONS, evaluate, packaged_fixture, template  # noqa: F401 - fixture `packaged`

# Resource types of the stack that take tags as a list of {Key, Value} or (SAM, SSM) as a map.
LIST_TAGGED = {"AWS::DynamoDB::Table", "AWS::KMS::Key", "AWS::SQS::Queue", "AWS::SNS::Topic", "AWS::Logs::LogGroup",
               "AWS::CloudWatch::Alarm", "AWS::IAM::Role"}
MAP_TAGGED = {"AWS::SSM::Parameter", "AWS::Serverless::Function", "AWS::Serverless::Api"}
# What cannot carry tags (CloudFormation has no Tags property for them).
UNTAGGABLE = {"AWS::KMS::Alias", "AWS::SNS::Subscription", "AWS::WAFv2::WebACLAssociation", "AWS::CloudWatch::Dashboard",
              "AWS::Backup::BackupSelection", "AWS::Lambda::Permission"}
MAP_TAGGED_AS = {"AWS::Backup::BackupVault": "BackupVaultTags", "AWS::Backup::BackupPlan": "BackupPlanTags"}
WANTED = {"workset:stage": "dev", "cost-center": "cc-42"}
PARAMETERS = {"Stage": "dev", "CostCenter": "cc-42"}


def tag_problems(doc: dict[str, Any]) -> list[str]:
    """Taggable resources without both tags (nothing: [])."""
    problems = []
    for logical_id, resource in doc["Resources"].items():
        kind = resource.get("Type")
        tags = evaluate(resource.get("Properties", {}).get(MAP_TAGGED_AS.get(kind, "Tags")), PARAMETERS)
        if kind in LIST_TAGGED:
            found = {tag["Key"]: tag["Value"] for tag in tags or []}
        elif kind in MAP_TAGGED or kind in MAP_TAGGED_AS:
            found = dict(tags or {})
            if kind.startswith("AWS::Serverless::") and resource["Properties"].get("PropagateTags") is not True:
                problems.append(f"{logical_id} does not pass its tags on to what SAM makes of it")
        elif kind in UNTAGGABLE:
            continue
        else:
            problems.append(f"{logical_id}: {kind} is neither known taggable nor untaggable")
            continue
        if {key: found.get(key) for key in WANTED} != WANTED:
            problems.append(f"{logical_id} has tags {found}")
    return problems


def own_and_overlaid(doc: dict[str, Any]) -> dict[str, Any]:
    """The fragment's resources, its overlays on Chalice's typed as Chalice makes them."""
    kinds = {function: "AWS::Serverless::Function" for function in CHALICE_FUNCTIONS} | {
        "RestAPI": "AWS::Serverless::Api", "APIHandlerInvokePermission": "AWS::Lambda::Permission"}
    return {"Resources": {i: {"Type": kinds[i], **r} if "Type" not in r else r for i, r in doc["Resources"].items()}}


def test_every_taggable_resource_of_the_fragment_is_tagged() -> None:
    assert tag_problems(own_and_overlaid(template())) == []


def test_every_taggable_resource_of_the_packaged_template_is_tagged(packaged: dict[str, Any]) -> None:
    assert tag_problems(packaged["template"]) == []


def _untagged_queue(doc: dict[str, Any]) -> None:
    del doc["Resources"]["SweepQueue"]["Properties"]["Tags"]


def _no_propagation(doc: dict[str, Any]) -> None:
    doc["Resources"]["RestAPI"]["Properties"]["PropagateTags"] = False


def _unknown_kind(doc: dict[str, Any]) -> None:
    doc["Resources"]["Extra"] = {"Type": "AWS::S3::Bucket", "Properties": {}}


@pytest.mark.parametrize("break_it", [_untagged_queue, _no_propagation, _unknown_kind])
def test_an_untagged_resource_fails_the_check(break_it: Callable[[dict[str, Any]], None]) -> None:
    doc = copy.deepcopy(own_and_overlaid(template()))
    break_it(doc)
    assert tag_problems(doc) != []


def test_the_api_is_regional_throttled_and_writes_json_access_logs(packaged: dict[str, Any]) -> None:
    parameters = template()["Parameters"]
    assert parameters["EndpointType"]["Default"] == "REGIONAL"
    api = packaged["template"]["Resources"]["RestAPI"]["Properties"]
    assert api["EndpointConfiguration"] == {"Type": {"Ref": "EndpointType"}}
    (throttle,) = api["MethodSettings"]
    assert (throttle["ResourcePath"], throttle["HttpMethod"]) == ("/*", "*")
    assert throttle["ThrottlingRateLimit"] == {"Ref": "ApiThrottleRateLimit"}
    assert throttle["ThrottlingBurstLimit"] == {"Ref": "ApiThrottleBurstLimit"}
    on = evaluate(api["AccessLogSetting"], {}, {"WritesAccessLogs": True})
    assert on["DestinationArn"] == {"Fn::GetAtt": ["ApiAccessLogGroup", "Arn"]}
    fields = json.loads(on["Format"])  # one JSON object a line
    assert {"requestId", "ip", "status", "latency", "integrationLatency", "error"} <= set(fields)
    assert all(value.startswith("$context.") for value in fields.values())
    assert parameters["ApiAccessLogs"]["Default"] == "On"
    group = packaged["template"]["Resources"]["ApiAccessLogGroup"]
    assert group["Condition"] == "WritesAccessLogs"
    assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionInDays"}


def test_x_ray_and_reserved_concurrency_are_parameters(packaged: dict[str, Any]) -> None:
    resources = packaged["template"]["Resources"]
    assert template()["Parameters"]["Tracing"]["Default"] == "PassThrough"
    for function in CHALICE_FUNCTIONS:
        assert resources[function]["Properties"]["Tracing"] == {"Ref": "Tracing"}, function
    assert evaluate(resources["RestAPI"]["Properties"]["TracingEnabled"], {}, {"TracesWithXRay": True}) is True
    assert evaluate(resources["RestAPI"]["Properties"]["TracingEnabled"], {}) is False
    reserved = resources["APIHandler"]["Properties"]["ReservedConcurrentExecutions"]
    assert evaluate({"x": reserved}, {"ApiReservedConcurrency": 40}, {"ReservesApiConcurrency": True}) == {"x": 40}
    assert evaluate({"x": reserved}, {"ApiReservedConcurrency": 0}) == {}  # unreserved by default
    assert template()["Parameters"]["ApiReservedConcurrency"]["Default"] == 0
