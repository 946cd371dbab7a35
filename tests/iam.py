"""The stage policies as IAM evaluates them, and what IAM sees of one call (the infra tests'
second helper module, beside tests/infra.py).

- `allows`: whether an Allow-only identity policy grants an action on a resource for a request
  with given condition keys. tests/test_iam.py holds it to IAM's rules. moto's evaluator is no
  substitute: it knows StringEquals only and passes every other operator (moto 5.2.5,
  `moto/iam/policy_conditions.py`).
- `Call` and `dynamodb_calls` / `kms_call` / `sqs_call`: one AWS call as IAM authorises it.
- The `record_aws` fixture: every AWS call from then on (import `record_aws_fixture` with
  `# noqa: F401`, as tests/books.py's fixtures are).
"""

from __future__ import annotations

import copy
import fnmatch
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.client
import pytest

from chalicelib.base import config as app_config
from tests.infra import ARN_ACCOUNT, ARN_REGION, KEY_ARN, AwsCall, key_alias, queue_arn, table_prefix


def statements_of(document: dict[str, Any]) -> list[dict[str, Any]]:
    statements = document["Statement"]
    return statements if isinstance(statements, list) else [statements]


def as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


Context = dict[str, str | list[str]]


def _condition_holds(operator: str, key: str, wanted: list[str], context: Context) -> bool:
    """One condition of a statement, as IAM evaluates it; only the operators the policies use
    (any other fails the test, so a new one cannot pass unevaluated)."""
    present = {name.lower(): value for name, value in context.items()}.get(key.lower())
    values = as_list(present) if present is not None else []
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
    for statement in statements_of(document):
        assert statement["Effect"] == "Allow" and "NotAction" not in statement and "NotResource" not in statement
        actions = [a.lower() for a in as_list(statement["Action"])]
        if not any(fnmatch.fnmatchcase(action.lower(), pattern) for pattern in actions):
            continue
        if not any(fnmatch.fnmatchcase(resource, pattern) for pattern in as_list(statement["Resource"])):
            continue
        # operators AND together, and so do the keys within one operator
        if all(_condition_holds(operator, key, as_list(wanted), context or {})
               for operator, keys in statement.get("Condition", {}).items() for key, wanted in keys.items()):
            return True
    return False


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


@pytest.fixture(name="record_aws")
def record_aws_fixture(monkeypatch: pytest.MonkeyPatch) -> list[AwsCall]:
    """Every AWS API call from now on: (service, operation, parameters, answer or {})."""
    calls: list[AwsCall] = []
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


def unrecorded(service: str) -> Any:
    """A client whose calls `record_aws` leaves out: the store's tour (tests/store_tour.py) looks at
    what the store did."""
    client = boto3.client(service)
    client.unrecorded = True
    return client
