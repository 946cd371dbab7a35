"""What bounds the deployed API's bill against strangers (infra/resources.json): API Gateway's
stage throttle over every route, as template parameters, and an optional AWS WAF web ACL
associated with the stage. Checked on the fragment, and on the template `chalice package` builds
(cfn-lint over it is tests/test_infra_package.py)."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.infra import (
    ROOT,
    packaged_fixture,  # noqa: F401 - fixture `packaged`: `chalice package`, once for this module
    stage_config,
    template,
)

THROTTLE = [{"ResourcePath": "/*", "HttpMethod": "*", "ThrottlingRateLimit": {"Ref": "ApiThrottleRateLimit"},
             "ThrottlingBurstLimit": {"Ref": "ApiThrottleBurstLimit"}}]
STAGE_ARN = "arn:${AWS::Partition}:apigateway:${AWS::Region}::/restapis/${RestAPI}/stages/${RestAPI.Stage}"
WEB_ACL = "arn:aws:wafv2:eu-west-1:123456789012:regional/webacl/workset-acl/a1b2c3d4-5678-90ab-cdef-EXAMPLE11111"


def throttle_problems(doc: dict[str, Any]) -> list[str]:
    """What is wrong with the stage's throttle and the web ACL option (nothing: [])."""
    problems = []
    parameters, resources = doc.get("Parameters", {}), doc.get("Resources", {})
    for name, default in (("ApiThrottleRateLimit", 50), ("ApiThrottleBurstLimit", 100)):
        parameter = parameters.get(name, {})
        if parameter.get("Type") != "Number" or parameter.get("Default") != default or parameter.get("MinValue") != 1:
            problems.append(f"{name} is not a Number of at least 1, {default} by default: {parameter}")
    # one setting for every method of every resource: a route left out would be unthrottled
    settings = resources.get("RestAPI", {}).get("Properties", {}).get("MethodSettings")
    if settings != THROTTLE:
        problems.append(f"RestAPI's MethodSettings are {settings}, want {THROTTLE}")
    acl = parameters.get("WebAclArn", {})
    if acl.get("Type") != "String" or acl.get("Default") != "":
        problems.append(f"WebAclArn is not an optional string: {acl}")
    if doc.get("Conditions", {}).get("HasWebAcl") != {"Fn::Not": [{"Fn::Equals": [{"Ref": "WebAclArn"}, ""]}]}:
        problems.append("HasWebAcl is not `WebAclArn is given`")
    associations = {logical_id: resource for logical_id, resource in resources.items()
                    if resource.get("Type") == "AWS::WAFv2::WebACLAssociation"}
    wanted = {"Type": "AWS::WAFv2::WebACLAssociation", "Condition": "HasWebAcl",
              "Properties": {"ResourceArn": {"Fn::Sub": STAGE_ARN}, "WebACLArn": {"Ref": "WebAclArn"}}}
    if list(associations.values()) != [wanted]:
        problems.append(f"want one association of the web ACL with the API's own stage, found {associations}")
    return problems


def test_the_stage_is_throttled_and_a_web_acl_can_be_put_in_front() -> None:
    assert throttle_problems(template()) == []


def test_the_packaged_api_is_throttled_on_its_own_stage(packaged: dict[str, Any]) -> None:
    doc = packaged["template"]
    assert throttle_problems(doc) == []
    # the settings are on Chalice's API (SAM's Api: its stage carries MethodSettings), whose stage
    # is the one the association names (`RestAPI.Stage`, which SAM resolves to the stage it makes)
    api = doc["Resources"]["RestAPI"]
    assert api["Type"] == "AWS::Serverless::Api"
    assert api["Properties"]["StageName"] == stage_config("dev").api_gateway_stage
    assert {"ApiThrottleRateLimit", "ApiThrottleBurstLimit", "WebAclArn"} <= set(doc["Parameters"])


@pytest.mark.parametrize(("arn", "allowed"), [
    ("", True),
    (WEB_ACL.replace("EXAMPLE11111", "0123456789ab"), True),
    ("arn:aws-us-gov:wafv2:us-gov-west-1:123456789012:regional/webacl/acl/01234567-89ab-cdef-0123-456789abcdef", True),
    # a CloudFront (global) web ACL cannot be associated with an API Gateway stage
    ("arn:aws:wafv2:us-east-1:123456789012:global/webacl/acl/01234567-89ab-cdef-0123-456789abcdef", False),
    ("arn:aws:waf-regional:eu-west-1:123456789012:webacl/01234567-89ab-cdef-0123-456789abcdef", False),
    ("arn:aws:sns:eu-west-1:123456789012:ops", False),
    ("workset-acl", False),
])
def test_the_web_acl_parameter_takes_a_regional_web_acl_arn_only(arn: str, allowed: bool) -> None:
    pattern = template()["Parameters"]["WebAclArn"]["AllowedPattern"]
    assert (re.fullmatch(pattern, arn) is not None) is allowed


def test_deploy_sh_passes_on_every_parameter_of_the_template() -> None:
    """`infra/deploy.sh prod bucket ApiThrottleRateLimit=20` must reach the stack, not stop as an
    unknown override."""
    script = (ROOT / "infra" / "deploy.sh").read_text()
    accepted = re.search(r"^\s*((?:\w+=\*\s*\|\s*)*\w+=\*)\)\s*;;", script, re.MULTILINE)
    assert accepted is not None
    names = {option.strip().removesuffix("=*") for option in accepted.group(1).split("|")}
    assert names == set(template()["Parameters"]) - {"Stage"}


def _settings(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return doc["Resources"]["RestAPI"]["Properties"]["MethodSettings"]


def _association(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["Resources"]["ApiWebAclAssociation"]


@pytest.mark.parametrize("break_it", [
    lambda doc: doc["Resources"]["RestAPI"]["Properties"].pop("MethodSettings"),
    lambda doc: _settings(doc)[0].update(ResourcePath="/mcp"),
    lambda doc: _settings(doc)[0].update(HttpMethod="POST"),
    lambda doc: _settings(doc)[0].update(ThrottlingRateLimit=10000),
    lambda doc: _settings(doc)[0].pop("ThrottlingBurstLimit"),
    lambda doc: doc["Parameters"]["ApiThrottleRateLimit"].update(MinValue=0),
    lambda doc: doc["Parameters"]["ApiThrottleBurstLimit"].update(Default=5000),
    lambda doc: doc["Parameters"]["WebAclArn"].pop("Default"),
    lambda doc: _association(doc).pop("Condition"),
    lambda doc: _association(doc)["Properties"].update(ResourceArn={"Fn::Sub": STAGE_ARN.replace(
        "${RestAPI.Stage}", "prod")}),
    lambda doc: doc["Resources"].pop("ApiWebAclAssociation"),
    lambda doc: doc["Conditions"].update(HasWebAcl={"Fn::Equals": [{"Ref": "WebAclArn"}, ""]}),
])
def test_a_broken_throttle_or_web_acl_fails_the_check(break_it: Callable[[dict[str, Any]], Any]) -> None:
    broken = copy.deepcopy(template())
    break_it(broken)
    assert throttle_problems(broken) != []
