"""What a deployed stage needs beyond its tables, key and queues (tests/test_infra_*.py): the
configuration it really has, what it costs to hold a listen, and what tells an operator that
something is wrong.

- The stage's parameters in SSM: the public URL, which the stack writes to
  /workset/<stage>/public-url (the API's own URL, or https://<PublicDomain>), and the console
  secret, a SecureString infra/deploy.sh makes. chalicelib/base/config.py reads each once, at its
  first use, where the environment does not set it. The role reads exactly those two, and may
  decrypt only the secret, only through SSM.
- No dependency cycle in the packaged template (cfn-lint does not look for one): a function that
  named its own API in its environment would make one, which is why the URL goes through SSM.
- A log group per function, named after it, kept `LogRetentionInDays`.
- subscriptions/listen: the hold ends 5 s before the Lambda timeout (and so before API Gateway's
  29 s); an idle listen's DynamoDB reads and GB-seconds.
"""

from __future__ import annotations

import copy
import graphlib
import json
import re
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from chalice.test import Client

from bench.dynamo_calls import DynamoCalls
from chalicelib.agents import workingset
from chalicelib.base import config as app_config
from chalicelib.store import outbox
from tests.conftest import Admin, Mcp
from tests.iam import (
    allows,
    as_list,
    record_aws_fixture,  # noqa: F401 - fixture `record_aws`: every AWS call a test makes
    statements_of,
)
from tests.infra import (
    API_GATEWAY_LIMIT_SECONDS,
    ARN_ACCOUNT,
    ARN_REGION,
    CHALICE_DIR,
    CHALICE_FUNCTIONS,
    KEY_ARN,
    ROOT,
    AwsCall,
    deployed_settings,
    evaluate,
    own_resources,
    packaged_fixture,  # noqa: F401 - fixture `packaged`: `chalice package`, once for this module
    policy,
    resolve,
    settings_under,
    stage_config,
    stages,
    template,
)
from tests.test_console import Console

LAMBDA_MARGIN_SECONDS = 5  # what the function keeps after a listen's hold to answer


def parameter_arn(name: str, *, region: str = ARN_REGION, account: str = ARN_ACCOUNT) -> str:
    return f"arn:aws:ssm:{region}:{account}:parameter{name}"


def parameter_names(stage: str) -> dict[str, str]:
    """The stage's parameters as the function names them."""
    parameters = deployed_settings(stage).parameters
    return {key: parameters.name(key) for key in (app_config.PUBLIC_URL, app_config.CONSOLE_SECRET)}


# ---------------------------------------------------------------------------------------------
# Reading the stage's parameters


@pytest.fixture
def deployed(monkeypatch: pytest.MonkeyPatch, settings_env: Callable[..., None]) -> Callable[..., None]:
    """A deployed stage (prod) over the test tables, with nothing of the console or the URL in
    its environment; the answer puts parameters in (moto's) SSM."""
    monkeypatch.delenv("WORKSET_PUBLIC_URL", raising=False)
    monkeypatch.delenv("WORKSET_CONSOLE_SECRET", raising=False)
    settings_env(WORKSET_STAGE="prod", WORKSET_TABLE_PREFIX="workset-test")

    def put(*, url: str | None = None, secret: str | None = None) -> None:
        ssm = boto3.client("ssm")
        if url is not None:
            ssm.put_parameter(Name="/workset/prod/public-url", Type="String", Value=url)
        if secret is not None:
            ssm.put_parameter(Name="/workset/prod/console-secret", Type="SecureString", Value=secret)

    return put


def ssm_reads(record: list[AwsCall]) -> list[tuple[str, bool]]:
    return [(params["Name"], params.get("WithDecryption", False))
            for service, operation, params, _ in record if service == "ssm" and operation == "GetParameter"]


API_URL = "https://abc123.execute-api.eu-west-1.amazonaws.com/api"


def test_a_deployed_stage_reads_its_url_and_secret_once_each_when_the_console_first_needs_them(
        client: Client, admin: Admin, mcp: Mcp, deployed: Callable[..., None], record_aws: list[Any]) -> None:
    # GIVEN a deployed stage whose URL and console secret are parameters
    deployed(url=API_URL, secret="s" * 40)
    # WHEN an agent lists its tools, THEN neither is read
    assert mcp.post("tools/list").status_code == 200
    assert ssm_reads(record_aws) == []
    # WHEN a person signs in and opens pages
    console = Console(client)
    assert console.sign_in(admin.token).status_code == 303
    assert console.get("/console/agents").status_code == 200
    # THEN each was read once, the secret decrypted, and the cookie is scoped to the API's stage
    assert sorted(ssm_reads(record_aws)) == [("/workset/prod/console-secret", True),
                                             ("/workset/prod/public-url", True)]
    form = client.http.get("/console/sign-in")
    assert "Path=/api/console" in form.headers["Set-Cookie"] and "Secure" in form.headers["Set-Cookie"]
    assert len(ssm_reads(record_aws)) == 2


def test_approval_urls_are_the_parameter_url(deployed: Callable[..., None]) -> None:
    from chalicelib.calls import runs

    deployed(url=API_URL + "/")
    assert runs.approval_url("r1") == f"{API_URL}/console/approvals/r1"


def test_without_its_secret_the_console_lets_nobody_in_and_asks_ssm_again_only_later(
        client: Client, admin: Admin, deployed: Callable[..., None], record_aws: list[Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a deployed stage whose console secret was never made
    deployed(url=API_URL)
    # WHEN the sign-in page is asked for twice
    first, second = client.http.get("/console/sign-in"), client.http.get("/console/sign-in")
    # THEN both say the console is not configured, and SSM was asked once
    assert first.status_code == second.status_code == 503
    assert ssm_reads(record_aws).count(("/workset/prod/console-secret", True)) == 1
    # WHEN the operator makes it and the retry interval has passed, THEN sign-in works (no deploy)
    deployed(secret="s" * 40)
    monkeypatch.setattr(app_config, "PARAMETER_RETRY_SECONDS", 0.0)
    assert Console(client).sign_in(admin.token).status_code == 303


def test_the_environment_wins_over_the_parameters(client: Client, deployed: Callable[..., None],
                                                  monkeypatch: pytest.MonkeyPatch, settings_env: Any,
                                                  record_aws: list[Any]) -> None:
    settings_env(WORKSET_CONSOLE_SECRET="e" * 40, WORKSET_PUBLIC_URL="https://workset.example.com")
    assert client.http.get("/console/sign-in").status_code == 200
    assert app_config.settings().public_url == "https://workset.example.com"
    assert ssm_reads(record_aws) == []


def test_a_deployed_stage_without_its_url_fails_loudly(deployed: Callable[..., None]) -> None:
    # a dead link in every approval is worse than a 500 the API alarm reports
    with pytest.raises(app_config.MissingParameter, match="/workset/prod/public-url"):
        assert not app_config.settings().public_url


def test_the_settings_never_show_the_console_secret(settings_env: Any) -> None:
    settings_env(WORKSET_CONSOLE_SECRET="very-secret-value")
    assert "very-secret-value" not in repr(app_config.settings())


@pytest.mark.parametrize("stage", stages())
def test_the_role_reads_exactly_the_stage_parameters_and_decrypts_only_the_secret_through_ssm(stage: str) -> None:
    document = policy(stage)
    names = parameter_names(stage)
    assert names == {"public-url": f"/workset/{stage}/public-url", "console-secret": f"/workset/{stage}/console-secret"}
    for name in names.values():
        assert allows(document, "ssm:GetParameter", parameter_arn(name))
        # the stack's own region and account only (the ARNs are built from AWS::Region and AWS::AccountId)
        assert not allows(document, "ssm:GetParameter", parameter_arn(name, region="eu-west-1"))
    others = [f"/workset/{stage}/other", f"/workset/{stage}", "/workset/console-secret",
              *(f"/workset/{other}/console-secret" for other in set(stages()) - {stage})]
    for name in others:
        assert not allows(document, "ssm:GetParameter", parameter_arn(name)), name
    for action in ("ssm:GetParameters", "ssm:GetParametersByPath", "ssm:PutParameter", "ssm:DeleteParameter",
                   "ssm:GetParameterHistory", "ssm:DescribeParameters"):
        for resource in ("*", parameter_arn(names["console-secret"])):
            assert not allows(document, action, resource), (action, resource)
    ssm_actions = {a for s in statements_of(document) for a in as_list(s["Action"]) if a.startswith("ssm:")}
    assert ssm_actions == {"ssm:GetParameter"}

    # SSM decrypts a SecureString with the caller's rights, naming the parameter in the context
    def through_ssm(name: str, region: str = ARN_REGION) -> dict[str, Any]:
        return {"kms:ViaService": f"ssm.{region}.amazonaws.com",
                "kms:EncryptionContext:PSARN": parameter_arn(name, region=region)}

    secret = names["console-secret"]
    assert allows(document, "kms:Decrypt", KEY_ARN, through_ssm(secret))
    assert not allows(document, "kms:Decrypt", KEY_ARN, through_ssm(secret, "eu-west-1"))
    assert not allows(document, "kms:Decrypt", KEY_ARN, through_ssm(names["public-url"]))
    assert not allows(document, "kms:Decrypt", KEY_ARN, through_ssm(f"/workset/{stage}/other"))
    assert not allows(document, "kms:Decrypt", KEY_ARN, {"kms:EncryptionContext:PSARN": parameter_arn(secret)})
    assert not allows(document, "kms:Decrypt", KEY_ARN, through_ssm(secret) | {
        "kms:ViaService": f"sqs.{ARN_REGION}.amazonaws.com"})
    for action in ("kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncryptFrom"):
        assert not allows(document, action, KEY_ARN, through_ssm(secret)), action


@pytest.mark.parametrize("stage", stages())
def test_the_reads_the_function_makes_are_the_ones_the_role_allows(
        stage: str, settings_env: Any, monkeypatch: pytest.MonkeyPatch, record_aws: list[Any]) -> None:
    monkeypatch.delenv("WORKSET_PUBLIC_URL", raising=False)
    monkeypatch.delenv("WORKSET_CONSOLE_SECRET", raising=False)
    settings_env(WORKSET_STAGE=stage)
    boto3.client("ssm").put_parameter(Name=f"/workset/{stage}/public-url", Type="String", Value=API_URL)
    boto3.client("ssm").put_parameter(Name=f"/workset/{stage}/console-secret", Type="SecureString", Value="x" * 40)
    assert app_config.settings().public_url == API_URL and app_config.settings().console_secret == "x" * 40
    reads = ssm_reads(record_aws)
    assert len(reads) == 2
    for name, _ in reads:
        assert allows(policy(stage), "ssm:GetParameter", parameter_arn(name)), name


@pytest.mark.parametrize("stage", stages())
def test_the_template_writes_the_url_where_the_function_reads_it(stage: str) -> None:
    resource = own_resources(template())["PublicUrlParameter"]
    properties = resource["Properties"]
    assert resource["Type"] == "AWS::SSM::Parameter" and properties["Type"] == "String"
    assert resolve(properties["Name"], {"Stage": stage}) == parameter_names(stage)["public-url"]
    condition, custom, own = properties["Value"]["Fn::If"]
    assert template()["Conditions"][condition] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "PublicDomain"}, ""]}]}
    assert custom == {"Fn::Sub": "https://${PublicDomain}"}
    stage_path = stage_config(stage).api_gateway_stage
    assert own == {"Fn::Sub": f"https://${{RestAPI}}.execute-api.${{AWS::Region}}.${{AWS::URLSuffix}}/{stage_path}"}


def test_the_console_secret_deploy_sh_makes_is_the_one_the_function_reads() -> None:
    script = (ROOT / "infra" / "deploy.sh").read_text()
    assert "secret_name=/workset/$stage/console-secret" in script
    assert "--type SecureString" in script
    assert all(parameter_names(stage)["console-secret"] == f"/workset/{stage}/console-secret" for stage in stages())


@pytest.mark.parametrize(("domain", "allowed"), [
    ("", True), ("workset.example.com", True), ("a.b-c.example.co", True),
    ("https://workset.example.com", False), ("workset.example.com/api", False), ("localhost", False),
    ("Workset.Example.com", False), ("-x.example.com", False), ("workset.example.com.", False),
])
def test_the_public_domain_parameter_takes_a_host_name_only(domain: str, allowed: bool) -> None:
    pattern = template()["Parameters"]["PublicDomain"]["AllowedPattern"]
    assert (re.fullmatch(pattern, domain) is not None) is allowed


def test_no_placeholder_host_remains() -> None:
    for path in (CHALICE_DIR / "config.json", ROOT / "infra" / "resources.json", ROOT / "infra" / "deploy.sh"):
        assert ".invalid" not in path.read_text(), path
    for stage in stages():
        assert "WORKSET_PUBLIC_URL" not in stage_config(stage).environment_variables


def test_the_packaged_template_takes_the_fragment_parameters_and_outputs(packaged: dict[str, Any]) -> None:
    doc = packaged["template"]
    assert {name: doc["Parameters"][name] for name in template()["Parameters"]} == template()["Parameters"]
    assert doc["Conditions"] == template()["Conditions"]
    for name, output in template()["Outputs"].items():
        assert doc["Outputs"][name] == output, name
    # the URL the stack writes is Chalice's own EndpointURL (less its trailing slash)
    own = doc["Resources"]["PublicUrlParameter"]["Properties"]["Value"]["Fn::If"][2]
    assert own["Fn::Sub"] + "/" == doc["Outputs"]["EndpointURL"]["Value"]["Fn::Sub"]


# ---------------------------------------------------------------------------------------------
# Dependencies


def references(value: Any) -> set[str]:
    """The names a template value refers to: `Ref`, `Fn::GetAtt`, and `${...}` of `Fn::Sub`."""
    found: set[str] = set()
    if isinstance(value, list):
        for item in value:
            found |= references(item)
    elif isinstance(value, dict):
        for key, inner in value.items():
            if key == "Ref" and isinstance(inner, str):
                found.add(inner)
            elif key == "Fn::GetAtt":
                found.add(inner[0] if isinstance(inner, list) else str(inner).split(".")[0])
            elif key == "Fn::Sub":
                text, variables = (inner, {}) if isinstance(inner, str) else (inner[0], inner[1])
                found |= {name.split(".")[0] for name in re.findall(r"\$\{([^}!]+)\}", text) if name not in variables}
                found |= references(variables)
            else:
                found |= references(inner)
    return found


def dependency_cycle(doc: dict[str, Any]) -> list[str] | None:
    """A cycle among the template's resources (CloudFormation refuses the template), or None."""
    resources = doc["Resources"]
    # SAM makes a function's alias (AutoPublishAlias: live -> <Function>Aliaslive) at deploy time:
    # a reference to it depends on the function
    aliases = {f"{logical_id}Alias{resource['Properties']['AutoPublishAlias']}": logical_id
               for logical_id, resource in resources.items()
               if isinstance(resource.get("Properties"), dict) and "AutoPublishAlias" in resource["Properties"]}
    graph = {logical_id: {aliases.get(ref, ref) for ref in references(resource) | set(as_list(resource.get("DependsOn", [])))}
             & set(resources) for logical_id, resource in resources.items()}
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        return list(error.args[1])
    return None


def test_the_packaged_template_has_no_dependency_cycle(packaged: dict[str, Any]) -> None:
    assert dependency_cycle(packaged["template"]) is None


def test_a_function_naming_its_own_api_would_make_a_cycle(packaged: dict[str, Any]) -> None:
    """Why the public URL is a parameter the function reads, not an environment variable."""
    broken = copy.deepcopy(packaged["template"])
    broken["Resources"]["APIHandler"]["Properties"]["Environment"]["Variables"]["WORKSET_PUBLIC_URL"] = {
        "Fn::Sub": "https://${RestAPI}.execute-api.${AWS::Region}.${AWS::URLSuffix}/api"}
    assert set(dependency_cycle(broken) or []) >= {"APIHandler", "RestAPI"}


# ---------------------------------------------------------------------------------------------
# Log groups


def log_group_problems(doc: dict[str, Any], functions: list[str]) -> list[str]:
    """What is wrong with the functions' log groups (nothing: [])."""
    groups = {logical_id: resource for logical_id, resource in doc["Resources"].items()
              if resource.get("Type") == "AWS::Logs::LogGroup" and logical_id != "ApiAccessLogGroup"}  # the API's
    # access log (tests/test_infra_edge.py)
    named = {json.dumps(resource["Properties"].get("LogGroupName"), sort_keys=True): logical_id
             for logical_id, resource in groups.items()}
    problems = []
    for function in functions:
        logical_id = named.pop(json.dumps({"Fn::Sub": f"/aws/lambda/${{{function}}}"}), None)
        if logical_id is None:
            problems.append(f"no log group /aws/lambda/<{function}'s name>")
            continue
        if groups[logical_id]["Properties"].get("RetentionInDays") != {"Ref": "LogRetentionInDays"}:
            problems.append(f"{logical_id} does not keep events LogRetentionInDays")
    problems += [f"{logical_id} is no function's log group" for logical_id in named.values()]
    return problems


def test_each_function_has_its_log_group_kept_as_long_as_the_parameter_says() -> None:
    assert log_group_problems(template(), CHALICE_FUNCTIONS) == []
    retention = template()["Parameters"]["LogRetentionInDays"]
    assert retention["Type"] == "Number" and retention["Default"] == 30
    assert 30 in retention["AllowedValues"] and all(isinstance(days, int) for days in retention["AllowedValues"])


def test_the_log_groups_are_those_of_the_packaged_functions(packaged: dict[str, Any]) -> None:
    functions = [logical_id for logical_id, resource in packaged["template"]["Resources"].items()
                 if resource["Type"] == "AWS::Serverless::Function"]
    assert sorted(functions) == sorted(CHALICE_FUNCTIONS)
    assert log_group_problems(packaged["template"], functions) == []


@pytest.mark.parametrize("break_it", [
    lambda doc: doc["Resources"].pop("SweepWorkerLogGroup"),
    lambda doc: doc["Resources"]["SweepLogGroup"]["Properties"].update(LogGroupName="/aws/lambda/workset-dev-Sweep"),
    lambda doc: doc["Resources"]["APIHandlerLogGroup"]["Properties"].update(RetentionInDays=30),
    lambda doc: doc["Resources"]["APIHandlerLogGroup"]["Properties"].pop("RetentionInDays"),
])
def test_a_broken_log_group_fails_the_check(break_it: Callable[[dict[str, Any]], Any]) -> None:
    broken = template()
    break_it(broken)
    assert log_group_problems(broken, CHALICE_FUNCTIONS) != []


# (The alarms and the dashboard: tests/test_infra_alarms.py.)


# ---------------------------------------------------------------------------------------------
# subscriptions/listen on Lambda


def test_the_listen_hold_ends_before_lambda_and_api_gateway_give_up(packaged: dict[str, Any]) -> None:
    """Held to the timeout, Lambda ends an idle listen and API Gateway answers 502; the margin is
    the function's time to answer after the hold (one read, the response)."""
    function = packaged["template"]["Resources"]["APIHandler"]
    variables = evaluate(function["Properties"]["Environment"]["Variables"], {"Stage": "dev", "HistoryRetentionDays": "400", "MaxListensPerAccount": "10"})
    hold = settings_under(variables).listen_hold_seconds
    timeout = function["Properties"]["Timeout"]
    assert hold <= timeout - LAMBDA_MARGIN_SECONDS
    assert hold <= API_GATEWAY_LIMIT_SECONDS - LAMBDA_MARGIN_SECONDS
    assert timeout < API_GATEWAY_LIMIT_SECONDS


class Clock:
    """The listen's clock, run forward by its sleeps instead of waiting."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(workingset, "time", fake)
    return fake


@pytest.fixture
def polls(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> list[float]:
    """When the listen read the agent's change counter (the clock's time of each read)."""
    made: list[float] = []
    real = outbox.change_seq

    def counted(agent_id: str) -> int:
        made.append(clock.now)
        return real(agent_id)

    monkeypatch.setattr(outbox, "change_seq", counted)
    return made


def _listen(mcp: Mcp) -> Any:
    mcp.modern = True
    return mcp.post("subscriptions/listen", {"notifications": {"toolsListChanged": True}})


def test_an_idle_listen_costs_six_reads_two_slot_writes_and_ten_gb_seconds(mcp: Mcp, settings_env: Any, polls: list[float]) -> None:
    # GIVEN the deployed hold and memory
    hold = deployed_settings("prod").listen_hold_seconds
    memory_gb = stage_config("prod").lambda_memory_size / 1024
    settings_env(WORKSET_LISTEN_HOLD_SECONDS=str(hold))
    counter = DynamoCalls().install()
    # WHEN an agent listens and nothing changes
    with counter.measure() as made:
        answer = _listen(mcp)
    # THEN the hold ends cleanly after 6 reads of the change counter (20 at one a second)
    assert [n["method"] for n in answer.notifications] == ["notifications/subscriptions/acknowledged"]
    assert polls == [1, 3, 7, 12, 17, 20] and hold == 20
    assert made.count("GetItem") == len(polls)
    # and the one Query that authenticates the agent, and the account's listen slot taken and given
    # back (two conditional UpdateItems: chalicelib/store/listens.py)
    assert made.count("UpdateItem") == 2
    assert len(made) == len(polls) + 3
    # and the function is held for memory x hold GB-seconds: 0.5 GB x 20 s (was 1 GB x 25 s)
    assert memory_gb * hold == 10


@pytest.mark.parametrize(("changed_at", "told_at"), [(0.0, 1), (0.5, 1), (2.5, 3), (8, 12), (16.9, 17), (19.5, 20)])
def test_a_change_during_the_hold_is_told_at_most_five_seconds_late(
        mcp: Mcp, settings_env: Any, clock: Clock, polls: list[float], monkeypatch: pytest.MonkeyPatch,
        changed_at: float, told_at: float) -> None:
    """The schedule alone (tests/test_notifications.py makes real changes during a real hold)."""
    settings_env(WORKSET_LISTEN_HOLD_SECONDS="20")
    counted = outbox.change_seq  # the `polls` fixture's
    # the agent's counter moves on when the clock passes `changed_at`
    monkeypatch.setattr(outbox, "change_seq", lambda agent_id: counted(agent_id) + (clock.now >= changed_at))
    answer = _listen(mcp)
    assert [n["method"] for n in answer.notifications][-1] == "notifications/tools/list_changed"
    assert polls[-1] == told_at and told_at - changed_at <= workingset.LISTEN_POLL_MAX_SECONDS
