"""Optional customer-managed KMS keys (issue 27, goal 2): a key ARN parameter each for the tables,
the log groups, the alarm topic and the queues. Empty (the default): the AWS-owned or AWS-managed
keys as before, and no role gets a KMS grant for them. Set: that key encrypts those resources
only, and the roles that read or write them get kms:Decrypt and kms:GenerateDataKey on that key
only. Checked on the template as CloudFormation makes it for given parameters (`under`); cfn-lint
over the built template is tests/test_infra_package.py."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.infra import ROOT, template, under

KEYS = {
    "TablesKmsKeyArn": "arn:aws:kms:us-east-1:123456789012:key/11111111-1111-1111-1111-111111111111",
    "LogsKmsKeyArn": "arn:aws:kms:us-east-1:123456789012:key/22222222-2222-2222-2222-222222222222",
    "AlarmTopicKmsKeyArn": "arn:aws:kms:us-east-1:123456789012:key/33333333-3333-3333-3333-333333333333",
    "QueuesKmsKeyArn": "arn:aws:kms:us-east-1:123456789012:key/44444444-4444-4444-4444-444444444444",
}
KEY_ACTIONS = ["kms:Decrypt", "kms:GenerateDataKey"]


def of_type(doc: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {i: r.get("Properties", {}) for i, r in doc["Resources"].items() if r.get("Type") == kind}


def encryption(doc: dict[str, Any]) -> dict[str, set[Any]]:
    """Which key each family of resources is encrypted with: the parameter that names it, or "aws"
    (AWS's own or managed key)."""
    tables = {str(p["SSESpecification"]["KMSMasterKeyId"]) if "SSESpecification" in p else "aws"
              for p in of_type(doc, "AWS::DynamoDB::Table").values()}
    queues = set()
    for properties in of_type(doc, "AWS::SQS::Queue").values():
        if "KmsMasterKeyId" in properties:
            assert "SqsManagedSseEnabled" not in properties  # SQS refuses both
            queues.add(str(properties["KmsMasterKeyId"]))
        else:
            assert properties.get("SqsManagedSseEnabled") is True
            queues.add("aws")
    logs = {str(p.get("KmsKeyId", "aws")) for p in of_type(doc, "AWS::Logs::LogGroup").values()}
    topics = {str(p.get("KmsMasterKeyId", "aws")) for p in of_type(doc, "AWS::SNS::Topic").values()}
    return {"TablesKmsKeyArn": tables, "QueuesKmsKeyArn": queues, "LogsKmsKeyArn": logs,
            "AlarmTopicKmsKeyArn": topics}


def ref(name: str) -> str:
    return str({"Ref": name})


def key_grants(doc: dict[str, Any]) -> dict[str, list[tuple[list[str], Any]]]:
    """Each function role's KMS statements on the optional keys: (actions, resource)."""
    grants: dict[str, list[tuple[list[str], Any]]] = {}
    for role, properties in of_type(doc, "AWS::IAM::Role").items():
        if role == "BackupRole":
            continue
        for policy in properties.get("Policies", []):
            for statement in policy["PolicyDocument"]["Statement"]:
                actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                if any(action.startswith("kms:") for action in actions) and str(statement["Resource"]) in (
                        *KEYS.values(), *(ref(name) for name in KEYS)):
                    grants.setdefault(role, []).append((actions, str(statement["Resource"])))
    return grants


def uses(doc: dict[str, Any], service: str) -> set[str]:
    """The function roles with an action of `service` (sqs, dynamodb)."""
    return {role for role, properties in of_type(doc, "AWS::IAM::Role").items() if role != "BackupRole"
            and any(str(action).startswith(f"{service}:") for policy in properties.get("Policies", [])
                    for statement in policy["PolicyDocument"]["Statement"]
                    for action in (statement["Action"] if isinstance(statement["Action"], list)
                                   else [statement["Action"]]))}


def test_without_keys_everything_is_encrypted_with_aws_keys_and_no_role_gets_a_grant() -> None:
    doc = under(template())
    assert encryption(doc) == {name: {"aws"} for name in KEYS}
    assert key_grants(doc) == {}


@pytest.mark.parametrize("parameter", sorted(KEYS))
def test_a_key_encrypts_its_resources_only(parameter: str) -> None:
    doc = under(template(), {parameter: KEYS[parameter], "AlarmEmail": "ops@example.com"})
    assert encryption(doc) == {name: {ref(name) if name == parameter else "aws"} for name in KEYS}
    grants = key_grants(doc)
    if parameter == "QueuesKmsKeyArn":
        assert set(grants) == uses(doc, "sqs") and grants
    elif parameter == "TablesKmsKeyArn":
        assert set(grants) == uses(doc, "dynamodb") and grants
    else:  # CloudWatch Logs and CloudWatch's alarms use the key themselves: the key policy says so
        assert grants == {}
    for listed in grants.values():
        assert listed == [(KEY_ACTIONS, ref(parameter))]


def test_all_keys_at_once_each_encrypts_its_own_and_each_role_gets_only_its_keys() -> None:
    doc = under(template(), KEYS)
    assert encryption(doc) == {name: {ref(name)} for name in KEYS}
    for role, listed in key_grants(doc).items():
        wanted = ([(KEY_ACTIONS, ref("QueuesKmsKeyArn"))] if role in uses(doc, "sqs") else []) + (
            [(KEY_ACTIONS, ref("TablesKmsKeyArn"))] if role in uses(doc, "dynamodb") else [])
        assert sorted(listed, key=str) == sorted(wanted, key=str), role


def test_a_topic_of_yours_is_not_touched() -> None:
    doc = under(template(), {"AlarmTopicArn": "arn:aws:sns:us-east-1:123456789012:ops",
                             "AlarmTopicKmsKeyArn": KEYS["AlarmTopicKmsKeyArn"]})
    assert of_type(doc, "AWS::SNS::Topic") == {}


@pytest.mark.parametrize("parameter", sorted(KEYS))
def test_a_key_parameter_takes_a_key_arn_in_any_partition_or_nothing(parameter: str) -> None:
    spec = template()["Parameters"][parameter]
    assert spec["Default"] == ""
    pattern = re.compile(spec["AllowedPattern"])
    for good in ("", KEYS[parameter], "arn:aws-us-gov:kms:us-gov-west-1:123456789012:key/abcd-12",
                 "arn:aws-cn:kms:cn-north-1:123456789012:key/abcd-12"):
        assert pattern.fullmatch(good), good
    for bad in ("alias/aws/sqs", "arn:aws:kms:us-east-1:123456789012:alias/mine", "*",
                "arn:aws:kms:us-east-1:123456789012:key/*", "arn:aws:iam::123456789012:role/x"):
        assert not pattern.fullmatch(bad), bad


def test_the_readme_states_each_keys_policy_needs() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Customer-managed keys"):]
    section = section[:section.index("\n### ", 1)]
    for parameter in KEYS:
        assert f"`{parameter}`" in section, parameter
    for principal in ("logs.<region>.amazonaws.com", "cloudwatch.amazonaws.com", "kms:CreateGrant"):
        assert principal in section, principal
