"""One IAM role per function (infra/resources.json, `<function>Role`), each with only what its
function uses: the sweep cannot read the console secret or any connection, the webhook consumer
cannot read the connections table (so no connection secret) nor encrypt, only the API handler reads
the console secret. Every ARN is built from AWS::Partition, AWS::Region and AWS::AccountId (GovCloud
and China deploy; no other region or account is reached), and every role takes the optional
permissions boundary. What each function really calls is tests/test_infra_role_calls.py.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.iam import allows, statements_of, table_arn
from tests.infra import ARN_ACCOUNT, ARN_REGION, CHALICE_FUNCTIONS, KEY_ARN, queue_arn, role_policy, template

PARTITIONED_ARN = re.compile(r"^arn:\$\{AWS::Partition\}:[a-z0-9-]+:\$\{AWS::Region\}:\$\{AWS::AccountId\}:")


def parameter_arn(name: str) -> str:
    return f"arn:aws:ssm:{ARN_REGION}:{ARN_ACCOUNT}:parameter{name}"


def reads_console_secret(document: dict[str, Any], stage: str = "dev") -> bool:
    secret = f"/workset/{stage}/console-secret"
    through_ssm = {"kms:ViaService": f"ssm.{ARN_REGION}.amazonaws.com",
                   "kms:EncryptionContext:PSARN": parameter_arn(secret)}
    return allows(document, "ssm:GetParameter", parameter_arn(secret)) or allows(
        document, "kms:Decrypt", KEY_ARN, through_ssm)


def decrypts_connection_secrets(document: dict[str, Any], stage: str = "dev") -> bool:
    """Reads a connection's stored secret (the connections table) and may decrypt it."""
    context = {"kms:ResourceAliases": [f"alias/workset-{stage}"],
               "kms:EncryptionContextKeys": ["account_id", "connection_id"]}
    return allows(document, "dynamodb:GetItem", table_arn(stage, "connections")) and allows(
        document, "kms:Decrypt", KEY_ARN, context)


def role_problems(doc: dict[str, Any]) -> list[str]:
    """What is wrong with the template's roles (nothing: [])."""
    resources = doc["Resources"]
    problems = []
    roles = {i: r for i, r in resources.items() if r.get("Type") == "AWS::IAM::Role"}
    # and AWS Backup's, when Backups is Daily
    if set(roles) - {"BackupRole"} != {f"{function}Role" for function in CHALICE_FUNCTIONS}:
        problems.append(f"want one role per function, found {sorted(roles)}")
    for function in CHALICE_FUNCTIONS:
        if resources.get(function, {}).get("Properties", {}).get("Role") != {"Fn::GetAtt": [f"{function}Role", "Arn"]}:
            problems.append(f"{function} does not run as {function}Role")
    for logical_id, role in roles.items():
        properties = role["Properties"]
        if properties.get("PermissionsBoundary") != {
                "Fn::If": ["HasPermissionsBoundary", {"Ref": "PermissionsBoundaryArn"}, {"Ref": "AWS::NoValue"}]}:
            problems.append(f"{logical_id} does not take the PermissionsBoundaryArn parameter")
        if "ManagedPolicyArns" in properties and logical_id != "BackupRole":
            problems.append(f"{logical_id} has managed policies")
        for policy in properties.get("Policies", []):
            for statement in statements_of(policy["PolicyDocument"]):
                if "Fn::If" in statement:  # the optional X-Ray grant: its services take no ARN
                    continue
                listed = statement["Resource"]
                for resource in listed if isinstance(listed, list) else [listed]:
                    text = resource.get("Fn::Sub") if isinstance(resource, dict) else resource
                    if not isinstance(text, str) or not PARTITIONED_ARN.match(text):
                        problems.append(f"{logical_id} {statement['Sid']}: {resource} is not a partition-built ARN")
    return problems


def test_each_function_has_its_own_role_with_partition_built_arns_and_the_boundary() -> None:
    assert role_problems(template()) == []
    parameter = template()["Parameters"]["PermissionsBoundaryArn"]
    assert parameter["Default"] == ""
    assert re.match(parameter["AllowedPattern"], "arn:aws-us-gov:iam::123456789012:policy/boundaries/workset")
    assert not re.match(parameter["AllowedPattern"], "arn:aws:iam::123456789012:role/x")


def _shared_role(doc: dict[str, Any]) -> None:
    doc["Resources"]["Sweep"]["Properties"]["Role"] = {"Fn::GetAtt": ["APIHandlerRole", "Arn"]}


def _any_region(doc: dict[str, Any]) -> None:
    statement = doc["Resources"]["SweepRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"][0]
    statement["Resource"][0] = "arn:aws:dynamodb:*:*:table/workset-dev-agents"


def _no_boundary(doc: dict[str, Any]) -> None:
    del doc["Resources"]["WebhookConsumerRole"]["Properties"]["PermissionsBoundary"]


@pytest.mark.parametrize("break_it", [_shared_role, _any_region, _no_boundary])
def test_a_broken_role_fails_the_check(break_it: Callable[[dict[str, Any]], None]) -> None:
    doc = copy.deepcopy(template())
    break_it(doc)
    assert role_problems(doc) != []


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_only_the_api_reads_the_console_secret(stage: str) -> None:
    readers = [f for f in CHALICE_FUNCTIONS if reads_console_secret(role_policy(stage, f), stage)]
    assert readers == ["APIHandler"]


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_connection_secrets_reach_only_the_api_and_the_worker_that_syncs_upstreams(stage: str) -> None:
    readers = [f for f in CHALICE_FUNCTIONS if decrypts_connection_secrets(role_policy(stage, f), stage)]
    assert readers == ["APIHandler", "SweepWorker"]
    consumer = role_policy(stage, "WebhookConsumer")
    # the consumer decrypts webhook signing secrets (the agents table) and encrypts nothing
    assert not allows(consumer, "kms:Encrypt", KEY_ARN, {"kms:ResourceAliases": [f"alias/workset-{stage}"],
                                                        "kms:EncryptionContextKeys": ["account_id", "connection_id"]})
    tables = {t for t in ("accounts", "admin-tokens", "agents", "tools", "history", "runs", "connections")
              if allows(consumer, "dynamodb:GetItem", table_arn(stage, t))}
    assert tables == {"agents"}


def test_each_function_consumes_only_its_own_queue_and_only_the_api_and_sweeps_send() -> None:
    for function in CHALICE_FUNCTIONS:
        document = role_policy("dev", function)
        consumed = {q for q in ("sweep", "webhooks") if allows(document, "sqs:ReceiveMessage", queue_arn(f"workset-dev-{q}"))}
        assert consumed == {"SweepWorker": {"sweep"}, "WebhookConsumer": {"webhooks"}}.get(function, set()), function
        sends = allows(document, "sqs:SendMessage", queue_arn("workset-dev-webhooks"))
        assert sends == (function != "WebhookConsumer"), function


def test_no_role_reaches_another_region_or_account_and_each_logs_to_its_own_group() -> None:
    for function in CHALICE_FUNCTIONS:
        document = role_policy("dev", function)
        assert allows(document, "dynamodb:GetItem", table_arn("dev", "agents"))
        assert not allows(document, "dynamodb:GetItem", table_arn("dev", "agents", region="eu-west-1"))
        assert not allows(document, "dynamodb:GetItem", table_arn("dev", "agents", account="210987654321"))
        groups = f"arn:aws:logs:{ARN_REGION}:{ARN_ACCOUNT}:log-group:/aws/lambda/workset-dev"
        for other in CHALICE_FUNCTIONS:
            stream = f"{groups}-{other}-1A2B3C4D5E6F:log-stream:x"
            assert allows(document, "logs:PutLogEvents", stream) == (other == function), (function, other)


def test_x_ray_is_granted_only_when_tracing_is_on() -> None:
    for function in CHALICE_FUNCTIONS:
        off = role_policy("dev", function)
        on = role_policy("dev", function, conditions={"TracesWithXRay": True})
        assert not allows(off, "xray:PutTraceSegments", "*")
        assert allows(on, "xray:PutTraceSegments", "*")
