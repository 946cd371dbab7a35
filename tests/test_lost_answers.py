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

from chalicelib.base.clock import utcnow
from chalicelib.identity import accounts
from chalicelib.store import tools as tool_store
from chalicelib.store.models import AGENT_SK, AgentSettingsItem
from tests.books import (
    ANSWER,
    FIRST_CLASS,
    READ,
    agent_state,
    books,
    call_write,
    fast_backoff,  # noqa: F401 - fixture
    history,
    publish_read,
    run_statuses,
    sweep_at,
)
from tests.conftest import Admin, Mcp, Vendor, tool_spec
from tests.faults import RUN_START, RUN_SUCCEEDS, Faults, counts_quota, sets_status, touches

BOTOCORE_ATTEMPTS = 4  # pynamodb's client: standard retry mode, 1 + 3 retries per call
LOST = pytest.mark.parametrize("times", [pytest.param(1, id="below-botocore-retries"),
                                         pytest.param(BOTOCORE_ATTEMPTS, id="above-botocore-retries")])
DAY = timedelta(days=1)


@LOST
def test_promote_answers_its_size_once_when_the_answer_is_lost(admin: Admin, mcp: Mcp, agent: dict[str, Any],
                                                               faults: Faults, times: int) -> None:
    # GIVEN a tool in the toolbox, and the promotion's answer lost `times` times
    admin.publish()
    faults.lose_answer("TransactWriteItems", times=times, when=touches("-history"))
    # WHEN the agent promotes it
    answer = mcp.call("promote", READ)
    # THEN it is told size 1, and the tool is promoted, counted and recorded exactly once
    assert faults.hits == times
    assert answer["isError"] is False and answer["structuredContent"]["size"] == 1
    assert books(admin, agent["id"]) == (1, 1, 1)
    assert FIRST_CLASS in mcp.tool_names()


@LOST
def test_demote_answers_its_size_once_when_the_answer_is_lost(admin: Admin, mcp: Mcp, agent: dict[str, Any],
                                                              faults: Faults, times: int) -> None:
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
    assert books(admin, agent["id"]) == (1, 1, 1)
    assert [action for name, action, _ in history(admin, agent["id"])
            if name == "list-sales-orders"] == ["promoted", "demoted"]
    assert FIRST_CLASS not in mcp.tool_names()


@pytest.mark.parametrize("step", ["start", "end"])
@LOST
def test_a_call_runs_once_and_ends_when_a_run_write_loses_its_answer(
    admin: Admin, mcp: Mcp, agent: dict[str, Any], vendor: Vendor, faults: Faults, step: str, times: int,
) -> None:
    # GIVEN a promoted read tool, and the answer of its run's start (or end) lost `times` times
    publish_read(admin, vendor)
    mcp.call("promote", READ)
    when = RUN_START if step == "start" else RUN_SUCCEEDS
    faults.lose_answer("TransactWriteItems", times=times, when=when)
    # WHEN the agent calls it
    result = mcp.call(FIRST_CLASS, {"customer": "acme"})
    # THEN it gets the vendor's answer from one request, and one run that ended
    assert faults.hits == times
    assert result["isError"] is False and result["structuredContent"] == ANSWER
    assert len(vendor.received) == 1
    assert run_statuses(admin, agent["id"]) == ["succeeded"]
    # AND nothing holds the agent in flight: the lease is gone, its revision moved on once
    state = agent_state(agent["id"])
    assert state.leases == {} and state.lease_rev == 1
    assert state.promotion(*READ.values()).last_used_at is not None


@LOST
def test_an_approval_runs_its_run_once_when_its_answer_is_lost(
    admin: Admin, mcp: Mcp, agent: dict[str, Any], vendor: Vendor, faults: Faults, times: int,
) -> None:
    # GIVEN a write call waiting on a person, and the approval's answer lost `times` times
    run_id = call_write(admin, vendor, mcp)
    faults.lose_answer("TransactWriteItems", times=times, when=sets_status("allow"))  # the decision it records
    # WHEN a person approves it
    approved = admin.call("POST", f"/v1/approvals/{run_id}/approve")
    # THEN the approval succeeds (not 409), the vendor is called once and the run ends
    assert faults.hits == times
    assert approved.status_code == 200, approved.body
    assert approved.json_body["status"] == "succeeded"
    assert len(vendor.received) == 1
    assert run_statuses(admin, agent["id"]) == ["succeeded"]
    assert admin.call("GET", "/v1/approvals").json_body["items"] == []
    # AND no lease is left, and the approval stands once for the tool
    assert agent_state(agent["id"]).leases == {}
    decisions = admin.call("GET", f"/v1/agents/{agent['id']}/approvals").json_body["items"]
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
def test_acquire_publishes_and_promotes_once_when_an_answer_is_lost(
    admin: Admin, mcp: Mcp, agent: dict[str, Any], keyless_vendor: Vendor, faults: Faults, table: str, times: int,
) -> None:
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
    assert books(admin, agent["id"]) == (1, 1, 1)
    assert history(admin, agent["id"]) == [("forecast", "promoted", "published")]


@LOST
def test_acquire_counts_the_quota_once_when_the_counts_answer_is_lost(
    mcp: Mcp, agent: dict[str, Any], keyless_vendor: Vendor, faults: Faults, settings_env: Any, times: int,
) -> None:
    # GIVEN an agent allowed two publishes a day that has made one, and the next count's answer lost
    settings_env(WORKSET_ACQUIRE_PER_DAY="2")
    assert mcp.call("acquire", _authored(keyless_vendor))["isError"] is False
    faults.lose_answer("TransactWriteItems", times=times, when=counts_quota)
    # WHEN it publishes its second version of the day
    answer = mcp.call("acquire", _authored(keyless_vendor, description="Forecast, version two."))
    # THEN it is published as version 2, and the quota counts two publishes (not three, nor refused)
    assert faults.hits == times
    assert answer["isError"] is False, answer["structuredContent"]
    assert answer["structuredContent"]["version"] == 2
    counted = AgentSettingsItem.get(agent["id"], AGENT_SK)
    assert int(counted.acquire_count) == 2


@LOST
def test_the_sweep_reports_a_demotion_whose_answer_was_lost_as_demoted(
    admin: Admin, mcp: Mcp, agent: dict[str, Any], faults: Faults, times: int,
) -> None:
    # GIVEN a tool promoted and left idle past the window, and the sweep's demotion's answer lost `times` times
    admin.publish()
    mcp.call("promote", READ)
    faults.lose_answer("TransactWriteItems", times=times, when=touches("-history"))
    # WHEN the sweep runs after the window
    report = sweep_at(admin, utcnow() + 22 * DAY)
    # THEN it reports the tool demoted (not held), and it is out, uncounted and recorded once
    assert faults.hits == times
    assert [(d["name"], d["cause"]) for d in report["demoted"]] == [("list-sales-orders", "idle")]
    assert report["held"] == []
    assert books(admin, agent["id"]) == (0, 0, 0)
    assert history(admin, agent["id"]) == [("list-sales-orders", "promoted", "agent_asked"),
                                           ("list-sales-orders", "demoted", "idle")]
    # AND the next sweep finds nothing due
    again = sweep_at(admin, utcnow() + 23 * DAY)
    assert (again["demoted"], again["held"]) == ([], [])


def test_above_botocores_retries_the_app_sends_the_transaction_again_under_its_token(admin: Admin,
                                                                                    faults: Faults) -> None:
    """The premise of `LOST`: BOTOCORE_ATTEMPTS lost answers are one call botocore gives up on,
    so the app's retry sends the transaction once more, under the same token."""
    # GIVEN the publish's answer lost BOTOCORE_ATTEMPTS times, and every attempt watched
    bodies = faults.watch("TransactWriteItems")
    faults.lose_answer("TransactWriteItems", times=BOTOCORE_ATTEMPTS, when=touches("-tools"))
    # WHEN an admin publishes
    assert admin.call("POST", "/v1/tools", tool_spec()).status_code == 201
    # THEN one attempt more than botocore makes was sent, all of them the same request under one token
    assert len(bodies) == BOTOCORE_ATTEMPTS + 1
    assert all(body == bodies[0] for body in bodies) and bodies[0]["ClientRequestToken"]


def test_each_transaction_has_a_token_of_its_own(admin: Admin, faults: Faults) -> None:
    # GIVEN every transaction watched
    bodies = faults.watch("TransactWriteItems")
    # WHEN two tools are published
    admin.publish()
    admin.publish(name="list-customers")
    # THEN each carried its own token
    tokens = [body.get("ClientRequestToken") for body in bodies]
    assert len(tokens) == 2 and all(tokens) and tokens[0] != tokens[1]
