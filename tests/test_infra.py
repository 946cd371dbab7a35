"""The AWS packaging: `.chalice/config.json`, the per-stage IAM policies and `infra/resources.json`
(the CloudFormation fragment merged by `chalice package --merge-template`).

- The tables of the template are compared with the tables the pynamodb models really create
  (created under moto by conftest's `create_all`, then described): names, keys, attribute types,
  indexes and projections must match exactly.
- The template's KMS key (connection secrets) and its alias: rotated, retained, administered by
  the account, named as the function's settings name it.
- The policies are checked against the DynamoDB and KMS calls the store really makes: every public
  store function is run under moto with its calls recorded; each call must be allowed, and the
  policy may grant nothing that no call needs. The KMS grant is conditioned on the key's alias;
  `allows` evaluates exactly the condition operators the policies use (and fails on any other).
- `chalice package` runs for real and `cfn-lint` checks what it produced.
"""

from __future__ import annotations

import copy
import fnmatch
import importlib
import inspect
import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import botocore.client
import pytest
from chalice.config import Config

import chalicelib.store
from chalicelib import config as app_config
from chalicelib.store.models import TABLES

ROOT = Path(__file__).resolve().parent.parent
CHALICE_DIR = ROOT / ".chalice"
RESOURCES = ROOT / "infra" / "resources.json"

API_GATEWAY_LIMIT_SECONDS = 29  # REST API integration timeout
LAMBDA_UNZIPPED_LIMIT_BYTES = 250 * 1024 * 1024
ARN_REGION, ARN_ACCOUNT = "us-east-1", "123456789012"
# What IAM sees as the resource of an Encrypt or Decrypt: the key itself, never its alias.
KEY_ARN = f"arn:aws:kms:{ARN_REGION}:{ARN_ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"


# ---------------------------------------------------------------------------------------------
# Reading the files


def chalice_config() -> dict[str, Any]:
    return json.loads((CHALICE_DIR / "config.json").read_text())


def stages() -> list[str]:
    return sorted(chalice_config()["stages"])


def stage_config(stage: str) -> Config:
    """The stage's settings as Chalice resolves them (top-level values inherited)."""
    return Config(chalice_stage=stage, user_provided_params={"project_dir": str(ROOT)},
                  config_from_disk=chalice_config())


def table_prefix(stage: str) -> str:
    return stage_config(stage).environment_variables["WORKSET_TABLE_PREFIX"]


def deployed_settings(stage: str) -> app_config.Settings:
    """The settings the stage's function will see: the stage's environment over the app's own
    defaults (uncached: the process's settings stay as they are)."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("WORKSET_")}
    environment.update(stage_config(stage).environment_variables)
    with mock.patch.dict(os.environ, environment, clear=True):
        return app_config.settings.__wrapped__()


def key_alias(stage: str) -> str:
    """The alias the stage's function encrypts with (WORKSET_KMS_KEY_ID or its default)."""
    return deployed_settings(stage).kms_key_id


def policy(stage: str) -> dict[str, Any]:
    config = stage_config(stage)
    return json.loads((CHALICE_DIR / config.iam_policy_file).read_text())


def template() -> dict[str, Any]:
    return json.loads(RESOURCES.read_text())


def resolve(value: Any, parameters: dict[str, str]) -> Any:
    """The value of a `Ref` to a parameter or an `Fn::Sub` over parameters; plain values as is."""
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return parameters[value["Ref"]]
    if isinstance(value, dict) and set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
        return re.sub(r"\$\{([^}!]+)\}", lambda match: parameters[match.group(1)], value["Fn::Sub"])
    return value


def template_tables(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The template's DynamoDB tables by logical id."""
    return {
        logical_id: resource
        for logical_id, resource in doc.get("Resources", {}).items()
        if resource.get("Type") == "AWS::DynamoDB::Table"
    }


# ---------------------------------------------------------------------------------------------
# One shape for a table, whether read from DescribeTable or from CloudFormation properties


def _keys(key_schema: list[dict[str, str]]) -> dict[str, str]:
    return {key["KeyType"]: key["AttributeName"] for key in key_schema}


def _projection(projection: dict[str, Any]) -> dict[str, Any]:
    return {"type": projection["ProjectionType"], "non_key": sorted(projection.get("NonKeyAttributes", []))}


def _indexes(indexes: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {
        index["IndexName"]: {"key": _keys(index["KeySchema"]), "projection": _projection(index["Projection"])}
        for index in indexes or []
    }


def table_shape(definition: dict[str, Any]) -> dict[str, Any]:
    """Keys, attribute types and indexes of a table (DescribeTable and CloudFormation spell them
    the same way)."""
    return {
        "key": _keys(definition["KeySchema"]),
        "attributes": {a["AttributeName"]: a["AttributeType"] for a in definition["AttributeDefinitions"]},
        "global_indexes": _indexes(definition.get("GlobalSecondaryIndexes")),
        "local_indexes": _indexes(definition.get("LocalSecondaryIndexes")),
    }


def model_tables() -> dict[str, dict[str, Any]]:
    """What the models create, by table name without the prefix: the tables exist (conftest's
    `create_all` made them from the models under moto), so ask DynamoDB."""
    prefix = app_config.settings().table_prefix + "-"
    client = boto3.client("dynamodb")
    shapes = {}
    for model in TABLES:
        name = model.Meta.table_name
        assert name.startswith(prefix), name
        shapes[name[len(prefix):]] = table_shape(client.describe_table(TableName=name)["Table"])
    return shapes


def declared_tables(doc: dict[str, Any], stage: str) -> dict[str, dict[str, Any]]:
    """What the template declares for a stage, by table name without the stage's prefix."""
    prefix = table_prefix(stage) + "-"
    shapes = {}
    for logical_id, resource in template_tables(doc).items():
        name = resolve(resource["Properties"]["TableName"], {"Stage": stage})
        assert isinstance(name, str) and name.startswith(prefix), f"{logical_id}: {name!r} lacks {prefix!r}"
        shapes[name[len(prefix):]] = table_shape(resource["Properties"])
    return shapes


# ---------------------------------------------------------------------------------------------
# The tables


@pytest.mark.parametrize("stage", stages())
def test_template_tables_match_the_models(stage: str) -> None:
    assert declared_tables(template(), stage) == model_tables()


def _table(doc: dict[str, Any], suffix: str) -> dict[str, Any]:
    return next(r for r in template_tables(doc).values()
                if r["Properties"]["TableName"]["Fn::Sub"].endswith(f"-{suffix}"))


def _agents(doc: dict[str, Any]) -> dict[str, Any]:
    return _table(doc, "agents")


def _drop_history(doc: dict[str, Any]) -> None:
    del doc["Resources"]["HistoryTable"]


def _number_key(doc: dict[str, Any]) -> None:
    _agents(doc)["Properties"]["AttributeDefinitions"][1]["AttributeType"] = "N"


def _keys_only(doc: dict[str, Any]) -> None:
    _agents(doc)["Properties"]["GlobalSecondaryIndexes"][0]["Projection"] = {"ProjectionType": "KEYS_ONLY"}


def _rename_index(doc: dict[str, Any]) -> None:
    _agents(doc)["Properties"]["GlobalSecondaryIndexes"][0]["IndexName"] = "by-account"


def _no_range_key(doc: dict[str, Any]) -> None:
    _agents(doc)["Properties"]["KeySchema"].pop()


def _swap_keys(doc: dict[str, Any]) -> None:
    for key in _agents(doc)["Properties"]["KeySchema"]:
        key["KeyType"] = {"HASH": "RANGE", "RANGE": "HASH"}[key["KeyType"]]


def _misname(doc: dict[str, Any]) -> None:
    doc["Resources"]["ToolsTable"]["Properties"]["TableName"] = {"Fn::Sub": "workset-${Stage}-tool"}


def _runs_without_pending_index(doc: dict[str, Any]) -> None:
    runs = _table(doc, "runs")["Properties"]
    runs["GlobalSecondaryIndexes"] = [i for i in runs["GlobalSecondaryIndexes"] if i["IndexName"] != "pending_by_account"]
    runs["AttributeDefinitions"] = [a for a in runs["AttributeDefinitions"] if a["AttributeName"] != "pending_account_id"]


def _runs_index_on_run_id(doc: dict[str, Any]) -> None:
    index = _table(doc, "runs")["Properties"]["GlobalSecondaryIndexes"][0]
    index["KeySchema"][0]["AttributeName"] = "run_id"


def _connections_without_range_key(doc: dict[str, Any]) -> None:
    _table(doc, "connections")["Properties"]["KeySchema"].pop()


def _drop_connections(doc: dict[str, Any]) -> None:
    del doc["Resources"]["ConnectionsTable"]


def _extra_table(doc: dict[str, Any]) -> None:
    doc["Resources"]["SpareTable"] = copy.deepcopy(doc["Resources"]["ToolsTable"])
    doc["Resources"]["SpareTable"]["Properties"]["TableName"] = {"Fn::Sub": "workset-${Stage}-spare"}


@pytest.mark.parametrize(
    "break_it",
    [_drop_history, _number_key, _keys_only, _rename_index, _no_range_key, _swap_keys, _misname, _extra_table,
     _runs_without_pending_index, _runs_index_on_run_id, _connections_without_range_key, _drop_connections],
)
def test_a_broken_table_definition_fails_the_comparison(break_it: Callable[[dict[str, Any]], None]) -> None:
    broken = template()
    break_it(broken)
    assert declared_tables(broken, "dev") != model_tables()


def test_tables_are_on_demand_recoverable_and_retained() -> None:
    tables = template_tables(template())
    assert len(tables) == len(TABLES)
    for logical_id, resource in tables.items():
        properties = resource["Properties"]
        assert resource.get("DeletionPolicy") == "Retain", logical_id
        assert resource.get("UpdateReplacePolicy") == "Retain", logical_id
        assert properties.get("BillingMode") == "PAY_PER_REQUEST", logical_id
        assert "ProvisionedThroughput" not in properties, logical_id
        assert all("ProvisionedThroughput" not in index for index in properties.get("GlobalSecondaryIndexes", []))
        assert properties.get("PointInTimeRecoverySpecification") == {"PointInTimeRecoveryEnabled": True}, logical_id
        assert properties.get("DeletionProtectionEnabled") is True, logical_id


# ---------------------------------------------------------------------------------------------
# The key of the connection secrets

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
    statements = [{k: v for k, v in s.items() if k != "Sid"} for s in _statements(key_policy)] if key_policy else []
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


def test_the_template_holds_the_tables_and_the_secrets_key_and_nothing_else() -> None:
    types = sorted(resource["Type"] for resource in template()["Resources"].values())
    assert types == sorted(["AWS::DynamoDB::Table"] * len(TABLES) + ["AWS::KMS::Key", "AWS::KMS::Alias"])


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


def test_the_stage_parameter_allows_exactly_the_chalice_stages() -> None:
    parameter = template()["Parameters"]["Stage"]
    assert "Default" not in parameter  # a template packaged for one stage must be told which
    assert sorted(parameter["AllowedValues"]) == stages()


def test_the_fragment_alone_passes_cfn_lint() -> None:
    """Fast feedback that needs no packaging (the full template is linted further down)."""
    findings = cfn_lint(RESOURCES)
    assert findings == [], findings


# ---------------------------------------------------------------------------------------------
# The Chalice configuration


@pytest.mark.parametrize("stage", stages())
def test_stage_configuration(stage: str) -> None:
    config = stage_config(stage)
    environment = config.environment_variables
    assert config.app_name == "workset"
    assert environment["WORKSET_STAGE"] == stage
    assert environment["WORKSET_TABLE_PREFIX"] == f"workset-{stage}"
    assert environment["WORKSET_PUBLIC_URL"].startswith("https://")
    assert config.autogen_policy is False
    assert config.iam_policy_file == f"policy-{stage}.json"
    assert (CHALICE_DIR / config.iam_policy_file).is_file()

    # The settings the function will see: the stage's environment and the app's own defaults.
    deployed = deployed_settings(stage)
    assert deployed.stage == stage
    assert deployed.table_prefix == f"workset-{stage}"
    # the template's alias (alias/workset-<Stage>) and the policy's condition name this key
    assert deployed.kms_key_id == f"alias/workset-{stage}"
    # One vendor call may take a connect and a read timeout; API Gateway gives up at 29 s, so the
    # function must stop first (otherwise it runs on, billed, after the client got a 504).
    assert 2 * deployed.vendor_timeout_seconds <= config.lambda_timeout < API_GATEWAY_LIMIT_SECONDS
    # The search model alone takes the process to ~130 MB (measured); 128 MB (the default) fails.
    assert config.lambda_memory_size >= 512


# ---------------------------------------------------------------------------------------------
# The IAM policies


def _statements(document: dict[str, Any]) -> list[dict[str, Any]]:
    statements = document["Statement"]
    return statements if isinstance(statements, list) else [statements]


def _as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def allows(document: dict[str, Any], action: str, resource: str) -> bool:
    """Whether an identity policy with Allow statements only grants `action` on `resource`."""
    for statement in _statements(document):
        assert statement["Effect"] == "Allow" and "NotAction" not in statement and "NotResource" not in statement
        if "Condition" in statement:
            continue
        actions = [a.lower() for a in _as_list(statement["Action"])]
        if any(fnmatch.fnmatchcase(action.lower(), pattern) for pattern in actions) and any(
            fnmatch.fnmatchcase(resource, pattern) for pattern in _as_list(statement["Resource"])
        ):
            return True
    return False


def table_arn(stage: str, suffix: str, index: str | None = None, *, region: str = ARN_REGION,
              account: str = ARN_ACCOUNT) -> str:
    arn = f"arn:aws:dynamodb:{region}:{account}:table/{table_prefix(stage)}-{suffix}"
    return f"{arn}/index/{index}" if index else arn


def iam_requests(operation: str, params: dict[str, Any]) -> Iterator[tuple[str, str, str | None]]:
    """The (IAM action, table, index) pairs one DynamoDB API call is authorized against."""
    if operation in {"TransactWriteItems", "TransactGetItems"}:
        names = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                 "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}
        for item in params["TransactItems"]:
            ((kind, body),) = item.items()
            yield names[kind], body["TableName"], None
    elif operation in {"BatchGetItem", "BatchWriteItem"}:
        for name in params["RequestItems"]:
            yield operation, name, None
    else:
        yield operation, params["TableName"], params.get("IndexName")


def exercise_store() -> set[str]:
    """Run every public store function once against the tables; answer the names run."""
    from chalicelib.clock import utcnow
    from chalicelib.store import accounts, agents, history, tools
    from chalicelib.store.records import Agent, HistoryEvent, Promotion

    ran: set[str] = set()

    def run(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        ran.add(f"{function.__module__}.{function.__name__}")
        return function(*args, **kwargs)

    now = utcnow()
    event = HistoryEvent(vendor="acme", name="orders", action="promote", cause="agent", actor="a1", at=now)
    run(accounts.create_account, "acct", "Acme", "token-hash-1", now)
    run(accounts.add_admin_token, "acct", "token-hash-2", now)
    assert run(accounts.account_of_token, "token-hash-2") == "acct"
    assert run(accounts.get_account, "acct") is not None
    agent = Agent(agent_id="a1", account_id="acct", name="hermes", cap=5, idle_window_days=7, created_at=now)
    run(agents.create_agent, agent, "key-hash")
    run(agents.update_settings, "a1", {"name": "iris"})
    assert len(run(agents.list_agents, "acct", limit=10).items) == 1
    run(tools.put_version, "acct", "acme", "orders", {"name": "orders"}, "admin", now, previous=0)
    assert run(tools.get_head, "acct", "acme", "orders") is not None
    assert len(run(tools.get_heads, "acct", [("acme", "orders")])) == 1
    assert len(run(tools.list_heads, "acct")) == 1
    assert len(run(tools.page_heads, "acct", limit=10).items) == 1
    assert len(run(tools.list_versions, "acct", "acme", "orders")) == 1
    assert run(tools.toolbox_revision, "acct") == 1
    assert run(agents.add_promotion, "a1", Promotion("acme", "orders", now, "a1"), event) is True
    run(agents.mark_used, "a1", "acme", "orders", now)
    assert run(agents.load_state, "a1") is not None
    assert run(agents.remove_promotion, "a1", "acme", "orders", event) is True
    assert len(run(history.list_events, "a1", limit=10).items) == 2
    return ran


# Store modules that talk to DynamoDB only through the functions of the others, or not at all
# (`tables` creates tables: the operator CLI and tests do that, never the function).
NOT_CALLED_BY_THE_FUNCTION = {"base", "models", "records", "tables"}
# Public store functions that build items without calling DynamoDB.
PURE = {"chalicelib.store.history.new_item"}


def public_store_functions() -> set[str]:
    names = set()
    for module_info in pkgutil.iter_modules(chalicelib.store.__path__):
        if module_info.name in NOT_CALLED_BY_THE_FUNCTION:
            continue
        module = importlib.import_module(f"chalicelib.store.{module_info.name}")
        for name, function in inspect.getmembers(module, inspect.isfunction):
            if function.__module__ == module.__name__ and not name.startswith("_"):
                names.add(f"{module.__name__}.{name}")
    return names - PURE


@pytest.fixture
def store_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str | None]]:
    """The (IAM action, table suffix, index) of every DynamoDB call made by every store function."""
    calls: list[tuple[str, dict[str, Any]]] = []
    original = botocore.client.BaseClient._make_api_call

    def record(client: Any, operation: str, params: dict[str, Any]) -> Any:
        if client.meta.service_model.service_name == "dynamodb":
            calls.append((operation, copy.deepcopy(params)))
        return original(client, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", record)
    ran = exercise_store()
    missing = public_store_functions() - ran
    assert not missing, f"store functions the policy check does not run (add them to exercise_store): {missing}"
    prefix = app_config.settings().table_prefix + "-"
    requests = []
    for operation, params in calls:
        for action, table, index in iam_requests(operation, params):
            assert table.startswith(prefix), table
            requests.append((f"dynamodb:{action}", table[len(prefix):], index))
    return requests


@pytest.mark.parametrize("stage", stages())
def test_policy_allows_every_call_the_store_makes_and_nothing_more(
    stage: str, store_calls: list[tuple[str, str, str | None]]
) -> None:
    document = policy(stage)
    denied = sorted({(a, t, i) for a, t, i in store_calls if not allows(document, a, table_arn(stage, t, i))})
    assert not denied, f"policy-{stage}.json denies calls the store makes: {denied}"

    needed = {action.lower() for action, _, _ in store_calls}
    granted = {
        action.lower()
        for statement in _statements(document)
        for action in _as_list(statement["Action"])
        if action.lower().startswith("dynamodb:")
    }
    assert granted == needed, f"granted but never needed: {granted - needed}"


@pytest.mark.parametrize("stage", stages())
def test_policy_reaches_exactly_the_stage_tables_and_their_indexes(stage: str) -> None:
    expected = set()
    for suffix, shape in model_tables().items():
        expected.add(table_arn(stage, suffix, region="*", account="*"))
        for index in shape["global_indexes"] | shape["local_indexes"]:
            expected.add(table_arn(stage, suffix, index, region="*", account="*"))
    resources = set()
    for statement in _statements(policy(stage)):
        actions = _as_list(statement["Action"])
        if any(action.startswith("dynamodb:") for action in actions):
            assert all(action.startswith("dynamodb:") for action in actions), statement
            resources.update(_as_list(statement["Resource"]))
    assert resources == expected
    # and nothing of another stage
    for other in set(stages()) - {stage}:
        assert not allows(policy(stage), "dynamodb:GetItem", table_arn(other, "accounts"))


# The services the function's role reaches; a new one (SQS, ...) is a deliberate change here.
SERVICES = {"dynamodb", "logs"}


@pytest.mark.parametrize("stage", stages())
def test_policy_lets_the_function_log_and_reaches_no_other_service(stage: str) -> None:
    document = policy(stage)
    groups = f"arn:aws:logs:{ARN_REGION}:{ARN_ACCOUNT}:log-group:/aws/lambda"
    # the function's name: `chalice deploy` names it workset-<stage>; CloudFormation names it
    # <stack>-APIHandler-<random>, and infra/deploy.sh names the stack workset-<stage>
    for log_group in (f"{groups}/workset-{stage}", f"{groups}/workset-{stage}-APIHandler-1A2B3C4D5E6F"):
        assert allows(document, "logs:CreateLogGroup", log_group)
        assert allows(document, "logs:CreateLogStream", f"{log_group}:log-stream:x")
        assert allows(document, "logs:PutLogEvents", f"{log_group}:log-stream:x")
    assert not allows(document, "logs:PutLogEvents", f"arn:aws:logs:{ARN_REGION}:{ARN_ACCOUNT}:log-group:/other")
    for statement in _statements(document):
        assert all(a.split(":")[0] in SERVICES and "*" not in a for a in _as_list(statement["Action"]))
        assert "*" not in _as_list(statement["Resource"])


# ---------------------------------------------------------------------------------------------
# chalice package + cfn-lint


def _tool(name: str) -> str:
    """A console script of this environment (never another one on PATH: a global cfn-lint can
    carry other runtime-deprecation dates)."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (requirements-dev.txt)")
    return found


def cfn_lint(path: Path) -> list[dict[str, Any]]:
    """cfn-lint's errors and warnings (informational findings are left out)."""
    result = subprocess.run(
        [_tool("cfn-lint"), "--format", "json", "--", str(path)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode in (0, 2, 4, 6), result.stderr  # bit 2 errors, bit 4 warnings
    return [
        {"rule": m["Rule"]["Id"], "level": m["Level"], "message": m["Message"],
         "where": "/".join(str(p) for p in m["Location"].get("Path") or [])}
        for m in json.loads(result.stdout or "[]")
        if m["Level"] in ("Error", "Warning")
    ]


# What pip prints when it cannot reach an index (it says so only when it may retry).
NETWORK_TROUBLE = re.compile(
    r"connection broken by|NewConnectionError|NameResolutionError|Failed to resolve|Max retries exceeded"
    r"|Temporary failure in name resolution|Network is unreachable|Connection refused|timed out|ProxyError"
    r"|Could not fetch URL",
    re.IGNORECASE,
)


def _skip_if_offline(output: str) -> None:
    """`chalice package` says `NoSuchPackageError` both for a requirement that does not exist and
    for a package index it cannot reach; ask pip which of the two it is."""
    missing = re.search(r"Could not satisfy the requirement: (\S+)", output)
    if not missing:
        return
    with tempfile.TemporaryDirectory() as scratch:
        probe = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--retries", "1",
             "--dest", scratch, missing.group(1)],
            capture_output=True, text=True, timeout=300, check=False,
        )
    if probe.returncode != 0 and NETWORK_TROUBLE.search(probe.stdout + probe.stderr):
        pytest.skip(f"chalice package needs the package index to vendor {missing.group(1)}, "
                    "and this machine cannot reach it")


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`chalice package --merge-template infra/resources.json --stage dev` into a temporary
    folder (dependency builds are cached in .chalice/deployments, which git ignores)."""
    out = tmp_path_factory.mktemp("package")
    environment = {name: value for name, value in os.environ.items() if not name.startswith("WORKSET_")}
    environment.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    result = subprocess.run(
        [_tool("chalice"), "package", "--merge-template", str(RESOURCES.relative_to(ROOT)), "--stage", "dev",
         str(out)],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=900, check=False,
    )
    output = result.stdout + result.stderr
    if result.returncode != 0:
        _skip_if_offline(output)
        pytest.fail(f"chalice package failed ({result.returncode}):\n{output[-4000:]}")
    return {"dir": out, "output": output, "template": json.loads((out / "sam.json").read_text())}


def test_packaged_template_passes_cfn_lint(packaged: dict[str, Any]) -> None:
    """No errors and no warnings. Warnings count: they are the date-based runtime deprecations
    (W2531) and template mistakes that CloudFormation would only report at deploy time."""
    findings = cfn_lint(packaged["dir"] / "sam.json")
    assert findings == [], json.dumps(findings, indent=2)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def runtime_distributions() -> dict[str, str | None]:
    """Every distribution that requirements.txt brings in, following the installed packages'
    metadata: normalized name -> the pinned version (direct requirements) or None."""
    from importlib import metadata

    from packaging.requirements import Requirement

    lines = (ROOT / "requirements.txt").read_text().splitlines()
    direct = [Requirement(line.split("#")[0]) for line in lines if line.split("#")[0].strip()]
    wanted: dict[str, str | None] = {
        _normal(r.name): next((s.version for s in r.specifier if s.operator == "=="), None) for r in direct
    }
    pending = list(direct)
    seen: set[str] = set()
    while pending:
        requirement = pending.pop()
        if _normal(requirement.name) in seen:
            continue
        seen.add(_normal(requirement.name))
        for text in metadata.distribution(requirement.name).requires or []:
            child = Requirement(text)
            extras = requirement.extras or {""}
            if child.marker is None or any(child.marker.evaluate({"extra": extra}) for extra in extras):
                wanted.setdefault(_normal(child.name), None)
                pending.append(child)
    return wanted


def test_package_vendors_every_dependency(packaged: dict[str, Any]) -> None:
    """Chalice exits 0 even when it found no wheel for the Lambda runtime (and, once it cached
    such a package, reuses it without a word); the function would then fail at import. So look
    into the zip: every runtime distribution must be there, direct ones at their pinned version."""
    runtime = packaged["template"]["Resources"]["APIHandler"]["Properties"]["Runtime"]
    warned = re.search(r"Could not install dependencies:\n(.*?)\n\n", packaged["output"], re.DOTALL)
    assert warned is None, f"chalice package could not vendor these for {runtime}:\n{warned.group(1)}"
    with zipfile.ZipFile(packaged["dir"] / "deployment.zip") as archive:
        infos = archive.infolist()
    vendored = {}
    for info in infos:
        top = info.filename.split("/")[0]
        if top.endswith(".dist-info"):
            name, version = top[: -len(".dist-info")].split("-", 1)
            vendored[_normal(name)] = version
    wanted = runtime_distributions()
    missing = sorted(name for name in wanted if name not in vendored)
    assert not missing, f"not in deployment.zip (no wheel for {runtime}?): {missing}"
    wrong = {name: (pin, vendored[name]) for name, pin in wanted.items() if pin and vendored[name] != pin}
    assert not wrong, f"pinned vs vendored: {wrong}"
    unzipped = sum(info.file_size for info in infos)
    assert unzipped < LAMBDA_UNZIPPED_LIMIT_BYTES, f"{unzipped / 2**20:.0f} MB unzipped"


def test_packaged_template_is_consistent(packaged: dict[str, Any]) -> None:
    """The merge kept Chalice's resources and added ours; the function, its role and the tables
    agree on the stage."""
    packaged_template = packaged["template"]
    resources = packaged_template["Resources"]
    function = resources["APIHandler"]["Properties"]
    assert function["Timeout"] == stage_config("dev").lambda_timeout
    variables = function["Environment"]["Variables"]
    assert variables["WORKSET_TABLE_PREFIX"] == table_prefix("dev")
    assert declared_tables(packaged_template, "dev") == declared_tables(template(), "dev")
    role = resources[function["Role"]["Fn::GetAtt"][0]]["Properties"]
    assert [p["PolicyDocument"] for p in role["Policies"]] == [policy("dev")]
    assert packaged_template["Parameters"]["Stage"] == template()["Parameters"]["Stage"]


def test_deploy_script_parses() -> None:
    result = subprocess.run(["bash", "-n", str(ROOT / "infra" / "deploy.sh")], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
