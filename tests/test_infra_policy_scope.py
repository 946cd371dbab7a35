"""How far the stage policies reach: exactly the stage's tables and their indexes; the stage's
secrets key, by its alias, for Encrypt and Decrypt with the vault's encryption context only;
none of the calls that make a key or a queue or poll one (the local stack's, never the deployed
code's); the function's own log streams; no other service.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

from chalicelib.base import config as app_config
from chalicelib.store import queues
from tests.iam import (
    allows,
    as_list,
    record_aws_fixture,  # noqa: F401 - fixture `record_aws`
    sqs_call,
    statements_of,
    table_arn,
)
from tests.infra import (
    ARN_ACCOUNT,
    ARN_REGION,
    CHALICE_FUNCTIONS,
    KEY_ARN,
    QUEUES,
    ROOT,
    AwsCall,
    key_alias,
    model_tables,
    policy,
    queue_arn,
    stages,
)


@pytest.mark.parametrize("stage", stages())
def test_policy_reaches_exactly_the_stage_tables_and_their_indexes(stage: str) -> None:
    expected = set()
    for suffix, shape in model_tables().items():
        expected.add(table_arn(stage, suffix))
        for index in shape["global_indexes"] | shape["local_indexes"]:
            expected.add(table_arn(stage, suffix, index))
    resources = set()
    for statement in statements_of(policy(stage)):
        actions = as_list(statement["Action"])
        if any(action.startswith("dynamodb:") for action in actions):
            assert all(action.startswith("dynamodb:") for action in actions), statement
            assert "Condition" not in statement, statement
            resources.update(as_list(statement["Resource"]))
    assert resources == expected
    # and nothing of another stage
    for other in set(stages()) - {stage}:
        assert not allows(policy(stage), "dynamodb:GetItem", table_arn(other, "accounts"))


# The KMS actions on a key besides Encrypt and Decrypt (a wider grant must show up here as allowed).
OTHER_KEY_ACTIONS = [
    "kms:CancelKeyDeletion", "kms:CreateAlias", "kms:CreateGrant", "kms:DeleteAlias", "kms:DeleteImportedKeyMaterial",
    "kms:DescribeKey", "kms:DeriveSharedSecret", "kms:DisableKey", "kms:DisableKeyRotation", "kms:EnableKey",
    "kms:EnableKeyRotation", "kms:GenerateDataKey", "kms:GenerateDataKeyPair",
    "kms:GenerateDataKeyPairWithoutPlaintext", "kms:GenerateDataKeyWithoutPlaintext", "kms:GenerateMac",
    "kms:GetKeyPolicy", "kms:GetKeyRotationStatus", "kms:GetParametersForImport", "kms:GetPublicKey",
    "kms:ImportKeyMaterial", "kms:ListGrants", "kms:ListKeyPolicies", "kms:ListKeyRotations",
    "kms:ListResourceTags", "kms:PutKeyPolicy", "kms:ReEncryptFrom", "kms:ReEncryptTo", "kms:ReplicateKey",
    "kms:RetireGrant", "kms:RevokeGrant", "kms:RotateKeyOnDemand", "kms:ScheduleKeyDeletion", "kms:Sign",
    "kms:TagResource", "kms:UntagResource", "kms:UpdateAlias", "kms:UpdateKeyDescription",
    "kms:UpdatePrimaryRegion", "kms:Verify", "kms:VerifyMac",
]


@pytest.mark.parametrize("stage", stages())
def test_policy_reaches_only_the_stage_key_for_encrypt_and_decrypt(stage: str) -> None:
    """The grant hangs on the key's alias (a policy file cannot name the template's key): it
    must hold for the stage's alias and no other, for the vault's encryption context only, and
    for Encrypt and Decrypt only."""
    document = policy(stage)
    alias = key_alias(stage)
    usual = {"kms:ResourceAliases": [alias], "kms:EncryptionContextKeys": ["account_id", "connection_id"]}
    for action in ("kms:Encrypt", "kms:Decrypt"):
        assert allows(document, action, KEY_ARN, usual)
        assert allows(document, action, KEY_ARN, usual | {"kms:ResourceAliases": ["alias/other", alias]})
        for aliases in ([], ["alias/other"], [f"{alias}-old"], [alias.upper()], ["alias/workset"],
                        *([key_alias(other)] for other in set(stages()) - {stage})):
            assert not allows(document, action, KEY_ARN, usual | {"kms:ResourceAliases": aliases}), aliases
        assert not allows(document, action, KEY_ARN, {"kms:ResourceAliases": [alias]})  # no encryption context
        assert not allows(document, action, KEY_ARN, usual | {"kms:EncryptionContextKeys": ["account_id", "x"]})
        assert not allows(document, action, f"arn:aws:kms:{ARN_REGION}:{ARN_ACCOUNT}:{alias}", usual)
    for action in OTHER_KEY_ACTIONS:
        for resource in (KEY_ARN, "*", f"arn:aws:kms:{ARN_REGION}:{ARN_ACCOUNT}:{alias}"):
            assert not allows(document, action, resource, usual | {"kms:RequestAlias": alias}), (action, resource)


@pytest.mark.parametrize("stage", stages())
def test_ensure_key_is_for_the_local_stack_only(
    stage: str, record_aws: list[AwsCall]
) -> None:
    """The template makes the key and its alias; `ensure_key` is the local stack's and the tests'
    way: no code of the deployed functions calls it, and the policy grants none of its calls."""
    from chalicelib.store import vault

    app_config.settings.cache_clear()
    try:
        with mock.patch.dict(os.environ, {"WORKSET_KMS_KEY_ID": "alias/workset-fresh"}):  # no such alias yet
            assert vault.ensure_key() == "alias/workset-fresh"
    finally:
        app_config.settings.cache_clear()
    operations = {operation for service, operation, _, _ in record_aws if service == "kms"}
    assert operations == {"ListAliases", "CreateKey", "CreateAlias"}
    context = {"kms:ResourceAliases": [key_alias(stage)], "kms:RequestAlias": key_alias(stage)}
    for operation in operations:
        for resource in ("*", KEY_ARN, f"arn:aws:kms:{ARN_REGION}:{ARN_ACCOUNT}:{key_alias(stage)}"):
            assert not allows(policy(stage), f"kms:{operation}", resource, context), operation
    callers = [
        str(path.relative_to(ROOT)) for path in [ROOT / "app.py", *sorted((ROOT / "chalicelib").rglob("*.py"))]
        if path != ROOT / "chalicelib" / "store" / "vault.py" and "ensure_key" in path.read_text()
    ]
    assert callers == [], f"the deployed code calls ensure_key, which its role may not: {callers}"


def _deployed_modules(module: str) -> Iterator[tuple[Path, ast.Module, set[str]]]:
    """Each file of the deployed code (app.py and chalicelib/, what `chalice package` ships; not
    local/) but `module` itself: its path, its tree, and the names `module` goes by in it."""
    package, _, leaf = module.rpartition(".")
    for path in [ROOT / "app.py", *sorted((ROOT / "chalicelib").rglob("*.py"))]:
        where = path.relative_to(ROOT)
        if where.with_suffix("").as_posix().replace("/", ".") == module:
            continue
        tree = ast.parse(path.read_text(), str(where))
        bound = {module}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and _deployed_import_source(where, node) == package:
                bound.update(alias.asname or leaf for alias in node.names if alias.name == leaf)
            elif isinstance(node, ast.Import):
                bound.update(alias.asname for alias in node.names if alias.name == module and alias.asname)
        yield where, tree, bound


def deployed_uses(module: str, names: set[str]) -> list[str]:
    """Where the deployed code names one of `names` of `module`: imported from it, or as an
    attribute of the module."""
    uses = []
    for where, tree, bound in _deployed_modules(module):
        uses += [f"{where}:{node.lineno} imports {alias.name}" for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) for alias in node.names
                 if alias.name in names and _deployed_import_source(where, node) == module]
        uses += [f"{where}:{node.lineno} {ast.unparse(node)}" for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute) and node.attr in names and ast.unparse(node.value) in bound]
    return uses


def _deployed_import_source(where: Path, node: ast.ImportFrom) -> str:
    """The module a `from ... import` of the file `where` imports from."""
    package_parts = where.with_suffix("").parts[:-1]  # `from . import` starts here
    base = package_parts[:len(package_parts) - node.level + 1] if node.level else ()
    return ".".join([*base, *([node.module] if node.module else [])])


def test_deployed_uses_finds_every_way_of_naming_a_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "chalicelib" / "store"
    fake.mkdir(parents=True)
    (tmp_path / "app.py").write_text("from chalicelib.store import queues\nqueues.send('q', [])\n")
    (fake / "a.py").write_text("from chalicelib.store import queues as q\nq.ensure('x')\n")
    (fake / "b.py").write_text("from chalicelib.store.queues import receive\n")
    (fake / "c.py").write_text("from . import queues\nqueues.delete('q', 'h')\n")
    (fake / "d.py").write_text("import chalicelib.store.queues\nchalicelib.store.queues.ensure('x')\n")
    (fake / "queues.py").write_text("def ensure(name): receive(name)\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    uses = deployed_uses("chalicelib.store.queues", {"ensure", "receive", "delete"})
    assert [use.split(" ", 1)[0] for use in uses] == [
        "chalicelib/store/a.py:2", "chalicelib/store/b.py:1", "chalicelib/store/c.py:2", "chalicelib/store/d.py:2"]


@pytest.mark.parametrize("stage", stages())
def test_queue_making_and_polling_are_for_the_local_stack_only(
    stage: str, record_aws: list[AwsCall]
) -> None:
    """The template makes the queues and Lambda's event sources receive and delete; `ensure`,
    `receive` and `delete` are the local stack's and the tests' way: no code of the deployed
    functions calls them, and the policy grants none of the calls that make or change a queue."""
    fresh = f"{app_config.settings().table_prefix}-fresh"
    queues.ensure(fresh)
    operations = {operation for service, operation, _, _ in record_aws if service == "sqs"}
    assert operations == {"CreateQueue", "GetQueueAttributes"}  # GetQueueAttributes: the DLQ's ARN
    assert {sqs_call(operation, params).queue for _, operation, params, _ in record_aws} == {fresh, f"{fresh}-dlq"}
    for queue in QUEUES:
        name = queue.name(stage)
        for resource in ("*", queue_arn(name), queue_arn(f"{name}-dlq"), queue_arn(f"workset-{stage}-fresh")):
            for action in ("sqs:CreateQueue", "sqs:SetQueueAttributes", "sqs:DeleteQueue", "sqs:TagQueue"):
                assert not allows(policy(stage), action, resource), (action, resource)
        assert not allows(policy(stage), "sqs:GetQueueAttributes", queue_arn(f"{name}-dlq"))
    uses = deployed_uses("chalicelib.store.queues", {"ensure", "receive", "delete"})
    assert uses == [], f"the deployed code makes or polls queues itself, which Lambda and the template do: {uses}"


# The services the function's role reaches; a new one is a deliberate change here.
SERVICES = {"dynamodb", "kms", "logs", "sqs", "ssm"}


@pytest.mark.parametrize("stage", stages())
def test_policy_lets_the_function_log_and_reaches_no_other_service(stage: str) -> None:
    document = policy(stage)
    groups = f"arn:aws:logs:{ARN_REGION}:{ARN_ACCOUNT}:log-group:/aws/lambda"
    # CloudFormation names a function <stack>-<logical id>-<random>, and infra/deploy.sh names the
    # stack workset-<stage>
    for log_group in (f"{groups}/workset-{stage}-{function}-1A2B3C4D5E6F" for function in CHALICE_FUNCTIONS):
        # the stack makes the log groups (with their retention): a group the function made
        # itself would keep its events forever, and would block the stack's own
        assert not allows(document, "logs:CreateLogGroup", log_group)
        assert allows(document, "logs:CreateLogStream", f"{log_group}:log-stream:x")
        assert allows(document, "logs:PutLogEvents", f"{log_group}:log-stream:x")
    assert not allows(document, "logs:PutLogEvents", f"arn:aws:logs:{ARN_REGION}:{ARN_ACCOUNT}:log-group:/other")
    assert not any(allows(document, "logs:CreateLogGroup", resource) for resource in ("*", f"{groups}/x"))
    for statement in statements_of(document):
        assert all(a.split(":")[0] in SERVICES and "*" not in a for a in as_list(statement["Action"]))
        assert "*" not in as_list(statement["Resource"])
