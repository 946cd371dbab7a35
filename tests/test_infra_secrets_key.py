"""The template's KMS key of the connection secrets and its alias: rotated, retained, a symmetric
encryption key administered by the account alone, its alias the one the function's settings name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.iam import statements_of
from tests.infra import key_alias, resolve, stages, template

KEY_ADMINISTRATOR = {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}}


def secrets_key_problems(doc: dict[str, Any], stage: str) -> list[str]:
    """What is wrong with the template's KMS key and alias for a stage (nothing: [])."""
    resources = doc.get("Resources", {})
    keys = {i: r for i, r in resources.items() if r.get("Type") == "AWS::KMS::Key"}
    aliases = {i: r for i, r in resources.items() if r.get("Type") == "AWS::KMS::Alias"}
    if len(keys) != 1 or len(aliases) != 1:
        return [f"want one key and one alias, found keys {sorted(keys)} and aliases {sorted(aliases)}"]
    ((key_id, key),) = keys.items()
    ((alias_id, alias),) = aliases.items()
    problems = []
    for logical_id, resource in ((key_id, key), (alias_id, alias)):
        # a deleted stack must not take the key (and with it every stored secret) along
        if (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")) != ("Retain", "Retain"):
            problems.append(f"{logical_id} is not retained")
    properties = key.get("Properties", {})
    if properties.get("EnableKeyRotation") is not True:
        problems.append("key rotation is off")
    # Encrypt/Decrypt with an encryption context need a symmetric encryption key
    if (properties.get("KeySpec", "SYMMETRIC_DEFAULT"), properties.get("KeyUsage", "ENCRYPT_DECRYPT")) != (
            "SYMMETRIC_DEFAULT", "ENCRYPT_DECRYPT"):
        problems.append("the key is not a symmetric encryption key")
    if properties.get("Enabled", True) is not True or properties.get("MultiRegion", False) is not False:
        problems.append("the key is disabled or multi-Region")
    # Exactly one statement: the account (root) administers the key, which lets IAM policies,
    # the function's among them, grant its use. No other principal.
    key_policy = properties.get("KeyPolicy", {})
    statements = [{k: v for k, v in s.items() if k != "Sid"} for s in statements_of(key_policy)] if key_policy else []
    if key_policy.get("Version") != "2012-10-17" or statements != [
            {"Effect": "Allow", "Principal": KEY_ADMINISTRATOR, "Action": "kms:*", "Resource": "*"}]:
        problems.append(f"the key policy is not the account's alone: {key_policy}")
    alias_properties = alias.get("Properties", {})
    name = resolve(alias_properties.get("AliasName"), {"Stage": stage})
    if name != key_alias(stage):
        problems.append(f"the alias is {name!r}, the function encrypts with {key_alias(stage)!r}")
    if alias_properties.get("TargetKeyId") not in ({"Ref": key_id}, {"Fn::GetAtt": [key_id, "Arn"]},
                                                   {"Fn::GetAtt": [key_id, "KeyId"]}):
        problems.append(f"the alias does not name {key_id}: {alias_properties.get('TargetKeyId')}")
    return problems


@pytest.mark.parametrize("stage", stages())
def test_the_secrets_key_is_rotated_retained_and_named_as_the_function_expects(stage: str) -> None:
    assert key_alias(stage) == f"alias/workset-{stage}"
    assert secrets_key_problems(template(), stage) == []


def _key(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["Resources"]["SecretsKey"]


def _alias(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["Resources"]["SecretsKeyAlias"]


def _no_rotation(doc: dict[str, Any]) -> None:
    del _key(doc)["Properties"]["EnableKeyRotation"]


def _key_not_retained(doc: dict[str, Any]) -> None:
    _key(doc)["DeletionPolicy"] = "Delete"


def _alias_of_another_stage(doc: dict[str, Any]) -> None:
    _alias(doc)["Properties"]["AliasName"] = "alias/workset-prod"


def _alias_without_stage(doc: dict[str, Any]) -> None:
    _alias(doc)["Properties"]["AliasName"] = "alias/workset"


def _alias_of_another_key(doc: dict[str, Any]) -> None:
    _alias(doc)["Properties"]["TargetKeyId"] = "1234abcd-12ab-34cd-56ef-1234567890ab"


def _no_alias(doc: dict[str, Any]) -> None:
    del doc["Resources"]["SecretsKeyAlias"]


def _anyone_may_use_the_key(doc: dict[str, Any]) -> None:
    _key(doc)["Properties"]["KeyPolicy"]["Statement"][0]["Principal"] = {"AWS": "*"}


def _second_key_policy_statement(doc: dict[str, Any]) -> None:
    statements = _key(doc)["Properties"]["KeyPolicy"]["Statement"]
    statements.append({"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "kms:Decrypt",
                       "Resource": "*"})


def _asymmetric_key(doc: dict[str, Any]) -> None:
    _key(doc)["Properties"]["KeySpec"] = "RSA_2048"


@pytest.mark.parametrize(
    "break_it",
    [_no_rotation, _key_not_retained, _alias_of_another_stage, _alias_without_stage, _alias_of_another_key, _no_alias,
     _anyone_may_use_the_key, _second_key_policy_statement, _asymmetric_key],
)
def test_a_broken_secrets_key_fails_the_check(break_it: Callable[[dict[str, Any]], None]) -> None:
    broken = template()
    break_it(broken)
    assert secrets_key_problems(broken, "dev") != []
