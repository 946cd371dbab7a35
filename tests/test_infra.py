"""The AWS packaging: `.chalice/config.json`, the per-stage IAM policies and `infra/resources.json`
(the CloudFormation fragment merged by `chalice package --merge-template`).

- The tables of the template are compared with the tables the pynamodb models really create
  (created under moto by conftest's `create_all`, then described): names, keys, attribute types,
  indexes and projections must match exactly.
- The template's KMS key (connection secrets) and its alias: rotated, retained, administered by
  the account, named as the function's settings name it.
- The template's SQS queues (`QUEUES`): named as the settings name them, each with its dead-letter
  queue after `queues.MAX_RECEIVES` deliveries, a visibility timeout for its Lambda consumer,
  SSE with SQS-managed keys. The fragment also adds a `DependsOn` to each consumer function
  (Chalice's resource), so that Lambda's event source is made after its queue, and, to the event
  source of a consumer that answers `batchItemFailures`, `FunctionResponseTypes:
  [ReportBatchItemFailures]` (without it Lambda ignores the answer and deletes the whole batch).
- The policies are checked against the DynamoDB, KMS and SQS calls the store really makes: every
  public store function is run under moto with its calls recorded; each call must be allowed, and
  the policy may grant nothing that no call needs, except what Lambda's SQS event sources do with
  the consumer's role (receive, delete, read attributes) on exactly the queues they consume; the
  store puts a message back (`queues.retry_later`) on the queues of `QUEUES` marked so. The
  KMS grant is conditioned on the key's alias; `allows` evaluates exactly the condition operators
  the policies use (and fails on any other).
- `chalice package` runs for real and `cfn-lint` checks what it produced; its SQS event sources
  must read the queues the fragment declares.
- What a deployment needs beyond that (the stage's parameters in SSM, log groups, alarms, the
  listen's hold against the timeouts) is checked in tests/test_deploy.py.
"""

from __future__ import annotations

import ast
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
from chalice.utils import to_cfn_resource_name

import chalicelib.store
from chalicelib import config as app_config
from chalicelib.store import queues
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


def stage_config(stage: str, function: str = "api_handler") -> Config:
    """The stage's settings as Chalice resolves them for one function (top-level values inherited;
    `function` is a handler's `name=`)."""
    return Config(chalice_stage=stage, function_name=function, user_provided_params={"project_dir": str(ROOT)},
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


def own_resources(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The resources the fragment declares (with a Type), by logical id."""
    return {logical_id: resource for logical_id, resource in doc["Resources"].items() if "Type" in resource}


def overlays(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What the fragment adds to resources that `chalice package` makes (no Type: the merge puts
    these keys onto Chalice's resource of the same logical id)."""
    return {logical_id: resource for logical_id, resource in doc["Resources"].items() if "Type" not in resource}


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


def _drop_index(doc: dict[str, Any], suffix: str, index: str, attribute: str) -> None:
    """The index gone, and the attribute only it keyed (as one would write it by hand)."""
    properties = _table(doc, suffix)["Properties"]
    properties["GlobalSecondaryIndexes"] = [i for i in properties["GlobalSecondaryIndexes"] if i["IndexName"] != index]
    properties["AttributeDefinitions"] = [a for a in properties["AttributeDefinitions"]
                                          if a["AttributeName"] != attribute]


def _runs_without_pending_index(doc: dict[str, Any]) -> None:
    _drop_index(doc, "runs", "pending_by_account", "pending_account_id")


def _agents_without_review_index(doc: dict[str, Any]) -> None:
    _drop_index(doc, "agents", "to_review", "review_shard")


def _agents_without_outbox_index(doc: dict[str, Any]) -> None:
    _drop_index(doc, "agents", "outbox", "outbox_shard")


def _outbox_index_keys_only(doc: dict[str, Any]) -> None:
    (index,) = (i for i in _agents(doc)["Properties"]["GlobalSecondaryIndexes"] if i["IndexName"] == "outbox")
    index["Projection"] = {"ProjectionType": "KEYS_ONLY"}


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
     _runs_without_pending_index, _agents_without_review_index, _agents_without_outbox_index,
     _outbox_index_keys_only, _runs_index_on_run_id, _connections_without_range_key, _drop_connections],
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


# What the fragment holds besides tables, key and queues (tests/test_deploy.py checks each kind):
# the stage's public-url parameter, a log group per function, the alarms and their topic.
CHALICE_FUNCTIONS = 4  # APIHandler, Sweep, SweepWorker, WebhookConsumer


def observability_types() -> list[str]:
    """A log group per function; alarms: each dead-letter queue, each function's errors and
    throttles, the API's 5xx, each table's throttling, and the app's three metrics of trouble (sweep
    failures, run ends left unrecorded, replayed OAuth tokens)."""
    return (["AWS::SSM::Parameter", "AWS::SNS::Topic", "AWS::SNS::Subscription"]
            + ["AWS::Logs::LogGroup"] * CHALICE_FUNCTIONS
            + ["AWS::CloudWatch::Alarm"] * (len(QUEUES) + 2 * CHALICE_FUNCTIONS + 1 + len(TABLES) + 3))
# The API's name, which the 5XXError alarm names: one per stage (as Name, and as the definition's
# title, which API Gateway may take instead).
API_NAME = {"Fn::Sub": "workset-${Stage}"}


def test_the_template_holds_the_tables_the_secrets_key_and_the_queues_and_nothing_else() -> None:
    types = sorted(resource["Type"] for resource in own_resources(template()).values())
    assert types == sorted(["AWS::DynamoDB::Table"] * len(TABLES) + ["AWS::KMS::Key", "AWS::KMS::Alias"]
                           + ["AWS::SQS::Queue"] * 2 * len(QUEUES) + observability_types())
    # and on Chalice's resources, only the consumers' wait for their queues (and the partial
    # batch responses of those that answer them), and the API's name
    assert overlays(template()) == expected_overlays()


def expected_overlays() -> dict[str, dict[str, Any]]:
    """What the fragment must add to Chalice's consumer functions, by `QUEUES`, and to its API."""
    wanted: dict[str, dict[str, Any]] = {
        "RestAPI": {"Properties": {"Name": API_NAME, "DefinitionBody": {"info": {"title": API_NAME}}}}}
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


# ---------------------------------------------------------------------------------------------
# The queues


@dataclass(frozen=True)
class Queue:
    """A queue of the template and the function Lambda's event source feeds it to. Its name is a
    property of the settings: the code sends by that name, `on_sqs_message(queue=...)` subscribes
    by it (Chalice packages the event source as the ARN of that NAME, not as a reference to the
    template's queue), and the template must declare the queue under the same name, with its
    dead-letter queue `<name>-dlq` (as `queues.ensure` makes them on the local stack)."""

    setting: str  # the Settings property that names the queue
    logical_id: str  # the queue in infra/resources.json
    dead_letter_id: str  # its dead-letter queue there
    consumer: str  # the `name=` of its `on_sqs_message` handler
    # The consumer answers {"batchItemFailures": [...]}: its event source must say so
    # (FunctionResponseTypes), or Lambda deletes the failed messages with the rest of the batch.
    reports_batch_item_failures: bool = False
    # The deployed code puts a failed message back with its own backoff (`queues.retry_later`,
    # sqs:ChangeMessageVisibility; on no other queue).
    retried_later: bool = False

    def name(self, stage: str) -> str:
        return str(getattr(deployed_settings(stage), self.setting))

    @property
    def consumer_id(self) -> str:
        """The consumer's logical id in the packaged template."""
        return to_cfn_resource_name(self.consumer)

    @property
    def event_id(self) -> str:
        """The consumer's SQS event source in the packaged template (Chalice names it after the
        handler's `name=`; the fragment's overlay must use the same id)."""
        return to_cfn_resource_name(f"{self.consumer}-sqs-event-source")


QUEUES = [
    Queue("sweep_queue", "SweepQueue", "SweepDeadLetterQueue", "sweep_worker"),
    Queue("webhook_queue", "WebhookQueue", "WebhookDeadLetterQueue", "webhook_consumer",
          reports_batch_item_failures=True, retried_later=True),
]
REPORT_BATCH_ITEM_FAILURES = "ReportBatchItemFailures"

# AWS: a queue that feeds a Lambda function needs a visibility timeout of at least six times the
# function's timeout (plus the event source's batching window); shorter, and a message comes back
# for another delivery while an invocation (or Lambda's retry of a throttled one) still has it.
VISIBILITY_PER_FUNCTION_TIMEOUT = 6
SQS_DEFAULT_RETENTION_SECONDS = 4 * 24 * 3600
DEAD_LETTER_RETENTION_SECONDS = 14 * 24 * 3600  # the most SQS keeps a message
# What Lambda's SQS event source does with the consuming function's role (the three actions of
# the managed policy AWSLambdaSQSQueueExecutionRole). SAM adds no policy of its own to a function
# that has a role, as Chalice's functions all do: the stage policy grants them.
EVENT_SOURCE_ACTIONS = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes")
# Every SQS action (a wider grant must show up as allowed here).
SQS_ACTIONS = [
    "sqs:AddPermission", "sqs:CancelMessageMoveTask", "sqs:ChangeMessageVisibility", "sqs:CreateQueue",
    "sqs:DeleteMessage", "sqs:DeleteQueue", "sqs:GetQueueAttributes", "sqs:GetQueueUrl",
    "sqs:ListDeadLetterSourceQueues", "sqs:ListMessageMoveTasks", "sqs:ListQueueTags", "sqs:ListQueues",
    "sqs:PurgeQueue", "sqs:ReceiveMessage", "sqs:RemovePermission", "sqs:SendMessage", "sqs:SetQueueAttributes",
    "sqs:StartMessageMoveTask", "sqs:TagQueue", "sqs:UntagQueue",
]


def queue_arn(name: str, *, region: str = ARN_REGION, account: str = ARN_ACCOUNT) -> str:
    return f"arn:aws:sqs:{region}:{account}:{name}"


def queue_problems(doc: dict[str, Any], stage: str, queue: Queue, *, worker_timeout: int,
                   batching_window: int = 0) -> list[str]:
    """What is wrong with the template's queue and dead-letter queue for a stage (nothing: []),
    given the timeout of the function that consumes it."""
    resources = doc.get("Resources", {})
    if queue.logical_id not in resources or queue.dead_letter_id not in resources:
        return [f"want {queue.logical_id} and {queue.dead_letter_id}, found {sorted(resources)}"]
    main, dead = resources[queue.logical_id], resources[queue.dead_letter_id]
    problems = []
    for logical_id, resource, name in ((queue.logical_id, main, queue.name(stage)),
                                       (queue.dead_letter_id, dead, f"{queue.name(stage)}-dlq")):
        properties = resource.get("Properties", {})
        if resource.get("Type") != "AWS::SQS::Queue" or properties.get("FifoQueue", False) is not False:
            problems.append(f"{logical_id} is not a standard SQS queue")
        declared = resolve(properties.get("QueueName"), {"Stage": stage})
        if declared != name:
            problems.append(f"{logical_id} is named {declared!r}, the code uses {name!r}")
        # A queue holds work in passing (the sweep's batches, which the next sweep finds again;
        # webhook deliveries, which the agent's next change announces anew): it goes with the
        # stack (a retained one would also block a new stack of the stage, which names it).
        if (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")) != ("Delete", "Delete"):
            problems.append(f"{logical_id} is not deleted with the stack")
        # SSE-SQS: encrypted at rest, and no KMS grant for the sender or the event source
        if properties.get("SqsManagedSseEnabled") is not True or "KmsMasterKeyId" in properties:
            problems.append(f"{logical_id} is not encrypted with SQS-managed keys")
    main_properties, dead_properties = main.get("Properties", {}), dead.get("Properties", {})
    redrive = main_properties.get("RedrivePolicy", {})
    if redrive.get("deadLetterTargetArn") != {"Fn::GetAtt": [queue.dead_letter_id, "Arn"]}:
        problems.append(f"{queue.logical_id} does not redrive to {queue.dead_letter_id}: {redrive}")
    if str(redrive.get("maxReceiveCount")) != str(queues.MAX_RECEIVES):
        problems.append(f"maxReceiveCount is {redrive.get('maxReceiveCount')}, queues.MAX_RECEIVES is "
                        f"{queues.MAX_RECEIVES}")
    if "RedrivePolicy" in dead_properties:
        problems.append(f"{queue.dead_letter_id} redrives further")
    visibility = int(main_properties.get("VisibilityTimeout", 30))
    needed = VISIBILITY_PER_FUNCTION_TIMEOUT * worker_timeout + batching_window
    if visibility < needed:
        problems.append(f"VisibilityTimeout {visibility} s < {VISIBILITY_PER_FUNCTION_TIMEOUT} x the consumer's "
                        f"{worker_timeout} s + {batching_window} s")
    # A message keeps its first enqueue time in a standard dead-letter queue: it must be kept
    # there longer than on the queue, and the longest SQS allows gives time to look at it.
    retention = int(main_properties.get("MessageRetentionPeriod", SQS_DEFAULT_RETENTION_SECONDS))
    dead_retention = int(dead_properties.get("MessageRetentionPeriod", SQS_DEFAULT_RETENTION_SECONDS))
    if dead_retention != DEAD_LETTER_RETENTION_SECONDS or dead_retention <= retention:
        problems.append(f"{queue.dead_letter_id} keeps messages {dead_retention} s (the queue {retention} s)")
    return problems


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


def test_the_stage_parameter_allows_exactly_the_chalice_stages() -> None:
    parameter = template()["Parameters"]["Stage"]
    assert "Default" not in parameter  # a template packaged for one stage must be told which
    assert sorted(parameter["AllowedValues"]) == stages()


# Plain stand-ins for the resources of Chalice's that the fragment names (log groups and alarms
# name the functions, the public URL the API), so that the fragment lints alone.
CHALICE_STANDINS: dict[str, dict[str, Any]] = {
    **{function: {"Type": "AWS::Lambda::Function", "Properties": {
        "Runtime": "python3.12", "Handler": "app.app", "Code": {"ZipFile": "app = None"},
        "Role": "arn:aws:iam::123456789012:role/standin"}}
       for function in ("APIHandler", "Sweep", "SweepWorker", "WebhookConsumer")},
    "RestAPI": {"Type": "AWS::ApiGateway::RestApi", "Properties": {"Name": "standin"}},
}


def test_the_fragment_alone_passes_cfn_lint(tmp_path: Path) -> None:
    """Fast feedback that needs no packaging (the full template is linted further down). The
    overlays on Chalice's resources are left out: alone, they are not resources; the resources
    of Chalice's that it names are stood in for."""
    own = template()
    own["Resources"] = own_resources(own) | CHALICE_STANDINS
    path = tmp_path / "resources.json"
    path.write_text(json.dumps(own))
    findings = cfn_lint(path)
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
    # the stack writes the public URL to /workset/<stage>/public-url (tests/test_deploy.py), which
    # the function reads where WORKSET_PUBLIC_URL is unset; the console secret likewise
    assert "WORKSET_PUBLIC_URL" not in environment and "WORKSET_CONSOLE_SECRET" not in environment
    assert config.autogen_policy is False
    assert config.iam_policy_file == f"policy-{stage}.json"
    assert (CHALICE_DIR / config.iam_policy_file).is_file()

    # The settings the function will see: the stage's environment and the app's own defaults.
    deployed = deployed_settings(stage)
    assert deployed.stage == stage
    assert deployed.table_prefix == f"workset-{stage}"
    # the template's alias (alias/workset-<Stage>) and the policy's condition name this key
    assert deployed.kms_key_id == f"alias/workset-{stage}"
    # the template's queue (workset-<Stage>-sweep) and the policy's grants name this queue
    assert deployed.sweep_queue == f"workset-{stage}-sweep"
    assert deployed.webhook_queue == f"workset-{stage}-webhooks"
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


Context = dict[str, str | list[str]]


def _condition_holds(operator: str, key: str, wanted: list[str], context: Context) -> bool:
    """One condition of a statement, as IAM evaluates it; only the operators the policies use
    (any other fails the test, so a new one cannot pass unevaluated)."""
    present = {name.lower(): value for name, value in context.items()}.get(key.lower())
    values = _as_list(present) if present is not None else []
    if operator == "StringEquals":  # single-valued key: absent never matches
        return len(values) == 1 and values[0] in wanted
    if operator == "ForAnyValue:StringEquals":  # some request value is wanted; absent: false
        return any(value in wanted for value in values)
    if operator == "ForAllValues:StringEquals":  # every request value is wanted; absent: TRUE
        return all(value in wanted for value in values)
    if operator == "StringLike":  # single-valued key, case-sensitive, * and ? as wildcards
        return len(values) == 1 and any(_like(values[0], pattern) for pattern in wanted)
    if operator == "Null":
        assert wanted in (["true"], ["false"]), wanted
        return (not values) == (wanted == ["true"])
    raise AssertionError(f"allows() cannot evaluate condition operator {operator!r}: teach it, precisely")


def _like(value: str, pattern: str) -> bool:
    """IAM's StringLike: `*` any run of characters, `?` one character, nothing else special."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


def allows(document: dict[str, Any], action: str, resource: str, context: Context | None = None) -> bool:
    """Whether an identity policy with Allow statements only grants `action` on `resource` for a
    request carrying the condition keys of `context` (an absent key is absent from the request)."""
    for statement in _statements(document):
        assert statement["Effect"] == "Allow" and "NotAction" not in statement and "NotResource" not in statement
        actions = [a.lower() for a in _as_list(statement["Action"])]
        if not any(fnmatch.fnmatchcase(action.lower(), pattern) for pattern in actions):
            continue
        if not any(fnmatch.fnmatchcase(resource, pattern) for pattern in _as_list(statement["Resource"])):
            continue
        # operators AND together, and so do the keys within one operator
        if all(_condition_holds(operator, key, _as_list(wanted), context or {})
               for operator, keys in statement.get("Condition", {}).items() for key, wanted in keys.items()):
            return True
    return False


def test_allows_evaluates_conditions_as_iam_does() -> None:
    document = {"Statement": [{
        "Effect": "Allow", "Action": "kms:Decrypt", "Resource": "arn:aws:kms:*:*:key/*",
        "Condition": {"ForAnyValue:StringEquals": {"kms:ResourceAliases": "alias/a"},
                      "ForAllValues:StringEquals": {"kms:EncryptionContextKeys": ["k1", "k2"]},
                      "Null": {"kms:EncryptionContextKeys": "false"}},
    }]}
    good = {"kms:ResourceAliases": ["alias/b", "alias/a"], "kms:EncryptionContextKeys": ["k1"]}
    assert allows(document, "kms:Decrypt", KEY_ARN, good)
    assert allows(document, "KMS:decrypt", KEY_ARN, {name.upper(): value for name, value in good.items()})
    assert not allows(document, "kms:Decrypt", KEY_ARN, good | {"kms:ResourceAliases": ["alias/b"]})
    assert not allows(document, "kms:Decrypt", KEY_ARN, {"kms:EncryptionContextKeys": ["k1"]})  # no alias
    assert not allows(document, "kms:Decrypt", KEY_ARN, good | {"kms:EncryptionContextKeys": ["k1", "k3"]})
    assert not allows(document, "kms:Decrypt", KEY_ARN, {"kms:ResourceAliases": ["alias/a"]})  # no context
    assert not allows(document, "kms:Decrypt", KEY_ARN)
    assert not allows(document, "kms:Encrypt", KEY_ARN, good)
    assert not allows(document, "kms:Decrypt", "arn:aws:kms:us-east-1:123456789012:alias/a", good)
    single = {"Statement": [{"Effect": "Allow", "Action": "kms:Encrypt", "Resource": "*",
                             "Condition": {"StringEquals": {"kms:RequestAlias": "alias/a"}}}]}
    assert allows(single, "kms:Encrypt", KEY_ARN, {"kms:RequestAlias": "alias/a"})
    assert not allows(single, "kms:Encrypt", KEY_ARN, {"kms:RequestAlias": "alias/b"})
    assert not allows(single, "kms:Encrypt", KEY_ARN)
    like = {"Statement": [{"Effect": "Allow", "Action": "kms:Decrypt", "Resource": "*",
                           "Condition": {"StringLike": {"kms:ViaService": "ssm.*.amazonaws.com",
                                                        "kms:EncryptionContext:PSARN": "arn:*:p/a?"}}}]}
    via = {"kms:ViaService": "ssm.eu-west-1.amazonaws.com", "kms:EncryptionContext:PSARN": "arn:x:p/ab"}
    assert allows(like, "kms:Decrypt", KEY_ARN, via)
    assert not allows(like, "kms:Decrypt", KEY_ARN, via | {"kms:ViaService": "sqs.eu-west-1.amazonaws.com"})
    assert not allows(like, "kms:Decrypt", KEY_ARN, via | {"kms:ViaService": "SSM.eu-west-1.amazonaws.com"})
    assert not allows(like, "kms:Decrypt", KEY_ARN, via | {"kms:EncryptionContext:PSARN": "arn:x:p/abc"})
    assert not allows(like, "kms:Decrypt", KEY_ARN, {"kms:ViaService": "ssm.eu-west-1.amazonaws.com"})
    unknown = {"Statement": [{"Effect": "Allow", "Action": "kms:Encrypt", "Resource": "*",
                              "Condition": {"StringNotEquals": {"kms:RequestAlias": "alias/b"}}}]}
    with pytest.raises(AssertionError, match="cannot evaluate"):
        allows(unknown, "kms:Encrypt", KEY_ARN, {"kms:RequestAlias": "alias/a"})


def table_arn(stage: str, suffix: str, index: str | None = None, *, region: str = ARN_REGION,
              account: str = ARN_ACCOUNT) -> str:
    arn = f"arn:aws:dynamodb:{region}:{account}:table/{table_prefix(stage)}-{suffix}"
    return f"{arn}/index/{index}" if index else arn


@dataclass(frozen=True)
class Call:
    """One authorization a store call needs, independent of the stage: a DynamoDB action on a
    table (by its name without the prefix) or index, a KMS action on the secrets key, or an SQS
    action on a queue (by its name without the prefix)."""

    action: str
    table: str | None = None
    index: str | None = None
    encryption_context_keys: tuple[str, ...] = ()
    by_alias: bool = False  # the request named the key by its alias (kms:RequestAlias)
    queue: str | None = None

    def request(self, stage: str) -> tuple[str, str, Context]:
        """(action, resource, condition keys) as IAM sees the call made by the stage's function."""
        if self.action.startswith("dynamodb:"):
            assert self.table is not None
            return self.action, table_arn(stage, self.table, self.index), {}
        if self.action.startswith("sqs:"):
            assert self.queue is not None
            return self.action, queue_arn(f"{table_prefix(stage)}-{self.queue}"), {}
        context: Context = {"kms:ResourceAliases": [key_alias(stage)]}
        if self.encryption_context_keys:
            context["kms:EncryptionContextKeys"] = list(self.encryption_context_keys)
        if self.by_alias:
            context["kms:RequestAlias"] = key_alias(stage)
        return self.action, KEY_ARN, context


def dynamodb_calls(operation: str, params: dict[str, Any]) -> Iterator[Call]:
    """What one DynamoDB API call is authorized against (table names still prefixed)."""
    if operation in {"TransactWriteItems", "TransactGetItems"}:
        names = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                 "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}
        for item in params["TransactItems"]:
            ((kind, body),) = item.items()
            yield Call(f"dynamodb:{names[kind]}", body["TableName"])
    elif operation in {"BatchGetItem", "BatchWriteItem"}:
        for name in params["RequestItems"]:
            yield Call(f"dynamodb:{operation}", name)
    else:
        yield Call(f"dynamodb:{operation}", params["TableName"], params.get("IndexName"))


def kms_call(operation: str, params: dict[str, Any], answer: dict[str, Any], key_arn: str) -> Call:
    """What one KMS API call is authorized against: the key it used must be the settings' key."""
    assert operation in {"Encrypt", "Decrypt"}, f"the store calls kms:{operation}; add it to kms_call"
    assert answer["KeyId"] == key_arn, f"{operation} used {answer['KeyId']}, not the key of the settings' alias"
    by_alias = str(params.get("KeyId", "")).startswith("alias/")
    if "KeyId" in params:
        assert params["KeyId"] == app_config.settings().kms_key_id, params["KeyId"]
    return Call(f"kms:{operation}", encryption_context_keys=tuple(sorted(params.get("EncryptionContext", {}))),
                by_alias=by_alias)


# The batch operations of SQS are authorized as the single ones.
SQS_BATCHES = {"SendMessageBatch": "SendMessage", "DeleteMessageBatch": "DeleteMessage",
               "ChangeMessageVisibilityBatch": "ChangeMessageVisibility"}


def sqs_call(operation: str, params: dict[str, Any]) -> Call:
    """What one SQS API call is authorized against: the queue it names or addresses (prefixed)."""
    name = params["QueueName"] if "QueueName" in params else params["QueueUrl"].rstrip("/").rsplit("/", 1)[1]
    return Call(f"sqs:{SQS_BATCHES.get(operation, operation)}", queue=name)


def unrecorded(service: str) -> Any:
    """A client whose calls `record_aws` leaves out: the exercise looks at what the store did."""
    client = boto3.client(service)
    client.unrecorded = True
    return client


def exercise_store() -> set[str]:
    """Run every public store function once against the tables and the key; answer the names run."""
    from dataclasses import replace
    from datetime import timedelta

    from chalicelib.clock import utcnow
    from chalicelib.outcomes import RunStatus
    from chalicelib.store import (
        accounts,
        agents,
        connections,
        history,
        oauth,
        outbox,
        runs,
        sessions,
        sweep,
        tools,
        upstreams,
        vault,
    )
    from chalicelib.store.agents import DemotionGuard, News
    from chalicelib.store.records import (
        Agent,
        AuthorizationCode,
        Connection,
        Grant,
        HistoryEvent,
        OAuthClient,
        Promotion,
        Run,
        Upstream,
    )

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
    run(accounts.set_allowed_hosts, "acct", ["api.acme.test"])
    assert run(accounts.get_allowed_hosts, "acct") == ("api.acme.test",)
    # Console sessions live beside the admin tokens; ending all of them moves the account's epoch.
    run(sessions.create_session, "session-hash", "acct", now, now + timedelta(hours=1))
    assert run(sessions.load_session, "session-hash").account_id == "acct"
    assert run(sessions.console_epoch, "acct") == 0
    run(sessions.end_all_sessions, "acct")
    assert sessions.console_epoch("acct") == 1
    run(sessions.delete_session, "session-hash")
    assert sessions.load_session("session-hash") is None
    agent = Agent(agent_id="a1", account_id="acct", name="hermes", cap=5, idle_window_days=7, created_at=now,
                  webhook_url="https://hooks.acme.test/workset")
    # The webhook's signing secret is sealed as notify.seal_secret does: the agent id goes in the
    # encryption context as connection_id (the consumer decrypts it so, further down).
    signing_secret = "whsec_c2lnbmluZy1zZWNyZXQtb2YtdGhlLWFnZW50"
    sealed = run(vault.encrypt, signing_secret, account_id="acct", connection_id="a1")
    run(agents.create_agent, agent, "key-hash", webhook_secret=sealed)
    run(agents.update_settings, "a1", {"name": "iris"})
    assert len(run(agents.list_agents, "acct", limit=10).items) == 1
    run(tools.put_version, "acct", tools.NewVersion("acme", "orders", {"name": "orders"}, 0), "admin", now)
    assert run(tools.get_head, "acct", "acme", "orders") is not None
    assert run(tools.get_version, "acct", "acme", "orders", 1).version == 1
    assert len(run(tools.get_heads, "acct", [("acme", "orders")])) == 1
    assert len(run(tools.list_heads, "acct")) == 1
    assert len(list(run(tools.iter_heads, "acct"))) == 1
    assert len(run(tools.page_heads, "acct", limit=10).items) == 1
    assert len(run(tools.list_versions, "acct", "acme", "orders")) == 1
    assert [found.version for found in run(tools.get_versions, "acct", [("acme", "orders", 1), ("acme", "x", 1)])] == [1]
    assert run(tools.toolbox_revision, "acct") == 1
    assert run(tools.changed_since, "acct", 0, 1) == {("acme", "orders")}
    # Imports: batches of versions, marking heads unavailable, vectors filled in later, and the
    # registered MCP servers beside the tools (the sparse `upstreams` index lists the fleet's).
    run(tools.put_versions, "acct", [tools.NewVersion("acme", f"bulk-{n}", {"name": "bulk"}, 0) for n in range(2)],
        "admin", now)
    bulk = run(tools.list_vendor_heads, "acct", "acme")
    assert [head.name for head in bulk] == ["bulk-0", "bulk-1", "orders"]
    run(tools.set_unavailable, "acct", bulk[:2], "gone from the document")
    run(tools.set_vectors, "acct", [(bulk[0], b"v" * 768)], "test-vectors")
    run(upstreams.put, Upstream("acct", "docs", "https://mcp.acme.test/mcp", now))
    assert run(upstreams.get, "acct", "docs").url == "https://mcp.acme.test/mcp"
    assert [found.vendor for found in run(upstreams.list_all, "acct", limit=10).items] == ["docs"]
    assert [found.vendor for found in run(upstreams.list_fleet)] == ["docs"]
    run(upstreams.record_sync, "acct", "docs", now, {"ok": True}, "2025-11-25")
    week = now + timedelta(days=7)
    promotion = Promotion("acme", "orders", now, "a1")
    assert run(outbox.pending) == []
    assert run(outbox.change_seq, "a1") == 0
    webhook = News(webhook=True)
    assert run(agents.add_promotion, "a1", "acct", promotion, event, due_at=week, over_cap=False, news=webhook)
    assert agents.add_promotion("a1", "acct", promotion, event, due_at=week, over_cap=True,
                                news=webhook) is False  # promoted already: nothing written, no news
    state = run(agents.load_state, "a1")
    assert state.promotion("acme", "orders").due_at == week
    assert (state.change_seq, state.mcp_seen_seq, state.webhook_url) == (1, 0, agent.webhook_url)

    # The webhook's outbox (the sparse `outbox` index): the change put the agent there; a drain
    # clears only the change it announced, and the consumer decrypts the signing secret.
    assert outbox.pending() == ["a1"] and outbox.change_seq("a1") == 1
    assert run(outbox.clear, "a1", 0) is False  # a newer change than the one announced: it stays
    assert outbox.pending() == ["a1"]
    assert outbox.clear("a1", 1) is True
    assert outbox.pending() == []
    assert state.webhook_secret == sealed and signing_secret.encode() not in sealed
    assert vault.decrypt(state.webhook_secret, account_id=state.agent.account_id,
                         connection_id=state.agent.agent_id) == signing_secret
    # What an MCP response told the client: moves forward only.
    run(outbox.mark_seen, "a1", 1)
    assert agents.load_state("a1").mcp_seen_seq == 1
    outbox.mark_seen("a1", 0)
    assert agents.load_state("a1").mcp_seen_seq == 1

    # Runs: each start/approve/end is one transaction over the run, the agent's settings item
    # (its leases) and, for a promoted tool, its promotion item or, for an approval, its approval.
    lease = now + timedelta(minutes=5)

    def new_run(number: int, status: str, lease_expires_at: Any = lease) -> Run:
        created = now + timedelta(seconds=number)
        return Run(run_id=f"r{number}", agent_id="a1", account_id="acct", vendor="acme", name="orders", version=1,
                   input={"customer": "c1"}, status=status, created_at=created, updated_at=created,
                   lease_expires_at=lease_expires_at)

    r1 = new_run(1, RunStatus.RUNNING)
    run(runs.start, r1, use_due_at=week)
    assert set(agents.load_state("a1").leases) == {"r1"}
    assert run(runs.finish, r1, "succeeded", now, result={"orders": []}) is True
    assert run(runs.finish, r1, "failed", now, error={"code": "x"}) is False  # ended already
    assert run(runs.get, "r1").result == {"orders": []}
    r2, r3 = new_run(2, RunStatus.AWAITING), new_run(3, RunStatus.AWAITING)
    runs.start(r2, use_due_at=None)
    runs.start(r3, use_due_at=None)
    assert [r.run_id for r in run(runs.list_pending, "acct", limit=10).items] == ["r2", "r3"]
    shape = {"method": "POST", "host": "api.acme.test"}
    assert run(runs.approve, r2, "admin", lease, now, shape=shape) is True
    assert runs.approve(r2, "admin", lease, now, shape=shape) is False  # only one approval wins
    assert agents.load_state("a1").decision("acme", "orders").shape == shape
    assert run(runs.deny, r3, "admin", now, shape=shape) is True
    assert runs.get("r3").status == "denied"
    # the denial is news for the webhook until announced; the sweep's index holds it till then
    assert "r3" in {found.run_id for found in run(runs.to_sweep, now + timedelta(seconds=1)) if found.unannounced}
    assert run(runs.announced, "r3") is True
    assert "r3" not in {found.run_id for found in runs.to_sweep(now + timedelta(seconds=1))}
    assert agents.load_state("a1").decision("acme", "orders").decision == "deny"
    assert run(agents.remove_decision, "a1", "acme", "orders") is True
    assert agents.remove_decision("a1", "acme", "orders") is False
    assert run(agents.count_acquire, "a1", "2026-11-30", 1) is True
    assert agents.count_acquire("a1", "2026-11-30", 1) is False  # the day's quota is spent
    assert agents.count_acquire("a1", "2026-12-01", 1) is True  # a new day
    assert runs.list_pending("acct", limit=10).items == []
    r4 = new_run(4, RunStatus.RUNNING, lease_expires_at=now)
    runs.start(r4, use_due_at=week)
    assert run(runs.expire, r4, now + timedelta(seconds=1), cutoff=now + timedelta(seconds=1), announce=False) is True
    assert runs.get("r4").status == "expired"
    assert set(agents.load_state("a1").leases) == {"r2"}
    assert runs.finish(r2, "succeeded", now, result={}) is True
    # a large result is written apart from the run, before the transaction that ends it
    r6 = new_run(6, RunStatus.RUNNING)
    runs.start(r6, use_due_at=None)
    assert runs.finish(r6, "succeeded", now, result={"big": "x" * (runs.INLINE_RESULT_BYTES + 1)}) is True
    assert runs.get("r6").result["big"].startswith("xxx")
    assert [r.run_id for r in run(runs.list_for_agent, "a1", limit=10).items] == ["r6", "r4", "r3", "r2", "r1"]
    assert run(runs.get, "nope") is None

    # The sweep's reads (sparse, sharded indexes) and its bookkeeping writes.
    assert run(agents.agents_with_tool, "acct", "acme", "orders") == ["a1"]
    assert run(sweep.due_agents, now) == {}
    assert sweep.due_agents(week) == {"a1": "acct"}
    used = agents.load_state("a1").promotion("acme", "orders").last_used_at
    assert used == r4.created_at
    assert run(sweep.move_deadline, "a1", "acme", "orders", now, last_used_at=now) is False  # used since
    assert sweep.move_deadline("a1", "acme", "orders", now, last_used_at=used) is True
    assert sweep.due_agents(now) == {"a1": "acct"}
    assert run(sweep.agents_to_review) == {}
    assert run(sweep.make_due, "a1", "acme", "orders", now, "connection_revoked") is True
    assert sweep.agents_to_review() == {"a1": "acct"}
    state = agents.load_state("a1")
    assert state.promotion("acme", "orders").due_cause == "connection_revoked" and state.review_token
    assert run(sweep.clear_review, "a1", "another-token") is False
    assert sweep.clear_review("a1", state.review_token) is True
    assert sweep.agents_to_review() == {}
    # Pins: one transaction over the promotion, the settings item's pin count (held under the
    # limit) and the history event; a promotion a revocation made due keeps its deadline
    assert run(agents.pin_promotion, "a1", "acme", "orders", event, limit=1, keep_due=True) is True
    assert agents.pin_promotion("a1", "acme", "orders", event, limit=1, keep_due=True) is False  # pinned
    assert run(sweep.leave_due, "a1", "acme", "orders") is False  # due by a revocation: it stays due
    assert agents.load_state("a1").promotion("acme", "orders").pinned
    assert run(agents.unpin_promotion, "a1", "acme", "orders", event, due_at=None, over_cap=False) is True

    stale = DemotionGuard(lease_rev=state.lease_rev - 1, last_used_at=used)
    seq = outbox.change_seq("a1")
    assert run(agents.remove_promotion, "a1", "acme", "orders", event, guard=stale, news=webhook) is False
    assert outbox.change_seq("a1") == seq and outbox.pending() == []  # nothing written
    # a demotion for an agent without a webhook: counted, not in the outbox; what an MCP client
    # was told is marked apart, once its answer exists (outbox.mark_seen)
    quiet = News(webhook=False)
    assert agents.remove_promotion("a1", "acme", "orders", event, news=quiet,
                                   guard=DemotionGuard(lease_rev=state.lease_rev, last_used_at=used)) is True
    after = agents.load_state("a1")
    assert (after.change_seq, after.mcp_seen_seq, after.promotions) == (seq + 1, state.mcp_seen_seq, ())
    assert outbox.pending() == []
    run(outbox.mark_seen, "a1", seq + 1)
    assert agents.load_state("a1").mcp_seen_seq == seq + 1
    assert len(run(history.list_events, "a1", limit=10).items) == 4  # promoted, pinned, unpinned, demoted
    assert run(sweep.make_due, "a1", "acme", "orders", now, "idle") is False  # not promoted any more
    runs.start(new_run(5, RunStatus.RUNNING), use_due_at=week)  # demoted meanwhile: the run starts, unmarked
    assert set(agents.load_state("a1").leases) == {"r5"}

    # OAuth: a client and a code beside the admin tokens, the grant in a second agent's partition;
    # redeeming is one transaction over the code, the grant and the agent's settings item.
    client = OAuthClient("oc1", "Chat", ("https://chat.acme.test/cb",), "none", now)
    run(oauth.put_client, client, expires_at=now + timedelta(days=1))
    assert run(oauth.get_client, "oc1", now) == client
    run(oauth.keep_client, "oc1")
    code = AuthorizationCode("oc1", "https://chat.acme.test/cb", "c" * 43, "https://w.test/mcp", "mcp", "acct", "a2",
                             "g1", "admin", now + timedelta(minutes=5))
    run(oauth.put_code, "code-hash", code, forget_at=now + timedelta(days=1))
    assert run(oauth.get_code, "code-hash") == code
    run(agents.create_agent, replace(agent, agent_id="a2"), "key-hash-2")
    grant = Grant("g1", "oc1", "Chat", "mcp", "https://w.test/mcp", now, "admin", access_hash="at-1",
                  access_expires_at=now + timedelta(hours=1), refresh_hash="rt-1", refresh_expires_at=week)
    assert run(oauth.redeem, "code-hash", code, grant, now) is True
    assert oauth.redeem("code-hash", code, grant, now) is False  # once only
    assert run(oauth.rotate, "a2", "g1", presented_hash="rt-1", access_hash="at-2", access_expires_at=week,
               refresh_hash="rt-2", refresh_expires_at=week, now=now) is True
    assert agents.load_state("a2").grants[0].previous_refresh_hash == "rt-1"
    assert run(oauth.revoke_grant, "a2", "g1", now) is True
    assert run(agents.replace_key, "a2", "key-hash-3") is True
    assert run(agents.revoke_agent, "a2", now) is True
    assert agents.replace_key("a2", "key-hash-4") is False  # revoked: no new key
    assert run(agents.archive_agent, "a2", now) is True
    assert agents.load_state("a2").agent.archived_at == now

    # Connections: the secret goes to KMS with the account and connection as encryption context.
    ciphertext = run(vault.encrypt, "s3cret", account_id="acct", connection_id="cn1")
    assert b"s3cret" not in ciphertext
    run(connections.put, Connection(
        connection_id="cn1", account_id="acct", vendor="acme", auth_type="bearer", header_name="Authorization",
        hosts=("api.acme.test",), status=connections.ACTIVE, created_at=now, ciphertext=ciphertext,
    ))
    stored = run(connections.get, "acct", "cn1")
    assert stored is not None and stored.ciphertext == ciphertext and stored.hosts == ("api.acme.test",)
    assert run(vault.decrypt, stored.ciphertext, account_id="acct", connection_id="cn1") == "s3cret"
    assert [c.connection_id for c in run(connections.list_all, "acct", limit=10).items] == ["cn1"]
    assert run(connections.revoke, "acct", "cn1", now) is True
    assert connections.revoke("acct", "cn1", now) is False
    assert connections.get("acct", "cn1").status == connections.REVOKED
    assert run(connections.get, "other", "cn1") is None
    # Reconnected in place; an authorization's state used once; tokens kept over the version read.
    assert run(connections.replace_secret, "acct", "cn1", auth_type="bearer", ciphertext=ciphertext, oauth=None,
               status=connections.ACTIVE, now=now) is True
    assert run(connections.begin_authorization, "acct", "cn1", state_hash="h", session_hash="s",
               expires_at=now + timedelta(minutes=10)) is True
    assert run(connections.take_authorization, "acct", "cn1", state_hash="h", session_hash="s", now=now) is True
    assert connections.take_authorization("acct", "cn1", state_hash="h", session_hash="s", now=now) is False
    tokens = run(vault.encrypt, "{}", account_id="acct", connection_id="cn1", purpose="tokens")
    assert run(connections.connect, "acct", "cn1", token_ciphertext=tokens, expires_at=now, now=now) is True
    read = connections.get("acct", "cn1").token_version
    assert run(connections.save_tokens, "acct", "cn1", token_ciphertext=tokens, expires_at=None,
               read_version=read) is True
    assert connections.save_tokens("acct", "cn1", token_ciphertext=tokens, expires_at=None, read_version=read) is False
    assert run(connections.mark_needs_reconnect, "acct", "cn1", reason="r", read_version=read + 1) is True
    assert run(connections.recent_calls, "acct", "cn1", limit=20).items == []

    # Queues: the sweep's batches (the queue made by `queues.ensure`, as conftest does; in AWS the
    # template declares it). Eleven bodies take two SendMessageBatch calls; the URL is looked up.
    queues._url.cache_clear()
    sweep_queue = app_config.settings().sweep_queue
    run(queues.send, sweep_queue, [{"agent_ids": [f"a{number}"]} for number in range(11)])
    sqs = unrecorded("sqs")
    attributes = sqs.get_queue_attributes(QueueUrl=sqs.get_queue_url(QueueName=sweep_queue)["QueueUrl"],
                                          AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "11"

    # The webhook deliveries: the API function and the sweep send them; the consumer puts a failed
    # one back after its backoff (sqs:ChangeMessageVisibility), on the queues that do so alone.
    for queue in (queue for queue in QUEUES if queue.retried_later):
        name = getattr(app_config.settings(), queue.setting)
        run(queues.send, name, [{"type": "tools_list_changed", "agent_id": "a1", "event_id": "evt_a1_1"}])
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        (message,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=600)["Messages"]
        assert json.loads(message["Body"])["event_id"] == "evt_a1_1"
        assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []  # in flight
        run(queues.retry_later, name, message["ReceiptHandle"], 0)  # visible again at once
        (again,) = sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])["Messages"]
        assert again["MessageId"] == message["MessageId"] and again["Attributes"]["ApproximateReceiveCount"] == "2"
    return ran


# Store modules that talk to AWS only through the functions of the others, or not at all
# (`tables` creates tables: the operator CLI and tests do that, never the function).
NOT_CALLED_BY_THE_FUNCTION = {"base", "models", "records", "tables"}
# Public store functions that build items, attributes or update actions without calling AWS.
PURE = {"chalicelib.store.history.new_item", "chalicelib.store.agents.due_fields",
        "chalicelib.store.agents.review_actions", "chalicelib.store.agents.decision_record",
        "chalicelib.store.base.page"}
# Public store functions that only the local stack and tests call: the deployed function must
# not be able to (the template makes the key and its alias), or need not (the template makes the
# queues, and Lambda's event sources receive and delete their messages).
NOT_DEPLOYED = {"chalicelib.store.vault.ensure_key", "chalicelib.store.queues.ensure",
                "chalicelib.store.queues.receive", "chalicelib.store.queues.delete"}


def public_store_functions() -> set[str]:
    names = set()
    for module_info in pkgutil.iter_modules(chalicelib.store.__path__):
        if module_info.name in NOT_CALLED_BY_THE_FUNCTION:
            continue
        module = importlib.import_module(f"chalicelib.store.{module_info.name}")
        for name, function in inspect.getmembers(module, inspect.isfunction):
            if function.__module__ == module.__name__ and not name.startswith("_"):
                names.add(f"{module.__name__}.{name}")
    return names - PURE - NOT_DEPLOYED


@pytest.fixture
def record_aws(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """Every AWS API call from now on: (service, operation, parameters, answer or {})."""
    calls: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []
    original = botocore.client.BaseClient._make_api_call

    def record(client: Any, operation: str, params: dict[str, Any]) -> Any:
        if getattr(client, "unrecorded", False):
            return original(client, operation, params)
        entry = (client.meta.service_model.service_name, operation, copy.deepcopy(params), {})
        calls.append(entry)
        answer = original(client, operation, params)
        entry[3].update(answer)
        return answer

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", record)
    return calls


@pytest.fixture
def store_calls(record_aws: list[tuple[str, str, dict[str, Any], dict[str, Any]]]) -> list[Call]:
    """The authorizations every AWS call made by every store function needs."""
    key_arn = boto3.client("kms").describe_key(KeyId=app_config.settings().kms_key_id)["KeyMetadata"]["Arn"]
    del record_aws[:]
    ran = exercise_store()
    missing = public_store_functions() - ran
    assert not missing, f"store functions the policy check does not run (add them to exercise_store): {missing}"
    prefix = app_config.settings().table_prefix + "-"
    needed = []
    for service, operation, params, answer in record_aws:
        if service == "dynamodb":
            for call in dynamodb_calls(operation, params):
                assert call.table is not None and call.table.startswith(prefix), call
                needed.append(Call(call.action, call.table[len(prefix):], call.index))
        elif service == "kms":
            needed.append(kms_call(operation, params, answer, key_arn))
        elif service == "sqs":
            call = sqs_call(operation, params)
            assert call.queue is not None and call.queue.startswith(prefix), call
            needed.append(Call(call.action, queue=call.queue[len(prefix):]))
        else:
            raise AssertionError(f"the store calls {service}:{operation}; the policies know nothing of {service}")
    return needed


def call_grant_problems(document: dict[str, Any], stage: str, calls: list[Call]) -> list[str]:
    """What is wrong with a policy for the calls the store makes (nothing: []): a call it denies,
    an action it grants that no call (nor Lambda's event sources) needs."""
    problems = []
    denied = sorted({call.request(stage)[:2] for call in calls if not allows(document, *call.request(stage))})
    if denied:
        problems.append(f"denies calls the store makes: {denied}")
    needed = {call.action.lower() for call in calls}
    if QUEUES:  # and Lambda's event sources, through the consumers' roles
        needed |= {action.lower() for action in EVENT_SOURCE_ACTIONS}
    # and chalicelib/config.py's reads of the stage's parameters (tests/test_deploy.py checks on what)
    needed |= {action.lower() for action in CONFIG_ACTIONS}
    granted = {
        action.lower()
        for statement in _statements(document)
        for action in _as_list(statement["Action"])
        if not action.lower().startswith("logs:")
    }
    if granted != needed:
        problems.append(f"granted but never needed: {sorted(granted - needed)}; "
                        f"needed but never granted: {sorted(needed - granted)}")
    return problems


@pytest.mark.parametrize("stage", stages())
def test_policy_allows_every_call_the_store_makes_and_nothing_more(stage: str, store_calls: list[Call]) -> None:
    needed = {call.action.lower() for call in store_calls}
    assert {"kms:encrypt", "kms:decrypt", "sqs:getqueueurl", "sqs:sendmessage", "sqs:changemessagevisibility",
            "dynamodb:query"} <= needed
    assert call_grant_problems(policy(stage), stage, store_calls) == [], f"policy-{stage}.json"


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
            assert "Condition" not in statement, statement
            resources.update(_as_list(statement["Resource"]))
    assert resources == expected
    # and nothing of another stage
    for other in set(stages()) - {stage}:
        assert not allows(policy(stage), "dynamodb:GetItem", table_arn(other, "accounts"))


# What chalicelib/config.py (not the store) calls: the stage's parameters in SSM.
CONFIG_ACTIONS = ("ssm:GetParameter",)


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
    stage: str, record_aws: list[tuple[str, str, dict[str, Any], dict[str, Any]]]
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


def queue_grant_problems(document: dict[str, Any], stage: str, calls: list[Call]) -> list[str]:
    """What is wrong with a policy's SQS grants (nothing: []). Sending and putting back: the
    actions the store's calls need, on the queues they name. Consuming: what Lambda's event
    sources do, on the queues of `QUEUES`. Nothing else of SQS on any queue, nothing on a
    dead-letter queue, nothing of another stage."""
    expected = {(call.action, queue_arn(f"{table_prefix(stage)}-{call.queue}", region="*", account="*"))
                for call in calls if call.queue is not None}
    expected |= {(action, queue_arn(queue.name(stage), region="*", account="*"))
                 for queue in QUEUES for action in EVENT_SOURCE_ACTIONS}
    problems = []
    granted = set()
    for statement in _statements(document):
        actions = _as_list(statement["Action"])
        if any(action.startswith("sqs:") for action in actions):
            if not all(action.startswith("sqs:") for action in actions) or "Condition" in statement:
                problems.append(f"an SQS statement mixes services or has conditions: {statement}")
            granted |= {(action, resource) for action in actions for resource in _as_list(statement["Resource"])}
    if granted != expected:
        problems.append(f"SQS grants {sorted(granted - expected)} beyond, and lack {sorted(expected - granted)}")
    for queue in QUEUES:
        name = queue.name(stage)
        here = {action for action, resource in expected if fnmatch.fnmatchcase(queue_arn(name), resource)}
        for action in SQS_ACTIONS:  # on each queue exactly its own actions
            if allows(document, action, queue_arn(name)) != (action in here):
                problems.append(f"{action} on {name}: {'granted' if action not in here else 'denied'}")
            if allows(document, action, queue_arn(f"{name}-dlq")):
                problems.append(f"{action} on {name}-dlq")
            for other in set(stages()) - {stage}:
                if allows(document, action, queue_arn(queue.name(other))):
                    problems.append(f"{action} on {queue.name(other)} (stage {other})")
    return problems


@pytest.mark.parametrize("stage", stages())
def test_policy_reaches_exactly_the_stage_queues(stage: str, store_calls: list[Call]) -> None:
    assert queue_grant_problems(policy(stage), stage, store_calls) == []
    # spelled out for the webhooks: the consumer puts a failed delivery back with its backoff there,
    # and nowhere else
    retry = "sqs:ChangeMessageVisibility"
    assert [queue.setting for queue in QUEUES if queue.retried_later] == ["webhook_queue"]
    assert allows(policy(stage), retry, queue_arn(f"workset-{stage}-webhooks"))
    for name in (f"workset-{stage}-sweep", f"workset-{stage}-webhooks-dlq", f"workset-{stage}-sweep-dlq"):
        assert not allows(policy(stage), retry, queue_arn(name)), name


def _statement(document: dict[str, Any], sid: str) -> dict[str, Any]:
    (statement,) = (statement for statement in _statements(document) if statement.get("Sid") == sid)
    return statement


def _retry_on_the_sweep_queue_instead(document: dict[str, Any]) -> None:
    _statement(document, "WorksetWebhookRetries")["Resource"] = ["arn:aws:sqs:*:*:workset-dev-sweep"]


def _retry_on_both_queues(document: dict[str, Any]) -> None:
    _statement(document, "WorksetWebhookRetries")["Resource"].append("arn:aws:sqs:*:*:workset-dev-sweep")


def _retry_on_every_queue_of_the_stage(document: dict[str, Any]) -> None:
    _statement(document, "WorksetWebhookRetries")["Resource"] = ["arn:aws:sqs:*:*:workset-dev-*"]


def _retry_on_the_dead_letters(document: dict[str, Any]) -> None:
    _statement(document, "WorksetWebhookRetries")["Resource"] = ["arn:aws:sqs:*:*:workset-dev-webhooks-dlq"]


def _no_retry(document: dict[str, Any]) -> None:
    document["Statement"].remove(_statement(document, "WorksetWebhookRetries"))


def _retry_granted_with_the_event_sources(document: dict[str, Any]) -> None:
    _no_retry(document)
    _statement(document, "WorksetQueuesEventSources")["Action"].append("sqs:ChangeMessageVisibility")


def _webhooks_not_consumed(document: dict[str, Any]) -> None:
    _statement(document, "WorksetQueuesEventSources")["Resource"].remove("arn:aws:sqs:*:*:workset-dev-webhooks")


def _webhooks_not_sent(document: dict[str, Any]) -> None:
    _statement(document, "WorksetQueuesSend")["Resource"].remove("arn:aws:sqs:*:*:workset-dev-webhooks")


def _no_outbox_index(document: dict[str, Any]) -> None:
    _statement(document, "WorksetIndexes")["Resource"].remove(
        "arn:aws:dynamodb:*:*:table/workset-dev-agents/index/outbox")


def _webhook_secret_without_its_context(document: dict[str, Any]) -> None:
    _statement(document, "WorksetSecretsKey")["Condition"]["ForAllValues:StringEquals"][
        "kms:EncryptionContextKeys"] = ["account_id"]


@pytest.mark.parametrize(
    "break_it",
    [_retry_on_the_sweep_queue_instead, _retry_on_both_queues, _retry_on_every_queue_of_the_stage,
     _retry_on_the_dead_letters, _no_retry, _retry_granted_with_the_event_sources, _webhooks_not_consumed,
     _webhooks_not_sent, _no_outbox_index, _webhook_secret_without_its_context],
)
def test_a_broken_policy_fails_the_checks(break_it: Callable[[dict[str, Any]], None],
                                          store_calls: list[Call]) -> None:
    broken = policy("dev")
    break_it(broken)
    assert broken != policy("dev")
    assert call_grant_problems(broken, "dev", store_calls) + queue_grant_problems(broken, "dev", store_calls) != []


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
    stage: str, record_aws: list[tuple[str, str, dict[str, Any], dict[str, Any]]]
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
    # the function's name: `chalice deploy` names it workset-<stage>; CloudFormation names it
    # <stack>-APIHandler-<random>, and infra/deploy.sh names the stack workset-<stage>
    for log_group in (f"{groups}/workset-{stage}", f"{groups}/workset-{stage}-APIHandler-1A2B3C4D5E6F"):
        # the stack makes the log groups (with their retention): a group the function made
        # itself would keep its events forever, and would block the stack's own
        assert not allows(document, "logs:CreateLogGroup", log_group)
        assert allows(document, "logs:CreateLogStream", f"{log_group}:log-stream:x")
        assert allows(document, "logs:PutLogEvents", f"{log_group}:log-stream:x")
    assert not allows(document, "logs:PutLogEvents", f"arn:aws:logs:{ARN_REGION}:{ARN_ACCOUNT}:log-group:/other")
    assert not any(allows(document, "logs:CreateLogGroup", resource) for resource in ("*", f"{groups}/x"))
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
    for a package index it cannot reach; ask pip which of the two it is. Offline, the packaged
    template's tests skip, except under CI (the `CI` variable set), where they fail."""
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
        reason = f"chalice package needs the package index to vendor {missing.group(1)}, and this machine cannot reach it"
        if os.environ.get("CI"):
            pytest.fail(f"CI must package the template: {reason}")
        pytest.skip(reason)


@pytest.mark.parametrize("ci, outcome", [("true", pytest.fail.Exception), (None, pytest.skip.Exception)])
def test_an_unreachable_package_index_fails_the_packaged_checks_under_ci_and_skips_them_elsewhere(
    ci: str | None, outcome: type[BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN chalice package could not vendor a requirement, and pip cannot reach the index either
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    offline = subprocess.CompletedProcess([], 1, stdout="", stderr="Failed to establish a NewConnectionError")
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: offline)
    # WHEN the packaging fixture asks whether to skip
    # THEN under CI the checks fail, elsewhere they skip
    with pytest.raises((pytest.fail.Exception, pytest.skip.Exception)) as ended:
        _skip_if_offline("Could not satisfy the requirement: numpy==2.2.6")
    assert ended.type is outcome


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
    assert unzipped < LAMBDA_UNZIPPED_LIMIT_BYTES, (  # the whole package, vendor/ too: tests/test_package.py
        f"{unzipped / 2**20:.0f} MB unzipped without vendor/")


def test_packaged_template_is_consistent(packaged: dict[str, Any]) -> None:
    """The merge kept Chalice's resources and added ours; every function (the API handler, the
    scheduled sweep and the queue consumers), its role, the tables and the key agree on the stage."""
    packaged_template = packaged["template"]
    resources = packaged_template["Resources"]
    functions = {i: r["Properties"] for i, r in resources.items() if r["Type"] == "AWS::Serverless::Function"}
    assert {"APIHandler", "Sweep", *(queue.consumer_id for queue in QUEUES)} <= set(functions)
    groups = f"arn:aws:logs:{ARN_REGION}:{ARN_ACCOUNT}:log-group:/aws/lambda"
    for logical_id, function in functions.items():
        assert function["Timeout"] == stage_config("dev").lambda_timeout, logical_id
        assert function["Environment"]["Variables"] == stage_config("dev").environment_variables, logical_id
        # Chalice gives every function a role with the stage policy (so SAM adds none of its own,
        # for an SQS event source either): the policy is all the function and its events get.
        role = resources[function["Role"]["Fn::GetAtt"][0]]["Properties"]
        assert [p["PolicyDocument"] for p in role["Policies"]] == [policy("dev")], logical_id
        assert "ManagedPolicyArns" not in role and "Policies" not in function, logical_id
        # CloudFormation names the function <stack>-<logical id>-<random>; the stack is workset-dev
        assert "FunctionName" not in function, logical_id
        log_stream = f"{groups}/workset-dev-{logical_id}-1A2B3C4D5E6F:log-stream:x"
        assert allows(policy("dev"), "logs:PutLogEvents", log_stream), logical_id
    assert declared_tables(packaged_template, "dev") == declared_tables(template(), "dev")
    for logical_id, resource in own_resources(template()).items():  # tables, key, alias, queues
        assert resources[logical_id] == resource, logical_id
    for logical_id, overlay in overlays(template()).items():  # merged onto Chalice's resources
        assert logical_id in functions or logical_id == "RestAPI", f"{logical_id}: not Chalice's function or API"
        assert _merged_into(overlay, resources[logical_id]), (logical_id, overlay)
    assert resources["RestAPI"]["Type"] == "AWS::Serverless::Api"
    assert packaged_template["Parameters"]["Stage"] == template()["Parameters"]["Stage"]


def _merged_into(part: Any, whole: Any) -> bool:
    """Whether `whole` carries `part` as `chalice package --merge-template` merges it: dicts key by
    key (deeply), anything else replaced as a whole."""
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(key in whole and _merged_into(value, whole[key])
                                               for key, value in part.items())
    return bool(part == whole)


PSEUDO_PARAMETERS = {"AWS::Partition": "aws", "AWS::Region": ARN_REGION, "AWS::AccountId": ARN_ACCOUNT}


def arn_in(doc: dict[str, Any], value: Any, stage: str) -> Any:
    """The ARN a template value comes to for a stage: an `Fn::Sub` (Chalice's event sources) or
    the `Arn` of one of the template's queues."""
    if isinstance(value, dict) and set(value) == {"Fn::GetAtt"} and value["Fn::GetAtt"][1] == "Arn":
        target = doc["Resources"].get(value["Fn::GetAtt"][0], {})
        if target.get("Type") == "AWS::SQS::Queue":
            return queue_arn(resolve(target["Properties"]["QueueName"], {"Stage": stage}))
    return resolve(value, {"Stage": stage, **PSEUDO_PARAMETERS})


def event_source_problems(doc: dict[str, Any], stage: str) -> list[str]:
    """What is wrong with the packaged template's SQS event sources (nothing: []): each of
    `QUEUES` is read by one event source of its consumer, which points at the ARN of the queue
    the template declares, is made after that queue, fits its visibility timeout and asks for
    partial batch responses exactly when the consumer answers them; no other function reads a
    queue."""
    resources = doc["Resources"]
    events = {
        (function_id, event_id): event
        for function_id, resource in resources.items() if resource["Type"] == "AWS::Serverless::Function"
        for event_id, event in resource["Properties"].get("Events", {}).items()
    }
    # an overlay merged onto an event id Chalice does not use makes an event of its own, untyped
    problems = [f"{function_id}.{event_id} has no Type (an overlay on an event Chalice did not make?)"
                for (function_id, event_id), event in events.items() if "Type" not in event]
    sources = {key: event["Properties"] for key, event in events.items() if event.get("Type") == "SQS"}
    if sorted(function_id for function_id, _ in sources) != sorted(queue.consumer_id for queue in QUEUES):
        problems.append(f"SQS event sources {sorted(sources)}, want one for each of "
                        f"{[queue.consumer_id for queue in QUEUES]}")
    for queue in QUEUES:
        declared = arn_in(doc, {"Fn::GetAtt": [queue.logical_id, "Arn"]}, stage)
        for (function_id, event_id), properties in sources.items():
            if function_id != queue.consumer_id:
                continue
            source = arn_in(doc, properties["Queue"], stage)
            if source != declared:
                problems.append(f"{function_id}.{event_id} reads {source}, the template declares {declared}")
            if event_id != queue.event_id:
                problems.append(f"{function_id}'s SQS event source is {event_id}, the fragment's overlay names "
                                f"{queue.event_id}")
            # Without ReportBatchItemFailures Lambda ignores `batchItemFailures` and deletes the
            # whole batch, the failed messages too (no retry, no dead-letter queue)
            response_types = properties.get("FunctionResponseTypes")
            wanted = [REPORT_BATCH_ITEM_FAILURES] if queue.reports_batch_item_failures else None
            if response_types != wanted:
                problems.append(f"{function_id}.{event_id} has FunctionResponseTypes {response_types}, want {wanted}")
            # Lambda cannot make an event source of a queue that does not exist yet; Chalice's
            # Fn::Sub of a name orders nothing, the consumer's DependsOn does (its event source
            # mapping refers to the function, so it waits for both)
            if queue.logical_id not in _as_list(resources[function_id].get("DependsOn", [])):
                problems.append(f"{function_id} (and so {event_id}) does not wait for {queue.logical_id}")
            timeout = resources[function_id]["Properties"]["Timeout"]
            problems += queue_problems(doc, stage, queue, worker_timeout=timeout,
                                       batching_window=properties.get("MaximumBatchingWindowInSeconds", 0))
    return problems


def test_packaged_event_sources_read_the_declared_queues(packaged: dict[str, Any]) -> None:
    assert event_source_problems(packaged["template"], "dev") == []
    # spelled out for the webhook deliveries: Chalice's own event source, with the fragment's
    # partial batch responses merged onto it
    (webhooks,) = (queue for queue in QUEUES if queue.setting == "webhook_queue")
    events = packaged["template"]["Resources"]["WebhookConsumer"]["Properties"]["Events"]
    source = events["WebhookConsumerSqsEventSource"]
    assert (webhooks.consumer_id, webhooks.event_id) == ("WebhookConsumer", "WebhookConsumerSqsEventSource")
    assert source["Type"] == "SQS" and source["Properties"]["BatchSize"] == 10
    assert source["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def _source_of(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["Resources"]["SweepWorker"]["Properties"]["Events"]["SweepWorkerSqsEventSource"]["Properties"]


def _webhook_events(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["Resources"]["WebhookConsumer"]["Properties"]["Events"]


def _no_report_batch_item_failures(doc: dict[str, Any]) -> None:
    del _webhook_events(doc)["WebhookConsumerSqsEventSource"]["Properties"]["FunctionResponseTypes"]


def _empty_response_types(doc: dict[str, Any]) -> None:
    _webhook_events(doc)["WebhookConsumerSqsEventSource"]["Properties"]["FunctionResponseTypes"] = []


def _response_types_merged_onto_another_event(doc: dict[str, Any]) -> None:
    """What packaging gives when the overlay names an event id Chalice does not use."""
    properties = _webhook_events(doc)["WebhookConsumerSqsEventSource"]["Properties"]
    _webhook_events(doc)["WebhookConsumerSqsEvent"] = {
        "Properties": {"FunctionResponseTypes": properties.pop("FunctionResponseTypes")}}


def _sweep_worker_reports_batch_item_failures(doc: dict[str, Any]) -> None:
    _source_of(doc)["FunctionResponseTypes"] = [REPORT_BATCH_ITEM_FAILURES]


def _webhook_consumer_does_not_wait_for_its_queue(doc: dict[str, Any]) -> None:
    del doc["Resources"]["WebhookConsumer"]["DependsOn"]


def _webhook_source_on_the_sweep_queue(doc: dict[str, Any]) -> None:
    _webhook_events(doc)["WebhookConsumerSqsEventSource"]["Properties"]["Queue"] = {"Fn::GetAtt": ["SweepQueue", "Arn"]}


def _webhook_queue_short_visibility(doc: dict[str, Any]) -> None:
    doc["Resources"]["WebhookQueue"]["Properties"]["VisibilityTimeout"] = 30


def _declared_queue_renamed(doc: dict[str, Any]) -> None:
    doc["Resources"]["SweepQueue"]["Properties"]["QueueName"] = {"Fn::Sub": "workset-${Stage}-sweep-queue"}


def _source_of_another_name(doc: dict[str, Any]) -> None:
    _source_of(doc)["Queue"] = {"Fn::Sub": "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:sweep"}


def _source_on_the_dead_letters(doc: dict[str, Any]) -> None:
    _source_of(doc)["Queue"] = {"Fn::GetAtt": ["SweepDeadLetterQueue", "Arn"]}


def _consumer_does_not_wait(doc: dict[str, Any]) -> None:
    del doc["Resources"]["SweepWorker"]["DependsOn"]


def _second_consumer(doc: dict[str, Any]) -> None:
    doc["Resources"]["Sweep"]["Properties"]["Events"]["Extra"] = {"Type": "SQS", "Properties": _source_of(doc)}


def _slow_consumer(doc: dict[str, Any]) -> None:
    doc["Resources"]["SweepWorker"]["Properties"]["Timeout"] = 900


def _batching_window(doc: dict[str, Any]) -> None:
    _source_of(doc)["MaximumBatchingWindowInSeconds"] = 300


def _packaged_three_receives(doc: dict[str, Any]) -> None:
    doc["Resources"]["SweepQueue"]["Properties"]["RedrivePolicy"]["maxReceiveCount"] = 3


@pytest.mark.parametrize(
    "break_it",
    [_declared_queue_renamed, _source_of_another_name, _source_on_the_dead_letters, _consumer_does_not_wait,
     _second_consumer, _slow_consumer, _batching_window, _packaged_three_receives, _no_report_batch_item_failures,
     _empty_response_types, _response_types_merged_onto_another_event, _sweep_worker_reports_batch_item_failures,
     _webhook_consumer_does_not_wait_for_its_queue, _webhook_source_on_the_sweep_queue,
     _webhook_queue_short_visibility],
)
def test_a_broken_event_source_fails_the_check(packaged: dict[str, Any],
                                               break_it: Callable[[dict[str, Any]], None]) -> None:
    broken = copy.deepcopy(packaged["template"])
    break_it(broken)
    assert event_source_problems(broken, "dev") != []


def test_deploy_script_parses() -> None:
    result = subprocess.run(["bash", "-n", str(ROOT / "infra" / "deploy.sh")], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
