"""Approvals inside the client (issue 26 section 2), at the HTTP level, against the revision texts:

- 2026-07-28 `basic/patterns/mrtr` ("InputRequiredResult", "Server Requirements (Basic Workflow)")
  and `client/elicitation` ("Capabilities", "URL Mode Elicitation Requests", "URL Mode Flow");
- 2025-11-25 `client/elicitation` ("URL Mode Elicitation Requests", "Completion Notifications for
  URL Mode Elicitation").

The approval itself is always the console's (here the admin API's): one conditional write moves
the run on and calls the vendor, so a retry racing it never makes a second run or vendor call.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from chalicelib.agents import workingset
from chalicelib.base.clock import utcnow
from chalicelib.base.errors import ListenLimit, StoreUnavailable
from chalicelib.mcp import approvals
from chalicelib.mcp.approvals import INPUT_KEY
from chalicelib.store import agents
from tests.conftest import Admin, Mcp, Vendor
from tests.upstream_servers import forecast_server, sdk_server

ORDER = {"vendor": "unleashed", "name": "create-order"}
NAME = "unleashed__create-order"
URL_MODE = {"elicitation": {"url": {}}}


@pytest.fixture
def write_tool(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    admin.publish(name="create-order", description="Create a sales order.", annotations={"destructiveHint": False},
                  input_schema={"type": "object", "properties": {"customer": {"type": "string"}}},
                  request={"method": "POST", "url": f"{vendor.url}/orders"})
    mcp.call("promote", ORDER)


@pytest.fixture
def modern(mcp: Mcp, write_tool: None) -> Mcp:
    """A 2026-07-28 client that declares URL-mode elicitation on its requests."""
    mcp.modern = True
    mcp.capabilities = URL_MODE
    return mcp


@pytest.fixture
def short_hold(settings_env: Any) -> None:
    settings_env(WORKSET_APPROVAL_HOLD_SECONDS="0.3")


def _first(mcp: Mcp, customer: str = "acme") -> dict[str, Any]:
    answer = mcp.post("tools/call", {"name": NAME, "arguments": {"customer": customer}})
    assert answer.status_code == 200, answer.json_body
    return answer.json_body["result"]


def _retry(mcp: Mcp, state: Any, action: str = "accept", customer: str = "acme") -> Any:
    return mcp.post("tools/call", {"name": NAME, "arguments": {"customer": customer}, "requestState": state,
                                   "inputResponses": {INPUT_KEY: {"action": action}}})


def _pending(admin: Admin) -> list[dict[str, Any]]:
    return admin.call("GET", "/v1/approvals").json_body["items"]


def _runs(admin: Admin) -> list[dict[str, Any]]:
    agent_id = admin.call("GET", "/v1/agents").json_body["items"][0]["id"]
    return admin.call("GET", f"/v1/agents/{agent_id}/runs").json_body["items"]


# -- 2026-07-28 ---------------------------------------------------------------------------------

def test_a_call_that_waits_answers_input_required_with_a_url_elicitation(admin: Admin, modern: Mcp,
                                                                          vendor: Vendor) -> None:
    result = _first(modern)
    # mrtr "InputRequiredResult": resultType input_required, inputRequests and requestState
    assert result["resultType"] == "input_required"
    [(key, asked)] = result["inputRequests"].items()
    run_id = _pending(admin)[0]["id"]
    # elicitation "URL Mode Elicitation Requests": mode url, a message, the URL (the run's page)
    assert (key, asked["method"], asked["params"]["mode"]) == (INPUT_KEY, "elicitation/create", "url")
    assert asked["params"]["url"] == f"http://127.0.0.1:8000/console/approvals/{run_id}"
    assert "create-order" in asked["params"]["message"]
    assert isinstance(result["requestState"], str) and run_id not in result["requestState"].split(".")[1]
    assert vendor.received == []


def test_the_retry_after_the_console_approved_answers_the_vendors_result_once(admin: Admin, modern: Mcp,
                                                                              vendor: Vendor) -> None:
    state = _first(modern)["requestState"]
    run_id = _pending(admin)[0]["id"]
    assert admin.call("POST", f"/v1/approvals/{run_id}/approve").json_body["status"] == "succeeded"
    answer = _retry(modern, state)
    assert answer.status_code == 200
    result = answer.json_body["result"]
    assert result["resultType"] == "complete" and result["isError"] is False
    assert result["structuredContent"] == {"orders": [{"id": 1}]}
    # the same retry again (a client resending) reads the same run: still one run, one vendor call
    assert _retry(modern, state).json_body["result"]["structuredContent"] == {"orders": [{"id": 1}]}
    assert len(vendor.received) == 1 and len(_runs(admin)) == 1


def test_a_retry_that_races_the_console_holds_and_gets_the_result(admin: Admin, modern: Mcp, vendor: Vendor,
                                                                  settings_env: Any) -> None:
    # GIVEN a waiting call, and a person who approves while the retries are held
    settings_env(WORKSET_APPROVAL_HOLD_SECONDS="10")
    state = _first(modern)["requestState"]
    run_id = _pending(admin)[0]["id"]
    answers: list[Any] = []

    def retry() -> None:
        answers.append(_retry(modern, state).json_body["result"])

    threads = [threading.Thread(target=retry) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    assert admin.call("POST", f"/v1/approvals/{run_id}/approve").status_code == 200
    for thread in threads:
        thread.join(15)
    # THEN every retry answers the one vendor call's result
    assert [a["structuredContent"] for a in answers] == [{"orders": [{"id": 1}]}] * 3
    assert len(vendor.received) == 1 and len(_runs(admin)) == 1


def test_a_retry_nobody_decided_yet_answers_todays_awaiting_result(admin: Admin, modern: Mcp, vendor: Vendor,
                                                                   short_hold: None) -> None:
    state = _first(modern)["requestState"]
    result = _retry(modern, state).json_body["result"]
    assert result["resultType"] == "complete" and result["structuredContent"]["status"] == "awaiting_approval"
    assert len(_pending(admin)) == 1 and vendor.received == []


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_declining_in_the_client_leaves_the_decision_to_the_console(admin: Admin, modern: Mcp, vendor: Vendor,
                                                                    action: str) -> None:
    state = _first(modern)["requestState"]
    result = _retry(modern, state, action).json_body["result"]
    assert result["structuredContent"]["status"] == "awaiting_approval"
    assert len(_pending(admin)) == 1 and vendor.received == []


def test_the_retry_after_a_denial_answers_the_denial(admin: Admin, modern: Mcp, vendor: Vendor) -> None:
    state = _first(modern)["requestState"]
    admin.call("POST", f"/v1/approvals/{_pending(admin)[0]['id']}/deny")
    result = _retry(modern, state).json_body["result"]
    assert result["isError"] is True and result["structuredContent"]["error"]["code"] == "tool_denied"
    assert vendor.received == []


def _tampered(state: str) -> str:
    body, mac = state.split(".")
    return f"{body[:-2]}{'A' if body[-2] != 'A' else 'B'}{body[-1]}.{mac}"


@pytest.mark.parametrize("change", ["tampered", "other arguments", "garbage", "not a string"])
def test_a_state_that_does_not_verify_is_invalid_params_and_changes_nothing(admin: Admin, modern: Mcp,
                                                                            vendor: Vendor, change: str) -> None:
    # mrtr "Server Requirements": requestState is attacker-controlled; integrity protected, bound
    # to the principal and the originating request, rejected when it fails verification
    state = _first(modern)["requestState"]
    run_id = _pending(admin)[0]["id"]
    admin.call("POST", f"/v1/approvals/{run_id}/approve")
    sent: Any = {"tampered": _tampered(state), "other arguments": state, "garbage": "x.y", "not a string": 7}[change]
    answer = _retry(modern, sent, customer="evil" if change == "other arguments" else "acme")
    assert answer.status_code == 400 and answer.json_body["error"]["code"] == -32602
    assert len(vendor.received) == 1 and len(_runs(admin)) == 1


def test_another_agents_state_is_refused(admin: Admin, modern: Mcp, client: Any) -> None:
    state = _first(modern)["requestState"]
    other = Mcp(client, admin.create_agent("thief")["api_key"], modern=True, capabilities=URL_MODE)
    answer = _retry(other, state)
    assert answer.status_code == 400 and answer.json_body["error"]["code"] == -32602


@pytest.mark.parametrize("capabilities", [{}, {"elicitation": {}}, {"elicitation": {"form": {}}},
                                          {"elicitation": {"url": True}}])
def test_clients_that_declare_no_url_mode_keep_todays_answer(admin: Admin, modern: Mcp, vendor: Vendor,
                                                             capabilities: dict) -> None:
    # elicitation "Capabilities": an empty elicitation object is form mode only; servers MUST NOT
    # send a mode the client did not declare
    modern.capabilities = capabilities
    result = _first(modern)
    assert result["resultType"] == "complete" and "inputRequests" not in result
    assert result["structuredContent"]["status"] == "awaiting_approval"


def test_a_call_that_needs_no_person_is_answered_as_today(admin: Admin, modern: Mcp, vendor: Vendor) -> None:
    _first(modern)
    admin.call("POST", f"/v1/approvals/{_pending(admin)[0]['id']}/approve")
    result = _first(modern, "second")
    assert result["resultType"] == "complete" and result["structuredContent"] == {"orders": [{"id": 1}]}


# -- 2025-11-25 ---------------------------------------------------------------------------------

def _initialize(mcp: Mcp, capabilities: dict) -> Any:
    return mcp.post("initialize", {"protocolVersion": "2025-11-25", "capabilities": capabilities,
                                   "clientInfo": {"name": "t", "version": "1"}})


def test_initialize_gives_a_session_only_to_a_client_that_declared_url_mode(mcp: Mcp) -> None:
    assert "Mcp-Session-Id" in _initialize(mcp, URL_MODE).headers
    assert "Mcp-Session-Id" not in _initialize(mcp, {}).headers
    assert "Mcp-Session-Id" not in _initialize(mcp, {"elicitation": {}}).headers


def _legacy_call(mcp: Mcp, session: str | None) -> Any:
    headers = {"Mcp-Session-Id": session} if session else {}
    return mcp.post("tools/call", {"name": NAME, "arguments": {"customer": "acme"}}, headers=headers)


def test_a_waiting_call_streams_the_elicitation_then_the_result_when_decided_in_the_hold(
    admin: Admin, mcp: Mcp, vendor: Vendor, write_tool: None, settings_env: Any
) -> None:
    settings_env(WORKSET_APPROVAL_HOLD_SECONDS="10")
    session = _initialize(mcp, URL_MODE).headers["Mcp-Session-Id"]

    def approve_soon() -> None:
        for _ in range(50):
            pending = _pending(admin)
            if pending:
                admin.call("POST", f"/v1/approvals/{pending[0]['id']}/approve")
                return
            time.sleep(0.1)

    approver = threading.Thread(target=approve_soon)
    approver.start()
    answer = _legacy_call(mcp, session)
    approver.join(10)
    elicit, complete = [n for n in answer.notifications if n.get("method", "").startswith(("elicitation", "notif"))
                        and n["method"] != "notifications/tools/list_changed"]
    run_id = elicit["params"]["elicitationId"]
    assert elicit["method"] == "elicitation/create" and "id" in elicit
    assert (elicit["params"]["mode"], elicit["params"]["url"]) == (
        "url", f"http://127.0.0.1:8000/console/approvals/{run_id}")
    assert complete == {"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
                        "params": {"elicitationId": run_id}}
    assert answer.json_body["result"]["structuredContent"] == {"orders": [{"id": 1}]}
    assert len(vendor.received) == 1


def test_a_wait_past_the_hold_streams_the_elicitation_then_todays_answer(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                                         write_tool: None, short_hold: None) -> None:
    session = _initialize(mcp, URL_MODE).headers["Mcp-Session-Id"]
    answer = _legacy_call(mcp, session)
    assert [n["method"] for n in answer.notifications if n["method"] != "notifications/tools/list_changed"] == [
        "elicitation/create"]
    assert answer.json_body["result"]["structuredContent"]["status"] == "awaiting_approval"
    # the client's answer to the elicitation is accepted and changes nothing
    reply = mcp.post("ignored", raw=b'{"jsonrpc": "2.0", "id": "approval-x", "result": {"action": "accept"}}')
    assert reply.status_code == 202
    assert len(_pending(admin)) == 1 and vendor.received == []


def test_a_legacy_client_without_the_session_keeps_todays_answer_exactly(admin: Admin, mcp: Mcp,
                                                                         write_tool: None) -> None:
    _initialize(mcp, {})
    answer = _legacy_call(mcp, None)
    assert answer.notifications == [] or all(n["method"] == "notifications/tools/list_changed"
                                             for n in answer.notifications)
    result = answer.json_body["result"]
    assert set(result) == {"content", "structuredContent", "isError", "_meta"} or set(result) == {
        "content", "structuredContent", "isError"}
    assert result["structuredContent"]["status"] == "awaiting_approval"


# -- holds are bounded ---------------------------------------------------------------------------

class _Clock:
    """approvals' `time`, faked: a hold's sleeps are recorded and advance the clock at once."""

    def __init__(self) -> None:
        self.at = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.at += seconds

    def time(self) -> float:
        return time.time()


@pytest.fixture
def one_held_request(settings_env: Any, monkeypatch: pytest.MonkeyPatch) -> _Clock:
    """An account that may hold one approval hold (and one listen) at once, and a hold of 10 s,
    on a fake clock."""
    settings_env(WORKSET_MAX_LISTENS_PER_ACCOUNT="1", WORKSET_APPROVAL_HOLD_SECONDS="10")
    clock = _Clock()
    monkeypatch.setattr(approvals, "time", clock)
    return clock


def _slot_taken(agent: dict[str, Any]) -> Any:
    state = agents.load_state(agent["id"])
    assert state is not None
    return workingset.listen_slot(state, utcnow(), hold_seconds=30, pool=workingset.APPROVAL_HOLDS)


def _slots_free(agent: dict[str, Any]) -> bool:
    try:
        with _slot_taken(agent):
            return True
    except ListenLimit:
        return False


def test_a_2025_call_holds_only_when_the_account_has_a_slot_free(admin: Admin, mcp: Mcp, agent: dict[str, Any],
                                                                 write_tool: None, one_held_request: _Clock) -> None:
    # each held call keeps one Lambda execution busy, as a held listen does: an account holds a
    # bounded number at once, whatever its agents send
    session = _initialize(mcp, URL_MODE).headers["Mcp-Session-Id"]
    # GIVEN the account's one slot held by another request
    with _slot_taken(agent):
        # WHEN a call that waits on a person comes
        answer = _legacy_call(mcp, session)
        # THEN it is answered at once (the elicitation, then today's awaiting result): nothing held
        assert [n["method"] for n in answer.notifications if n["method"] != "notifications/tools/list_changed"] == [
            "elicitation/create"]
        assert answer.json_body["result"]["structuredContent"]["status"] == "awaiting_approval"
        assert one_held_request.slept == []
    # AND with the slot free the next call holds, and gives the slot back when its hold ends
    _legacy_call(mcp, session)
    assert one_held_request.slept and sum(one_held_request.slept) >= 10
    assert _slots_free(agent)


def test_a_2026_retry_holds_only_when_the_account_has_a_slot_free(admin: Admin, modern: Mcp, agent: dict[str, Any],
                                                                  vendor: Vendor, one_held_request: _Clock) -> None:
    state = _first(modern)["requestState"]
    with _slot_taken(agent):
        result = _retry(modern, state).json_body["result"]
        assert result["structuredContent"]["status"] == "awaiting_approval"
        assert one_held_request.slept == []
    assert _retry(modern, state).json_body["result"]["structuredContent"]["status"] == "awaiting_approval"
    assert one_held_request.slept and _slots_free(agent)
    assert len(_pending(admin)) == 1 and vendor.received == []


# -- an MCP server's tool -----------------------------------------------------------------------

def test_the_retry_answers_an_mcp_servers_tool_result_as_the_call_itself_does(admin: Admin, modern: Mcp) -> None:
    # GIVEN a write tool of a registered MCP server, called by a client that takes URL mode
    with sdk_server(forecast_server()) as url:
        assert admin.call("POST", "/v1/upstreams", {"vendor": "weather", "url": url}).status_code == 201
        modern.call("promote", {"vendor": "weather", "name": "create-note"})
        note = {"name": "weather__create-note", "arguments": {"title": "t", "body": "b"}}
        first = modern.post("tools/call", note).json_body["result"]
        admin.call("POST", f"/v1/approvals/{_pending(admin)[0]['id']}/approve")
        # WHEN the client retries once the person approved
        retried = modern.post("tools/call", {**note, "requestState": first["requestState"],
                                             "inputResponses": {INPUT_KEY: {"action": "accept"}}}).json_body["result"]
        # THEN it gets the server's own result, as a call that needs no person gets it
        direct = modern.post("tools/call", note).json_body["result"]
    assert direct["isError"] is False and direct["content"][0]["text"].startswith("created note")
    assert {key: retried[key] for key in ("content", "isError")} == {key: direct[key] for key in ("content", "isError")}
    assert retried.get("structuredContent") == direct.get("structuredContent")


def test_held_listens_do_not_starve_approval_holds(admin: Admin, modern: Mcp, agent: dict[str, Any],
                                                   vendor: Vendor, one_held_request: _Clock) -> None:
    # GIVEN the account's listens all held (a modern client listens all the time)
    state = _first(modern)["requestState"]
    listening = agents.load_state(agent["id"])
    assert listening is not None
    with workingset.listen_slot(listening, utcnow(), hold_seconds=30):
        # WHEN a retry asks to wait for the person
        _retry(modern, state)
    # THEN it holds all the same: approval holds have slots of their own
    assert one_held_request.slept


def test_a_store_fault_on_the_retry_is_not_taken_for_a_bad_state(admin: Admin, modern: Mcp,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a waiting call's state, and a store that fails when the retry reads the run
    state = _first(modern)["requestState"]

    def failing(*args: Any) -> Any:
        raise StoreUnavailable("DynamoDB is failing")

    with monkeypatch.context() as patched:
        patched.setattr(approvals.runs, "get_for_agent", failing)
        # WHEN the client retries
        answer = _retry(modern, state)
    # THEN it is not told its state is invalid (which would make it give the call up): the fault is ours
    assert answer.json_body["error"]["code"] != -32602, answer.json_body
    assert "requestState" not in answer.json_body["error"]["message"]
    assert len(_pending(admin)) == 1


def test_the_denial_says_a_person_never_the_admins_label(admin: Admin, modern: Mcp, vendor: Vendor) -> None:
    # GIVEN a call a person denied through the admin API (recorded as an `admin:<hash>` decider)
    state = _first(modern)["requestState"]
    run_id = _pending(admin)[0]["id"]
    assert admin.call("POST", f"/v1/approvals/{run_id}/deny").json_body["status"] == "denied"
    # WHEN the client retries
    error = _retry(modern, state).json_body["result"]["structuredContent"]["error"]
    # THEN the agent hears "a person", as get_run and a standing denial say, never who
    assert error["message"].startswith("a person denied this call"), error
    assert "admin" not in error["message"]


def test_input_required_answers_from_the_run_it_started_without_reading_it_again(
        admin: Admin, modern: Mcp, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.dynamo_calls import DynamoCalls

    counter = DynamoCalls().install()
    # GIVEN the same waiting call answered today's way (no URL mode), and a store that fails any
    # read of a run by id (which answering input_required must not need)
    with counter.measure() as plain:
        modern.capabilities = {}
        assert _first(modern)["structuredContent"]["status"] == "awaiting_approval"

    def failing(*args: Any) -> Any:
        raise StoreUnavailable("DynamoDB is failing")

    monkeypatch.setattr(approvals.runs, "get_for_agent", failing)
    modern.capabilities = URL_MODE
    with counter.measure() as elicited:
        result = _first(modern, customer="globex")
    # THEN the call answers input_required for its run, with no DynamoDB call more than today's answer
    assert result["resultType"] == "input_required", result
    run_ids = {run["id"] for run in _pending(admin)}
    assert result["inputRequests"][INPUT_KEY]["params"]["url"].rsplit("/", 1)[1] in run_ids
    assert len(elicited) == len(plain), (plain, elicited)
