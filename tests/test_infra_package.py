"""`chalice package --merge-template infra/resources.json` run for real, and `cfn-lint` over what
it produced (and over the fragment alone, for fast feedback): the packaged template keeps
Chalice's resources and adds ours, vendors every dependency, and its SQS event sources read the
queues the fragment declares. Offline, the packaged checks skip, except under CI, where they fail.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.iam import allows, as_list
from tests.infra import (
    ARN_ACCOUNT,
    ARN_REGION,
    CHALICE_FUNCTIONS,
    QUEUES,
    REPORT_BATCH_ITEM_FAILURES,
    ROOT,
    console_script,
    declared_tables,
    evaluate,
    normal_name,
    overlays,
    own_resources,
    packaged_fixture,  # noqa: F401 - fixture `packaged`
    queue_arn,
    queue_problems,
    resolve,
    role_policy,
    skip_if_offline,
    stage_config,
    template,
)

LAMBDA_UNZIPPED_LIMIT_BYTES = 250 * 1024 * 1024


def cfn_lint(path: Path) -> list[dict[str, Any]]:
    """cfn-lint's errors and warnings (informational findings are left out)."""
    result = subprocess.run(
        [console_script("cfn-lint"), "--format", "json", "--", str(path)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode in (0, 2, 4, 6), result.stderr  # bit 2 errors, bit 4 warnings
    return [
        {"rule": m["Rule"]["Id"], "level": m["Level"], "message": m["Message"],
         "where": "/".join(str(p) for p in m["Location"].get("Path") or [])}
        for m in json.loads(result.stdout or "[]")
        if m["Level"] in ("Error", "Warning")
    ]


# Plain stand-ins for the resources of Chalice's that the fragment names (log groups and alarms
# name the functions, the public URL and the web ACL's association the API), so that the fragment
# lints alone. The API is SAM's, as Chalice's is: the association names its stage as SAM lets a
# template name the stage it makes (`RestAPI.Stage`).
CHALICE_STANDINS: dict[str, dict[str, Any]] = {
    **{function: {"Type": "AWS::Serverless::Function", "Properties": {
        "Runtime": "python3.12", "Handler": "app.app", "InlineCode": "app = None"}}
       for function in CHALICE_FUNCTIONS},
    "RestAPI": {"Type": "AWS::Serverless::Api", "Properties": {
        "StageName": "api", "EndpointConfiguration": "EDGE",
        "DefinitionBody": {"swagger": "2.0", "info": {"title": "standin"}, "paths": {}}}},
}


def _merge(base: Any, overlay: Any) -> Any:
    """`overlay` put onto `base` as `chalice package --merge-template` does: dicts key by key."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        return {**base, **{key: _merge(base.get(key), value) for key, value in overlay.items()}}
    return overlay


def test_the_fragment_alone_passes_cfn_lint(tmp_path: Path) -> None:
    """Fast feedback that needs no packaging (the full template is linted further down). The
    overlays on Chalice's functions are left out: alone, they are not resources; the resources
    of Chalice's that it names are stood in for, the API with the fragment's overlay (its stage
    throttle) merged on."""
    own = template()
    # the overlays merged on (an event source's overlay alone is no event: left out)
    standins = {logical_id: _merge(standin, {**overlays(own).get(logical_id, {}), "DependsOn": []})
                for logical_id, standin in CHALICE_STANDINS.items()}
    for standin in standins.values():
        standin["Properties"].pop("Events", None)
        standin.pop("DependsOn")
    own["Transform"] = "AWS::Serverless-2016-10-31"
    own["Resources"] = own_resources(own) | standins
    path = tmp_path / "resources.json"
    path.write_text(json.dumps(own))
    findings = cfn_lint(path)
    assert findings == [], findings


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
        skip_if_offline("Could not satisfy the requirement: numpy==2.2.6")
    assert ended.type is outcome


def test_packaged_template_passes_cfn_lint(packaged: dict[str, Any]) -> None:
    """No errors and no warnings. Warnings count: they are the date-based runtime deprecations
    (W2531) and template mistakes that CloudFormation would only report at deploy time."""
    findings = cfn_lint(packaged["dir"] / "sam.json")
    assert findings == [], json.dumps(findings, indent=2)


def runtime_distributions() -> dict[str, str | None]:
    """Every distribution that requirements.txt brings in, following the installed packages'
    metadata: normalized name -> the pinned version (direct requirements) or None."""
    from importlib import metadata

    from packaging.requirements import Requirement

    lines = (ROOT / "requirements.txt").read_text().splitlines()
    direct = [Requirement(line.split("#")[0]) for line in lines if line.split("#")[0].strip()]
    wanted: dict[str, str | None] = {
        normal_name(r.name): next((s.version for s in r.specifier if s.operator == "=="), None) for r in direct
    }
    pending = list(direct)
    seen: set[str] = set()
    while pending:
        requirement = pending.pop()
        if normal_name(requirement.name) in seen:
            continue
        seen.add(normal_name(requirement.name))
        for text in metadata.distribution(requirement.name).requires or []:
            child = Requirement(text)
            extras = requirement.extras or {""}
            if child.marker is None or any(child.marker.evaluate({"extra": extra}) for extra in extras):
                wanted.setdefault(normal_name(child.name), None)
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
            vendored[normal_name(name)] = version
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
        # the stage's names come from the template's Stage (any stage name), as the config's do for dev
        variables = evaluate(function["Environment"]["Variables"], {"Stage": "dev", "HistoryRetentionDays": "400", "MaxListensPerAccount": "10"})
        expected = stage_config("dev").environment_variables | {"WORKSET_HISTORY_RETENTION_DAYS": "400"}
        if logical_id == "APIHandler":  # the listen path's bound (tests/test_listen_limit.py)
            expected["WORKSET_MAX_LISTENS_PER_ACCOUNT"] = "10"
        assert variables == expected, logical_id
        # Every function has its own role from the fragment (so SAM adds none of its own, for an
        # SQS event source either): its policy is all the function and its events get.
        assert function["Role"] == {"Fn::GetAtt": [f"{logical_id}Role", "Arn"]}, logical_id
        role = resources[f"{logical_id}Role"]["Properties"]
        assert role == template()["Resources"][f"{logical_id}Role"]["Properties"], logical_id
        assert "ManagedPolicyArns" not in role and "Policies" not in function, logical_id
        # CloudFormation names the function <stack>-<logical id>-<random>; the stack is workset-dev
        assert "FunctionName" not in function, logical_id
        log_stream = f"{groups}/workset-dev-{logical_id}-1A2B3C4D5E6F:log-stream:x"
        assert allows(role_policy("dev", logical_id, packaged_template), "logs:PutLogEvents", log_stream), logical_id
    assert not [i for i, r in resources.items() if r["Type"] == "AWS::IAM::Role" and i not in
                {f"{function}Role" for function in functions} | {"BackupRole"}], "a role no function uses (Chalice's?)"
    assert declared_tables(packaged_template, "dev") == declared_tables(template(), "dev")
    for logical_id, resource in own_resources(template()).items():  # tables, key, alias, queues
        assert resources[logical_id] == resource, logical_id
    for logical_id, overlay in overlays(template()).items():  # merged onto Chalice's resources
        assert logical_id in functions or logical_id in ("RestAPI", "APIHandlerInvokePermission"), logical_id
        assert _merged_into(overlay, resources[logical_id]), (logical_id, overlay)
    # every function publishes versions behind the alias `live`, and the API invokes APIHandler's
    for function in functions.values():
        assert function["AutoPublishAlias"] == "live"
    uris = [method["x-amazon-apigateway-integration"]["uri"]["Fn::Sub"]
            for methods in resources["RestAPI"]["Properties"]["DefinitionBody"]["paths"].values()
            for method in methods.values() if isinstance(method, dict) and "x-amazon-apigateway-integration" in method]
    assert uris and all("${APIHandlerAliaslive}/invocations" in uri for uri in uris)
    assert resources["APIHandlerInvokePermission"]["Properties"]["FunctionName"] == {"Ref": "APIHandlerAliaslive"}
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
            if queue.logical_id not in as_list(resources[function_id].get("DependsOn", [])):
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
