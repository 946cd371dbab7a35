"""What the infra tests share (tests/test_infra_*.py, tests/test_iam.py, tests/test_deploy.py).

- Reading `.chalice/config.json`, the per-stage IAM policies and `infra/resources.json` (the
  CloudFormation fragment merged by `chalice package --merge-template`), and the settings a
  stage's function will see.
- One shape for a table, whether read from DescribeTable or from CloudFormation properties.
- The template's SQS queues (`QUEUES`) and what a queue and its dead-letter queue must be.
- The fixture `packaged` (`chalice package`, once for each module that uses it); a test module
  imports `packaged_fixture` with `# noqa: F401`, as tests/books.py's fixtures are.

The policies as IAM evaluates them, and what IAM sees of a call, are tests/iam.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import pytest
from chalice.config import Config
from chalice.utils import to_cfn_resource_name
from packaging.tags import Tag, compatible_tags, cpython_tags, parse_tag

from chalicelib.base import config as app_config
from chalicelib.store import queues
from chalicelib.store.models import TABLES
from tests.isolation import one_at_a_time

ROOT = Path(__file__).resolve().parent.parent
CHALICE_DIR = ROOT / ".chalice"
RESOURCES = ROOT / "infra" / "resources.json"

API_GATEWAY_LIMIT_SECONDS = 29  # REST API integration timeout
ARN_REGION, ARN_ACCOUNT = "us-east-1", "123456789012"
# What IAM sees as the resource of an Encrypt or Decrypt: the key itself, never its alias.
KEY_ARN = f"arn:aws:kms:{ARN_REGION}:{ARN_ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
CHALICE_FUNCTIONS = ["APIHandler", "Sweep", "SweepWorker", "WebhookConsumer"]  # Chalice's logical ids
# One AWS API call as `record_aws` records it: (service, operation, parameters, answer or {}).
AwsCall = tuple[str, str, dict[str, Any], dict[str, Any]]


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


def outside_environment() -> dict[str, str]:
    """This process's environment without the app's settings (WORKSET_*)."""
    return {name: value for name, value in os.environ.items() if not name.startswith("WORKSET_")}


def settings_under(variables: dict[str, str]) -> app_config.Settings:
    """The settings a function whose environment sets `variables` sees: those over the app's own
    defaults (uncached: the process's settings stay as they are)."""
    with mock.patch.dict(os.environ, outside_environment() | variables, clear=True):
        return app_config.settings.__wrapped__()


def deployed_settings(stage: str) -> app_config.Settings:
    """The settings the stage's function will see: the stage's environment over the app's own
    defaults."""
    return settings_under(stage_config(stage).environment_variables)


def key_alias(stage: str) -> str:
    """The alias the stage's function encrypts with (WORKSET_KMS_KEY_ID or its default)."""
    return deployed_settings(stage).kms_key_id


# The pseudo parameters of a stack as the tests deploy it (stack workset-<stage>).
def pseudo_parameters(stage: str) -> dict[str, str]:
    return {"AWS::Partition": "aws", "AWS::Region": ARN_REGION, "AWS::AccountId": ARN_ACCOUNT,
            "AWS::StackName": f"workset-{stage}", "AWS::URLSuffix": "amazonaws.com"}


NO_VALUE = object()


def evaluate(value: Any, parameters: dict[str, Any], conditions: dict[str, bool] | None = None) -> Any:
    """A template value with its intrinsic functions worked out as CloudFormation would: `Ref` to a
    parameter or pseudo parameter, `Fn::Sub` (either form), `Fn::If` over `conditions` (absent:
    false), `AWS::NoValue` dropped. Anything else (`Fn::GetAtt`, a `Ref` to a resource) stays."""
    conditions = conditions or {}
    if isinstance(value, list):
        items = [evaluate(item, parameters, conditions) for item in value]
        return [item for item in items if item is not NO_VALUE]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Ref"} and value["Ref"] == "AWS::NoValue":
        return NO_VALUE
    if set(value) == {"Ref"} and value["Ref"] in parameters:
        return parameters[value["Ref"]]
    if set(value) == {"Fn::If"}:
        condition, when_true, when_false = value["Fn::If"]
        return evaluate(when_true if conditions.get(condition, False) else when_false, parameters, conditions)
    if set(value) == {"Fn::Sub"}:
        text, names = (value["Fn::Sub"], {}) if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"]
        known = parameters | {name: evaluate(v, parameters, conditions) for name, v in names.items()}
        return re.sub(r"\$\{([^}!]+)\}", lambda match: str(known[match.group(1)]), text)
    items = {key: evaluate(item, parameters, conditions) for key, item in value.items()}
    return {key: item for key, item in items.items() if item is not NO_VALUE}


def role_policy(stage: str, function: str, doc: dict[str, Any] | None = None,
                conditions: dict[str, bool] | None = None) -> dict[str, Any]:
    """The identity policy of one function's role (`<function>Role` in infra/resources.json, or in
    `doc`), its ARNs resolved for the stage's stack in ARN_REGION of ARN_ACCOUNT."""
    resources = (doc or template())["Resources"]
    (document,) = [p["PolicyDocument"] for p in resources[f"{function}Role"]["Properties"]["Policies"]]
    resolved = evaluate(document, {"Stage": stage, **pseudo_parameters(stage)}, conditions)
    assert isinstance(resolved, dict)
    return resolved


def policy(stage: str) -> dict[str, Any]:
    """Every grant of the stack's roles together (each statement's Sid prefixed with its function):
    what the deployed code can do at all. One function's grants: `role_policy`."""
    statements = [
        {**statement, "Sid": f"{function}.{statement['Sid']}"}
        for function in CHALICE_FUNCTIONS
        for statement in role_policy(stage, function)["Statement"]
    ]
    return {"Version": "2012-10-17", "Statement": statements}


def template() -> dict[str, Any]:
    return json.loads(RESOURCES.read_text())


def resolve(value: Any, parameters: dict[str, str]) -> Any:
    """The value of a `Ref` to a parameter or an `Fn::Sub` over parameters; plain values as is."""
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return parameters[value["Ref"]]
    if isinstance(value, dict) and set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
        return re.sub(r"\$\{([^}!]+)\}", lambda match: parameters[match.group(1)], value["Fn::Sub"])
    return value


_NO_VALUE = object()


def under(doc: dict[str, Any], parameters: dict[str, str] | None = None) -> dict[str, Any]:
    """The template as CloudFormation makes it for `parameters` (the rest at their defaults):
    each `Fn::If` replaced by its branch, `AWS::NoValue` dropped, a resource whose `Condition` is
    false left out; other functions (a `Ref` too) kept as written.
    Evaluates the conditions the template uses (Fn::Equals, Fn::Not, Fn::And, Fn::Or, Condition,
    Ref to a parameter); anything else fails, so a new form cannot pass unevaluated."""
    given = {name: str(spec.get("Default", "")) for name, spec in doc.get("Parameters", {}).items()}
    given |= parameters or {}
    conditions: dict[str, bool] = {}

    def value(node: Any) -> Any:
        if isinstance(node, dict) and set(node) == {"Ref"} and node["Ref"] in given:
            return given[node["Ref"]]
        return node

    def holds(node: Any) -> bool:
        (function, arguments), = node.items()
        if function == "Condition":
            return condition(arguments)
        if function == "Fn::Equals":
            return str(value(arguments[0])) == str(value(arguments[1]))
        if function == "Fn::Not":
            return not holds(arguments[0])
        if function == "Fn::And":
            return all(holds(argument) for argument in arguments)
        if function == "Fn::Or":
            return any(holds(argument) for argument in arguments)
        raise AssertionError(f"under() cannot evaluate {function}")

    def condition(name: str) -> bool:
        if name not in conditions:
            conditions[name] = holds(doc["Conditions"][name])
        return conditions[name]

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if set(node) == {"Fn::If"}:
                name, yes, no = node["Fn::If"]
                return walk(yes if condition(name) else no)
            if node == {"Ref": "AWS::NoValue"}:
                return _NO_VALUE
            walked = {key: walk(item) for key, item in node.items()}
            return {key: item for key, item in walked.items() if item is not _NO_VALUE}
        if isinstance(node, list):
            return [item for item in (walk(item) for item in node) if item is not _NO_VALUE]
        return node

    result: dict[str, Any] = walk(doc)
    result["Resources"] = {logical_id: resource for logical_id, resource in result.get("Resources", {}).items()
                           if "Condition" not in resource or condition(resource["Condition"])}
    return result


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


def queue_arn(name: str, *, region: str = ARN_REGION, account: str = ARN_ACCOUNT) -> str:
    return f"arn:aws:sqs:{region}:{account}:{name}"


def queue_problems(doc: dict[str, Any], stage: str, queue: Queue, *, worker_timeout: int,
                   batching_window: int = 0) -> list[str]:
    """What is wrong with the template's queue and dead-letter queue for a stage (nothing: []),
    given the timeout of the function that consumes it."""
    resources = under(doc).get("Resources", {})  # with the parameters' defaults (no KMS key of yours)
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


# ---------------------------------------------------------------------------------------------
# chalice package


def console_script(name: str) -> str:
    """A console script of this environment (never another one on PATH: a global cfn-lint can
    carry other runtime-deprecation dates)."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (requirements-dev.txt)")
    return found


# What pip prints when it cannot reach an index (it says so only when it may retry).
NETWORK_TROUBLE = re.compile(
    r"connection broken by|NewConnectionError|NameResolutionError|Failed to resolve|Max retries exceeded"
    r"|Temporary failure in name resolution|Network is unreachable|Connection refused|timed out|ProxyError"
    r"|Could not fetch URL",
    re.IGNORECASE,
)
# How pip and `chalice package` report a requirement they could not get.
UNSATISFIED = re.compile(r"Could not (?:satisfy the requirement:|find a version that satisfies the requirement) (\S+)")


def unreachable_requirement(output: str) -> str | None:
    """The requirement a build could not get for want of the package index, or None. pip and
    `chalice package` (`NoSuchPackageError`) say the same of a requirement that does not exist and
    of a package index they cannot reach: ask pip again which of the two it is."""
    missing = UNSATISFIED.search(output)
    if not missing:
        return None
    with tempfile.TemporaryDirectory() as scratch:
        probe = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--retries", "1",
             "--dest", scratch, missing.group(1)],
            capture_output=True, text=True, timeout=300, check=False,
        )
    if probe.returncode != 0 and NETWORK_TROUBLE.search(probe.stdout + probe.stderr):
        return missing.group(1)
    return None


def skip_if_offline(output: str) -> None:
    """Offline, the packaged template's tests skip, except under CI (the `CI` variable set), where
    they fail."""
    requirement = unreachable_requirement(output)
    if requirement is None:
        return
    reason = f"chalice package needs the package index to vendor {requirement}, and this machine cannot reach it"
    if os.environ.get("CI"):
        pytest.fail(f"CI must package the template: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module", name="packaged")
def packaged_fixture(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`chalice package --merge-template infra/resources.json --stage dev` into a temporary
    folder, for the Lambda runtime as infra/build.sh runs it (infra/lambda_runtime.py; dependency
    builds are cached in .chalice/deployments, which git ignores)."""
    out = tmp_path_factory.mktemp("package")
    environment = outside_environment()
    environment.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with one_at_a_time("packaging"):  # never beside infra/build.sh's vendor/ (tests/isolation.py)
        result = subprocess.run(
            [sys.executable, str(ROOT / "infra" / "lambda_runtime.py"), "package", "--merge-template",
             str(RESOURCES.relative_to(ROOT)), "--stage", "dev", str(out)],
            cwd=ROOT, env=environment, capture_output=True, text=True, timeout=900, check=False,
        )
    output = result.stdout + result.stderr
    if result.returncode != 0:
        skip_if_offline(output)
        pytest.fail(f"chalice package failed ({result.returncode}):\n{output[-4000:]}")
    # as infra/build.sh does: the API's routes invoke APIHandler's alias
    aliased = subprocess.run([sys.executable, str(ROOT / "infra" / "alias_api.py"), str(out)],
                             capture_output=True, text=True, timeout=60, check=False)
    assert aliased.returncode == 0, aliased.stderr
    return {"dir": out, "output": output, "template": json.loads((out / "sam.json").read_text())}


def normal_name(name: str) -> str:
    """A distribution's name as its metadata and its .dist-info folder compare."""
    return re.sub(r"[-_.]+", "_", name).lower()


# ---------------------------------------------------------------------------------------------
# Wheels and the Lambda runtime


def runtime_tags(runtime: str, architecture: str) -> set[Tag]:
    """Every wheel tag that runs on a Lambda runtime (python3.X) and architecture: CPython 3.X's
    own ABI, abi3 of 3.X and older, pure Python; manylinux up to the runtime's glibc on its machine
    (infra/lambda_runtime.py's GLIBC and MACHINE), the legacy manylinux names included."""
    from infra import lambda_runtime

    major, minor = (int(part) for part in lambda_runtime.version(runtime).split("."))
    glibc_major, glibc_minor = lambda_runtime.GLIBC[runtime]
    machine = lambda_runtime.MACHINE[architecture]
    platforms = [f"manylinux_{glibc_major}_{m}_{machine}" for m in range(5, glibc_minor + 1)]
    platforms += [f"manylinux{legacy}_{machine}" for legacy in ("1", "2010", "2014")]
    platforms += ["linux_" + machine]  # never a wheel's tag on PyPI, but what a local build would say
    return set(cpython_tags((major, minor), platforms=platforms)) | set(compatible_tags((major, minor), platforms=platforms))


def wheel_tags(names: list[str], read: Callable[[str], bytes]) -> dict[str, set[Tag]]:
    """Each installed distribution's wheel tags (its .dist-info/WHEEL `Tag:` lines), given the
    names of the files of an install (a zip's entries) and a way to read one."""
    tags: dict[str, set[Tag]] = {}
    for name in names:
        parts = name.split("/")
        if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "WHEEL":
            lines = read(name).decode().splitlines()
            tags[parts[0]] = {tag for line in lines if line.startswith("Tag:") for tag in parse_tag(line[4:].strip())}
    return tags
