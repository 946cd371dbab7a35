"""Every step that writes is correct when DynamoDB applies its transaction and the answer is lost
(issue 11, item 2): each transaction carries one idempotency token for all of its attempts, so
the attempt after a lost answer is answered from the first one instead of meeting the condition
that first attempt set.

Each step is run with its transaction's answer lost twice over: below botocore's retries (one
lost answer: botocore's next attempt is the one that is answered) and above them (botocore's
four attempts all lost: the app's own retry in `store.base` sends it again under the same
token). Below them, botocore's own token would do (it fills one in per call, kept across its
retries); above them, only the app's token, kept across its own attempts, makes the retry
safe. Each test checks what the caller sees and the state afterwards, and that the fault did
hit (`faults.hits`), so a predicate that matches nothing cannot make a test pass.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from chalicelib import accounts
from chalicelib.clock import iso, utcnow
from chalicelib.store import agents as agent_store
from chalicelib.store import base
from chalicelib.store import tools as tool_store
from chalicelib.store.models import AGENT_SK, AgentSettingsItem
from tests.conftest import Admin, Mcp, Vendor, tool_spec
from tests.faults import ALWAYS, Fault, Faults, sets_status, touches

BOTOCORE_ATTEMPTS = 4  # pynamodb's client: standard retry mode, 1 + 3 retries per call
LOST = pytest.mark.parametrize("times", [pytest.param(1, id="below-botocore-retries"),
                                         pytest.param(BOTOCORE_ATTEMPTS, id="above-botocore-retries")])
READ = {"vendor": "unleashed", "name": "list-sales-orders"}
WRITE = {"vendor": "unleashed", "name": "create-order"}
DAY = timedelta(days=1)


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The app's retry budget keeps its shape, without its wait."""
    monkeypatch.setattr(base, "BACKOFF_BASE_SECONDS", 0.001)


def puts_into(table_suffix: str) -> Any:
    """`when`: a transaction that puts a new item into the table ending with `table_suffix` (a
    run's start puts the run; its end only updates it)."""
    def check(body: dict[str, Any]) -> bool:
        return any("Put" in item and item["Put"]["TableName"].endswith(table_suffix)
                   for item in body.get("TransactItems", []))
    return check


def _agent_id(admin: Admin) -> str:
    return admin.call("GET", "/v1/agents").json_body["items"][0]["id"]


def _books(admin: Admin) -> tuple[int, int, int]:
    """(size the agent is counted at, promotions stored, promoted-minus-demoted History events)."""
    agent_id = _agent_id(admin)
    size = admin.call("GET", f"/v1/agents/{agent_id}").json_body["size"]
    promotions = len(admin.call("GET", f"/v1/agents/{agent_id}/working-set").json_body["items"])
    events = admin.call("GET", f"/v1/agents/{agent_id}/history").json_body["items"]
    net = sum(+1 if event["action"] == "promoted" else -1 for event in events)
    return size, promotions, net


def _history(admin: Admin) -> list[tuple[str, str, str]]:
    events = admin.call("GET", f"/v1/agents/{_agent_id(admin)}/history").json_body["items"]
    return [(event["name"], event["action"], event["cause"]) for event in reversed(events)]


def _runs(admin: Admin) -> list[str]:
    return [run["status"] for run in admin.call("GET", f"/v1/agents/{_agent_id(admin)}/runs").json_body["items"]]


def _state(admin: Admin) -> Any:
    state = agent_store.load_state(_agent_id(admin))
    assert state is not None
    return state


@LOST
def test_promote_answers_its_size_once_when_the_answer_is_lost(admin: Admin, mcp: Mcp, faults: Faults,
                                                               times: int) -> None:
    # GIVEN a tool in the toolbox, and the promotion's answer lost `times` times
    admin.publish()
    faults.lose_answer("TransactWriteItems", times=times, when=touches("-history"))
    # WHEN the agent promotes it
    answer = mcp.call("promote", READ)
    # THEN it is told size 1, and the tool is promoted, counted and recorded exactly once
    assert faults.hits == times
    assert answer["isError"] is False and answer["structuredContent"]["size"] == 1
    assert _books(admin) == (1, 1, 1)
    assert "unleashed__list-sales-orders" in mcp.tool_names()


@LOST
def test_demote_answers_its_size_once_when_the_answer_is_lost(admin: Admin, mcp: Mcp, faults: Faults,
                                                              times: int) -> None:
    # GIVEN two promoted tools, and the demotion's answer lost `times` times
    admin.publish()
    admin.publish(name="list-customers")
    mcp.call("promote", READ)
    mcp.call("promote", {"vendor": "unleashed", "name": "list-customers"})
    faults.lose_answer("TransactWriteItems", times=times, when=touches("-history"))
    # WHEN the agent demotes one
    answer = mcp.call("demote", READ)
    # THEN it is told size 1, and the tool is out, uncounted and its demotion recorded once
    assert faults.hits == times
    assert answer["isError"] is False and answer["structuredContent"]["size"] == 1
    assert _books(admin) == (1, 1, 1)
    assert [action for name, action, _ in _history(admin) if name == "list-sales-orders"] == ["promoted", "demoted"]
    assert "unleashed__list-sales-orders" not in mcp.tool_names()


@pytest.mark.parametrize("step", ["start", "end"])
@LOST
def test_a_call_runs_once_and_ends_when_a_run_write_loses_its_answer(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                                    faults: Faults, step: str, times: int) -> None:
    # GIVEN a promoted read tool, and the answer of its run's start (or end) lost `times` times
    admin.publish(request={"method": "GET", "url": f"{vendor.url}/orders"})
    mcp.call("promote", READ)
    when = puts_into("-runs") if step == "start" else sets_status("succeeded")
    faults.lose_answer("TransactWriteItems", times=times, when=when)
    # WHEN the agent calls it
    result = mcp.call("unleashed__list-sales-orders", {"customer": "acme"})
    # THEN it gets the vendor's answer from one request, and one run that ended
    assert faults.hits == times
    assert result["isError"] is False and result["structuredContent"] == {"orders": [{"id": 1}]}
    assert len(vendor.received) == 1
    assert _runs(admin) == ["succeeded"]
    # AND nothing holds the agent in flight: the lease is gone, its revision moved on once
    state = _state(admin)
    assert state.leases == {} and state.lease_rev == 1
    assert state.promotion(*READ.values()).last_used_at is not None


@LOST
def test_an_approval_runs_its_run_once_when_its_answer_is_lost(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                               faults: Faults, times: int) -> None:
    # GIVEN a write call waiting on a person, and the approval's answer lost `times` times
    admin.publish(name="create-order", description="Create a sales order.", annotations={"destructiveHint": False},
                  input_schema={"type": "object", "properties": {"customer": {"type": "string"}}},
                  request={"method": "POST", "url": f"{vendor.url}/orders"})
    run_id = mcp.call("run_tool", {**WRITE, "input": {"customer": "acme"}})["structuredContent"]["run_id"]
    faults.lose_answer("TransactWriteItems", times=times, when=sets_status("allow"))  # the decision it records
    # WHEN a person approves it
    approved = admin.call("POST", f"/v1/approvals/{run_id}/approve")
    # THEN the approval succeeds (not 409), the vendor is called once and the run ends
    assert faults.hits == times
    assert approved.status_code == 200, approved.body
    assert approved.json_body["status"] == "succeeded"
    assert len(vendor.received) == 1
    assert _runs(admin) == ["succeeded"]
    assert admin.call("GET", "/v1/approvals").json_body["items"] == []
    # AND no lease is left, and the approval stands once for the tool
    assert _state(admin).leases == {}
    decisions = admin.call("GET", f"/v1/agents/{_agent_id(admin)}/approvals").json_body["items"]
    assert [(d["name"], d["decision"]) for d in decisions] == [("create-order", "allow")]


@LOST
def test_a_publish_stores_one_version_when_its_answer_is_lost(admin: Admin, faults: Faults, times: int) -> None:
    # GIVEN the publish's answer lost `times` times
    faults.lose_answer("TransactWriteItems", times=times, when=touches("-tools"))
    # WHEN an admin publishes a new tool
    response = admin.call("POST", "/v1/tools", tool_spec())
    # THEN it is answered as version 1, stored once, and the toolbox moved on once
    assert faults.hits == times
    assert response.status_code == 201, response.body
    assert response.json_body["version"] == 1
    versions = admin.call("GET", "/v1/tools/unleashed/list-sales-orders").json_body["versions"]
    assert [v["version"] for v in versions] == [1]
    assert tool_store.toolbox_revision(accounts.authenticate_admin(admin.token)) == 1
    # AND the next publish is version 2
    assert admin.publish(description="Version two.")["version"] == 2


@pytest.fixture
def keyless_vendor(admin: Admin, vendor: Vendor) -> Vendor:
    """A person allowed agents to author keyless tools for the local vendor."""
    response = admin.call("PUT", "/v1/account/allowed-hosts", {"allowed_hosts": [vendor.url.removeprefix("http://")]})
    assert response.status_code == 200, response.body
    return vendor


def _authored(vendor: Vendor, **overrides: Any) -> dict[str, Any]:
    return tool_spec(**{
        "vendor": "weather", "name": "forecast", "description": "Get the weather forecast for a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "request": {"method": "GET", "url": f"{vendor.url}/forecast"}, **overrides})


@pytest.mark.parametrize("table", ["-tools", "-history"], ids=["its-publish", "its-promotion"])
@LOST
def test_acquire_publishes_and_promotes_once_when_an_answer_is_lost(admin: Admin, mcp: Mcp, keyless_vendor: Vendor,
                                                                    faults: Faults, table: str, times: int) -> None:
    # GIVEN the answer of acquire's publish (or of its promotion) lost `times` times
    faults.lose_answer("TransactWriteItems", times=times, when=touches(table))
    # WHEN the agent authors a tool
    answer = mcp.call("acquire", _authored(keyless_vendor))
    # THEN it is told version 1 and size 1, and there is one version, promoted and recorded once
    assert faults.hits == times
    assert answer["isError"] is False, answer
    assert answer["structuredContent"] == {"vendor": "weather", "name": "forecast", "version": 1, "size": 1}
    versions = admin.call("GET", "/v1/tools/weather/forecast").json_body["versions"]
    assert [v["version"] for v in versions] == [1]
    assert _books(admin) == (1, 1, 1)
    assert _history(admin) == [("forecast", "promoted", "published")]


def adds_to(attribute: str) -> Any:
    """`when`: an UpdateItem that ADDs to `attribute` (by its name placeholder's value)."""
    def check(body: dict[str, Any]) -> bool:
        return body.get("UpdateExpression", "").startswith("ADD") \
            and attribute in body.get("ExpressionAttributeNames", {}).values()
    return check


@pytest.mark.xfail(strict=True, reason=(
    "issue 11 item 2, acquire: the daily quota is counted by a plain conditional UpdateItem "
    "(store.agents.count_acquire: ADD acquire_count IF acquire_count < limit), which has no idempotency "
    "token. When its answer is lost, botocore sends it again: the count goes up twice, or, on the "
    "agent's last publish of the day, the retry fails its own condition, count_acquire answers False "
    "and the agent is refused with quota_exceeded although its quota was taken and nothing was published."))
def test_acquire_counts_the_quota_once_when_the_counts_answer_is_lost(admin: Admin, mcp: Mcp,
                                                                       keyless_vendor: Vendor, faults: Faults,
                                                                       settings_env: Any) -> None:
    # GIVEN an agent allowed two publishes a day that has made one, and the next count's answer lost once
    settings_env(WORKSET_ACQUIRE_PER_DAY="2")
    assert mcp.call("acquire", _authored(keyless_vendor))["isError"] is False
    faults.lose_answer("UpdateItem", times=1, when=adds_to("acquire_count"))
    # WHEN it publishes its second version of the day
    answer = mcp.call("acquire", _authored(keyless_vendor, description="Forecast, version two."))
    # THEN it is published as version 2, and the quota counts two publishes
    assert faults.hits == 1
    assert answer["isError"] is False, answer["structuredContent"]
    assert answer["structuredContent"]["version"] == 2
    counted = AgentSettingsItem.get(_agent_id(admin), AGENT_SK)
    assert int(counted.acquire_count) == 2


@LOST
def test_the_sweep_reports_a_demotion_whose_answer_was_lost_as_demoted(admin: Admin, mcp: Mcp, faults: Faults,
                                                                      times: int) -> None:
    # GIVEN a tool promoted and left idle past the window, and the sweep's demotion's answer lost `times` times
    admin.publish()
    mcp.call("promote", READ)
    faults.lose_answer("TransactWriteItems", times=times, when=touches("-history"))
    # WHEN the sweep runs after the window
    response = admin.call("POST", "/v1/sweep", {"now": iso(utcnow() + 22 * DAY)})
    # THEN it reports the tool demoted (not held), and it is out, uncounted and recorded once
    assert faults.hits == times
    assert response.status_code == 200, response.body
    report = response.json_body
    assert [(d["name"], d["cause"]) for d in report["demoted"]] == [("list-sales-orders", "idle")]
    assert report["held"] == []
    assert _books(admin) == (0, 0, 0)
    assert _history(admin) == [("list-sales-orders", "promoted", "agent_asked"),
                               ("list-sales-orders", "demoted", "idle")]
    # AND the next sweep finds nothing due
    again = admin.call("POST", "/v1/sweep", {"now": iso(utcnow() + 23 * DAY)}).json_body
    assert (again["demoted"], again["held"]) == ([], [])


def _watch(faults: Faults) -> list[dict[str, Any]]:
    """Every TransactWriteItems body from now on, as the service receives it (armed first, never
    matching, so it sees the calls the faults armed after it hit too)."""
    bodies: list[dict[str, Any]] = []

    def record(body: dict[str, Any]) -> bool:
        bodies.append(body)
        return False

    faults.armed.insert(0, Fault("dynamodb", "TransactWriteItems", "fail", ALWAYS, when=record))
    return bodies


def test_above_botocores_retries_the_app_sends_the_transaction_again_under_its_token(admin: Admin,
                                                                                    faults: Faults) -> None:
    """The premise of `LOST`: BOTOCORE_ATTEMPTS lost answers are one call botocore gives up on,
    so the app's retry sends the transaction once more, under the same token."""
    # GIVEN the publish's answer lost BOTOCORE_ATTEMPTS times, and every attempt watched
    bodies = _watch(faults)
    faults.lose_answer("TransactWriteItems", times=BOTOCORE_ATTEMPTS, when=touches("-tools"))
    # WHEN an admin publishes
    assert admin.call("POST", "/v1/tools", tool_spec()).status_code == 201
    # THEN one attempt more than botocore makes was sent, all of them the same request under one token
    assert len(bodies) == BOTOCORE_ATTEMPTS + 1
    assert all(body == bodies[0] for body in bodies) and bodies[0]["ClientRequestToken"]


def test_each_transaction_has_a_token_of_its_own(admin: Admin, faults: Faults) -> None:
    # GIVEN every transaction watched
    bodies = _watch(faults)
    # WHEN two tools are published
    admin.publish()
    admin.publish(name="list-customers")
    # THEN each carried its own token
    tokens = [body.get("ClientRequestToken") for body in bodies]
    assert len(tokens) == 2 and all(tokens) and tokens[0] != tokens[1]
