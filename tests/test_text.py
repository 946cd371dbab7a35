"""Hostile text and our own crashes, at every entrance and exit: lone surrogates, non-finite
numbers, deep nesting, control characters, malformed cursors and page sizes are refused with a
clear error and change nothing; whatever goes wrong inside, /mcp, /v1 and the console answer in
their own shape and log the cause with the request id."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from botocore.exceptions import ClientError
from chalice.test import Client
from pynamodb.connection.base import Connection

from chalicelib.agents import workingset
from chalicelib.api import common as api_common
from chalicelib.base import jsontext, log
from chalicelib.catalog import toolbox
from chalicelib.identity import accounts
from tests.conftest import Admin, Mcp, Vendor, log_lines, tool_spec
from tests.test_console import Console

SURROGATE = "\ud800"
DEEP = b"[" * 100_000 + b"]" * 100_000


def strict_json(body: bytes) -> Any:
    """The answer as a careful client reads it: UTF-8, finite, no lone surrogates."""
    return jsontext.loads(body)


def cursor_of(key: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode()


lines = log_lines


def _account_id(admin: Admin) -> str:
    return accounts.authenticate_admin(admin.token)


# --- jsontext: the one reader and writer ---------------------------------------------------------

@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        (b"[NaN]", "number"),
        (b"[Infinity]", "number"),
        (b"[-Infinity]", "number"),
        (b"[1e999]", "number"),
        (b"[-1e999]", "number"),
        (b"[1" + b"0" * 400 + b"]", "number"),
        (b"[" + b"9" * 5000 + b"]", "number"),
        (DEEP, "depth"),
        (b"[" * (jsontext.MAX_DEPTH + 1) + b"]" * (jsontext.MAX_DEPTH + 1), "depth"),
        (b'{"a": "\xed\xa0\x80"}', "encoding"),
        (b'"\xff"', "encoding"),
        ('"x"'.encode("utf-16"), "encoding"),
        (b'{"a": "\\ud800"}', "surrogate"),
        (b'{"\\udfff": 1}', "surrogate"),
        (b'["\\ude00\\ud83d"]', "surrogate"),
        (b"{not json", "syntax"),
        (b"\xef\xbb\xbf{}", "syntax"),
    ],
)
def test_loads_refuses_what_no_encoder_can_write(raw: bytes, kind: str) -> None:
    # WHEN strict JSON reads hostile text
    with pytest.raises(jsontext.JsonRefused) as refused:
        jsontext.loads(raw)
    # THEN it refuses it with one exception type saying why (a ValueError, as json's own is)
    assert refused.value.kind == kind
    assert isinstance(refused.value, ValueError)


def test_loads_keeps_what_is_text() -> None:
    # GIVEN an escaped surrogate pair (one real character), nesting at the limit and big finite numbers
    raw = '{"emoji": "\\ud83d\\ude00", "deep": ' + "[" * (jsontext.MAX_DEPTH - 1) + "]" * (jsontext.MAX_DEPTH - 1) + \
          ', "big": 1e308, "int": ' + "9" * 300 + "}"
    # WHEN it is read
    value = jsontext.loads(raw)
    # THEN it is all there
    assert value["emoji"] == "😀" and value["big"] == 1e308


def test_a_surrogate_is_located_at_the_top_or_inside() -> None:
    with pytest.raises(jsontext.JsonRefused) as inside:
        jsontext.loads(b'{"params": {"arguments": {"q": ["a", "\\ud800"]}}}')
    with pytest.raises(jsontext.JsonRefused) as top:
        jsontext.loads(b'{"method": "\\ud800"}')
    assert inside.value.path == ("params", "arguments", "q", 1) and inside.value.where == "params.arguments.q[1]"
    assert top.value.path == ("method",)


@pytest.mark.parametrize("value", [
    {"a": SURROGATE}, {SURROGATE: 1}, [float("nan"), float("inf"), -float("inf")], {"a": [{"b": "x" + SURROGATE}]},
])
def test_dumps_always_writes_valid_utf8_json(value: Any) -> None:
    # WHEN a value no encoder could write is dumped
    text = jsontext.dumps(value)
    # THEN the text encodes and reads back strictly
    strict_json(text.encode("utf-8"))


# --- /mcp: the entrance --------------------------------------------------------------------------

def _envelope(params: str = "{}", *, method: str = '"tools/list"', request_id: str = "7") -> bytes:
    return f'{{"jsonrpc": "2.0", "id": {request_id}, "method": {method}, "params": {params}}}'.encode()


@pytest.mark.parametrize(
    ("raw", "code", "answered_id"),
    [
        (b"{not json", -32700, None),
        (_envelope('{"x": NaN}'), -32700, None),
        (_envelope('{"x": 1e999}'), -32700, None),
        (_envelope('{"x": -Infinity}'), -32700, None),
        (DEEP, -32700, None),
        (_envelope("[" * 70 + "]" * 70), -32700, None),
        (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"x": "\xed\xa0\x80"}}', -32700, None),
        (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}, "x": "\xff"}', -32700, None),
        (_envelope('{"name": "a", "arguments": {"q": "\\ud800"}}', method='"tools/call"'), -32602, 7),
        (_envelope('{"\\ud800": 1}'), -32602, 7),
        (_envelope(method='"tools/\\ud800"'), -32600, 7),
        (_envelope(request_id='"\\ud800"'), -32600, None),
        (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list", "\\udc00": 1}', -32600, 7),
    ],
)
def test_hostile_json_rpc_is_refused_and_the_endpoint_still_answers(mcp: Mcp, raw: bytes, code: int,
                                                                    answered_id: int | None) -> None:
    # WHEN the agent sends hostile JSON
    answer = mcp.post("tools/list", raw=raw)
    # THEN a JSON-RPC error with the right code (and the id, when one could be read), in valid JSON,
    # on the legacy statuses: 400 for what is not a request, 200 for bad params
    body = strict_json(answer.body)
    assert body["error"]["code"] == code
    assert body["id"] == answered_id
    assert answer.status_code == (200 if code == -32602 else 400)
    # AND the endpoint still answers the next request
    assert mcp.post("tools/list").status_code == 200


@pytest.mark.parametrize("modern", [False, True])
def test_a_surrogate_in_params_is_invalid_params_with_the_id(mcp: Mcp, modern: bool) -> None:
    # WHEN a client sends a lone surrogate inside params
    mcp.modern = modern
    answer = mcp.post("tools/call", {"name": "find_tool", "arguments": {"query": SURROGATE}})
    # THEN it is -32602 answered to its id: HTTP 400 on the modern path (its table), 200 on the legacy one
    assert answer.status_code == (400 if modern else 200)
    assert answer.json_body["error"]["code"] == -32602
    assert answer.json_body["id"] == mcp.next_id


def test_acquire_with_a_surrogate_in_the_definition_stores_nothing(admin: Admin, mcp: Mcp) -> None:
    # GIVEN a definition whose schema description holds a lone surrogate
    spec = tool_spec(vendor="weather", name="forecast",
                     input_schema={"type": "object", "properties": {"city": {"type": "string",
                                                                             "description": "x" + SURROGATE}}})
    # WHEN the agent acquires it
    answer = mcp.post("tools/call", {"name": "acquire", "arguments": spec})
    # THEN it is refused as invalid params
    assert answer.json_body["error"]["code"] == -32602
    # AND nothing was stored, and both lists still answer valid JSON
    listed = admin.call("GET", "/v1/tools")
    assert listed.status_code == 200 and strict_json(listed.body)["items"] == []
    tools = mcp.post("tools/list")
    assert tools.status_code == 200 and "weather__forecast" not in mcp.tool_names()


def test_a_surrogate_stored_before_the_fix_does_not_silence_the_lists(admin: Admin, mcp: Mcp, console: Console,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a shared tool stored with a lone surrogate in its schema (as the lenient reader allowed)
    with monkeypatch.context() as lenient:
        lenient.setattr(jsontext, "loads", json.loads)
        admin.publish(input_schema={"type": "object", "properties": {"customer": {
            "type": "string", "description": "who" + SURROGATE}}, "required": ["customer"]})
    mcp.call("promote", {"vendor": "unleashed", "name": "list-sales-orders"})
    # WHEN the lists are read
    listed, tools, page = admin.call("GET", "/v1/tools"), mcp.post("tools/list"), console.get("/console/tools")
    # THEN they answer, in valid UTF-8, the surrogate shown as U+FFFD
    assert listed.status_code == tools.status_code == page.status_code == 200
    schema = strict_json(listed.body)["items"][0]["input_schema"]
    assert schema["properties"]["customer"]["description"] == "who\ufffd"
    assert "unleashed__list-sales-orders" in [t["name"] for t in strict_json(tools.body)["result"]["tools"]]
    page.body.decode("utf-8")
    assert admin.call("GET", "/v1/tools/unleashed/list-sales-orders").status_code == 200


@pytest.mark.parametrize("answer", [b'{"note": "\\ud800"}', b'{"n": NaN}', b'{"n": 1e999}', b"[" * 5000])
def test_a_hostile_vendor_answer_still_makes_a_valid_result(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                            answer: bytes) -> None:
    # GIVEN a promoted tool whose vendor answers JSON no encoder can write
    admin.publish(request={"method": "GET", "url": f"{vendor.url}/orders"})
    mcp.call("promote", {"vendor": "unleashed", "name": "list-sales-orders"})
    vendor.body = answer
    # WHEN the agent calls it
    response = mcp.post("tools/call", {"name": "unleashed__list-sales-orders", "arguments": {"customer": "a"}})
    # THEN the answer is a result in valid JSON, whose text is valid JSON too
    result = strict_json(response.body)["result"]
    strict_json(result["content"][0]["text"].encode())
    # AND the tool still answers once the vendor behaves
    vendor.body = {"orders": []}
    assert mcp.call("unleashed__list-sales-orders", {"customer": "a"})["isError"] is False


def test_tool_result_text_is_valid_json_whatever_it_carries() -> None:
    from chalicelib.base.outcomes import Outcome, tool_result

    result = tool_result(Outcome({"a": SURROGATE, "n": float("nan")}))
    assert strict_json(result["content"][0]["text"].encode()) == {"a": "\ufffd", "n": None}


# --- /v1: bodies, parameters, page sizes, cursors ------------------------------------------------

@pytest.mark.parametrize(
    "raw",
    [
        b'{"name": "x", "cap": NaN}', b'{"name": "x", "cap": 1e999}', b'{"name": "x", "cap": Infinity}', DEEP,
        b'{"name": "x\\ud800"}', b'{"\\ud800": 1, "name": "x"}', b'{"name": "x\xed\xa0\x80"}', b'{"name": "\xff"}',
        b'{"name": ' + b"[" * 80 + b"]" * 80 + b"}",
    ],
)
def test_a_hostile_body_is_invalid_input_and_creates_nothing(admin: Admin, raw: bytes) -> None:
    # WHEN the admin API gets a body no encoder can write
    answer = admin.client.http.post("/v1/agents", body=raw, headers={
        "Authorization": f"Bearer {admin.token}", "Content-Type": "application/json"})
    # THEN it is 400 invalid_input, in valid JSON
    assert answer.status_code == 400
    assert strict_json(answer.body)["error"]["code"] == "invalid_input"
    # AND no agent was made
    assert admin.call("GET", "/v1/agents").json_body["items"] == []


def test_a_surrogate_in_a_definition_names_its_field(admin: Admin) -> None:
    answer = admin.call("POST", "/v1/tools", tool_spec(description="List" + SURROGATE))
    assert answer.status_code == 400
    assert answer.json_body["error"]["field"] == "description"
    assert admin.call("GET", "/v1/tools").json_body["items"] == []


@pytest.mark.parametrize("agent_id", ["%ED%A0%80", SURROGATE, "ag%00", "ag\x00x", "ag%0Ax", "a%FFb", "ag\x85"])
def test_a_path_parameter_that_is_not_text_is_400(admin: Admin, agent_id: str) -> None:
    # WHEN a path parameter is a lone surrogate or a control character, escaped (as chalice local and
    # the test client deliver it) or not (as API Gateway does)
    answer = admin.call("GET", f"/v1/agents/{agent_id}")
    # THEN it is 400 naming the parameter, in valid JSON
    assert answer.status_code == 400
    assert strict_json(answer.body)["error"]["field"] == "agent_id"


def test_a_tool_path_with_a_surrogate_changes_nothing(admin: Admin) -> None:
    agent = admin.create_agent()
    admin.publish()
    admin.call("POST", f"/v1/agents/{agent['id']}/working-set", {"vendor": "unleashed", "name": "list-sales-orders"})
    answer = admin.call("DELETE", f"/v1/agents/{agent['id']}/working-set/unleashed/list{SURROGATE}")
    assert answer.status_code == 400 and answer.json_body["error"]["field"] == "name"
    assert len(admin.call("GET", f"/v1/agents/{agent['id']}/working-set").json_body["items"]) == 1


@pytest.mark.parametrize("query", [f"cursor={SURROGATE}", "cursor=%00", f"status={SURROGATE}", "limit=\x01",
                                   f"{SURROGATE}=1"])
def test_a_query_parameter_that_is_not_text_is_400(admin: Admin, query: str) -> None:
    answer = admin.call("GET", f"/v1/approvals?{query}")
    assert answer.status_code == 400
    assert strict_json(answer.body)["error"]["code"] == "invalid_input"


@pytest.mark.parametrize("value", ["²", "٣", "0", "101", "-1", "1.0", " 5", "", "1e2", "0x10", "9" * 20])
def test_a_limit_that_is_not_a_small_ascii_integer_is_400(admin: Admin, value: str) -> None:
    answer = admin.call("GET", f"/v1/agents?limit={value}")
    assert answer.status_code == 400
    assert answer.json_body["error"]["field"] == "limit"


LISTS = ["/v1/agents", "/v1/agents/{agent}/history", "/v1/agents/{agent}/runs", "/v1/tools", "/v1/connections",
         "/v1/approvals"]


def _bad_cursors(account_id: str, agent_id: str) -> list[str]:
    return [
        "!!!not-base64!!!",
        base64.urlsafe_b64encode(b"not json").decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
        cursor_of([1, 2]),
        cursor_of({}),
        cursor_of({"x": 1}),
        cursor_of({"account_id": {"S": account_id}, "agent_id": {"S": agent_id}}),  # too few keys
        cursor_of({"account_id": {"S": 5}, "agent_id": {"S": agent_id}}),
        cursor_of({"account_id": {"N": "1e999"}}),
        cursor_of({"account_id": {"S": account_id}, "agent_id": {"S": agent_id}, "sk": {"S": "AGENT"},
                   "created_at": {"S": "2026-01-01"}, "event_id": {"S": "e"}, "extra": {"S": "x"}}),
        base64.urlsafe_b64encode(b'{"account_id": {"S": "\\ud800"}}').decode(),
        base64.urlsafe_b64encode(b'{"account_id": {"S": "a"}, "n": NaN}').decode(),
        base64.urlsafe_b64encode(b"[" * 1000 + b"]" * 1000).decode(),
        "A" * 5000,
    ]


@pytest.mark.parametrize("path", LISTS)
def test_a_malformed_cursor_is_400_on_every_list(admin: Admin, path: str) -> None:
    # GIVEN an agent (so every list exists)
    agent = admin.create_agent()
    for bad in _bad_cursors(_account_id(admin), agent["id"]):
        # WHEN a list is asked for a page from a cursor it did not make
        answer = admin.call("GET", f"{path.format(agent=agent['id'])}?cursor={bad}")
        # THEN it is 400 on the cursor field
        assert answer.status_code == 400, (bad, answer.body)
        assert answer.json_body["error"]["field"] == "cursor"


def _shaped_cursor(path: str, account_id: str, agent_id: str) -> str:
    """A cursor with exactly the keys of the list's query (DynamoDB decides whether it is good)."""
    keys = {
        "/v1/agents": {"agent_id": agent_id, "sk": "AGENT", "account_id": account_id, "created_at": "2026"},
        "/v1/agents/{agent}/history": {"agent_id": agent_id, "event_id": "2026#1"},
        "/v1/agents/{agent}/runs": {"run_id": "r1", "agent_id": agent_id, "created_at": "2026"},
        "/v1/tools": {"account_id": account_id, "sk": "T#x"},
        "/v1/connections": {"account_id": account_id, "connection_id": "cn1"},
        "/v1/approvals": {"run_id": "r1", "pending_account_id": account_id, "created_at": "2026"},
    }[path]
    return cursor_of({name: {"S": value} for name, value in keys.items()})


@pytest.mark.parametrize("path", LISTS)
def test_a_cursor_dynamodb_rejects_is_400_not_a_crash(admin: Admin, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN DynamoDB rejects the start key of any query (as it does for keys of the wrong shape or size)
    agent = admin.create_agent()
    dispatch = Connection.dispatch

    def rejecting(self: Connection, operation: str, kwargs: dict[str, Any]) -> Any:
        if operation == "Query" and "ExclusiveStartKey" in kwargs:
            raise ClientError({"Error": {"Code": "ValidationException",
                                         "Message": "The provided starting key is invalid"}}, operation)
        return dispatch(self, operation, kwargs)

    monkeypatch.setattr(Connection, "dispatch", rejecting)
    # WHEN a list is asked for a page from a cursor of the right shape
    answer = admin.call("GET", f"{path.format(agent=agent['id'])}?cursor="
                               f"{_shaped_cursor(path, _account_id(admin), agent['id'])}")
    # THEN it is 400 on the cursor field, and the first page still answers
    assert answer.status_code == 400, answer.body
    assert answer.json_body["error"]["field"] == "cursor"
    assert admin.call("GET", path.format(agent=agent["id"])).status_code == 200


def test_real_cursors_still_page_every_list(admin: Admin) -> None:
    # GIVEN three agents
    for name in ["a", "b", "c"]:
        admin.create_agent(name)
    # WHEN the list is read two at a time
    first = admin.call("GET", "/v1/agents?limit=2").json_body
    second = admin.call("GET", f"/v1/agents?limit=2&cursor={first['next']}").json_body
    # THEN the pages hold all three
    assert [a["name"] for a in first["items"] + second["items"]] == ["a", "b", "c"]


@pytest.mark.parametrize("now", [5, None, [], {"a": 1}, SURROGATE, "", "yesterday", "0001-01-01T00:00:00Z",
                                 "9999-12-31T23:59:59-01:00", "2026-13-01T00:00:00Z"])
def test_sweep_with_a_bad_now_is_400(admin: Admin, now: Any) -> None:
    answer = admin.call("POST", "/v1/sweep", {"now": now})
    assert answer.status_code == 400
    assert answer.json_body["error"]["field"] == "now"


def test_sweep_with_a_good_now_runs(admin: Admin) -> None:
    assert admin.call("POST", "/v1/sweep", {"now": "2026-11-30T07:00:00Z"}).status_code == 200


def test_a_bearer_that_is_not_text_is_401(admin: Admin) -> None:
    answer = admin.call("GET", "/v1/agents", token=admin.token + SURROGATE)
    assert answer.status_code == 401


# --- the console ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/console/agents/%ED%A0%80", f"/console/agents/{SURROGATE}", "/console/agents/a%00",
                                  f"/console/tools?cursor={SURROGATE}", "/console/tools?q=%01",
                                  f"/console/tools/unleashed/x{SURROGATE}"])
def test_a_console_parameter_that_is_not_text_is_a_400_page(console: Console, client: Client, path: str) -> None:
    # WHEN a signed-in person (or anyone) follows a link with hostile parameters
    signed_in, anonymous = console.get(path), client.http.get(path)
    # THEN both get a 400 page that encodes, not a crash
    assert signed_in.status_code == anonymous.status_code == 400
    assert "Not accepted" in signed_in.body.decode("utf-8")


def test_a_console_form_with_a_control_character_changes_nothing(console: Console, admin: Admin) -> None:
    # WHEN a form carries a control character
    answer = console.post("/console/agents", {"name": "hermes\x00", "cap": "20", "idle_window_days": "21"})
    # THEN it is a 400 page and no agent was made
    assert answer.status_code == 400
    assert admin.call("GET", "/v1/agents").json_body["items"] == []


def test_a_malformed_console_cursor_is_a_400_page(console: Console) -> None:
    assert console.get("/console/tools?cursor=!!!").status_code == 400
    assert console.get("/console/agents?cursor=" + cursor_of({"x": {"S": "y"}})).status_code == 400


# --- crashes: no unexpected exception escapes ----------------------------------------------------

def _boom(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("simulated crash")


@pytest.mark.parametrize("modern", [False, True])
def test_a_crash_in_mcp_is_internal_error_with_the_id_and_is_logged(mcp: Mcp, modern: bool, logged: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the working set crashes
    monkeypatch.setattr(workingset, "promoted_tools_with_policies", _boom)
    mcp.modern = modern
    # WHEN the agent lists its tools
    answer = mcp.post("tools/list")
    # THEN JSON-RPC -32603 answers its id: HTTP 500 on the modern path, 200 on the legacy one
    body = strict_json(answer.body)
    assert body["error"]["code"] == -32603 and body["error"]["message"] == "Internal error"
    assert body["id"] == mcp.next_id
    assert answer.status_code == (500 if modern else 200)
    # AND the cause is logged with the request id the answer names
    failures = [line for line in lines(logged) if line["kind"] == "mcp.internal_error"]
    assert failures and failures[0]["request_id"] == body["error"]["data"]["requestId"]
    assert failures[0]["error"] == "RuntimeError" and failures[0]["message"] == "simulated crash"
    assert failures[0]["trace"]
    # AND other methods still answer
    monkeypatch.undo()
    assert mcp.post("ping").status_code == 200


def test_a_crash_in_the_admin_api_is_500_internal_error_and_is_logged(admin: Admin, logged: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN listing the toolbox crashes
    monkeypatch.setattr(toolbox, "page", _boom)
    # WHEN the admin lists tools
    answer = admin.call("GET", "/v1/tools")
    # THEN 500 internal_error with a request id, in valid JSON
    error = strict_json(answer.body)["error"]
    assert answer.status_code == 500
    assert error["code"] == "internal_error" and error["request_id"]
    assert "simulated" not in error["message"]
    # AND one log line carries that request id, the cause and no token
    failures = [line for line in lines(logged) if line["kind"] == "api.internal_error"]
    assert [line["request_id"] for line in failures] == [error["request_id"]]
    assert failures[0]["route"] == "/v1/tools" and admin.token not in logged.text
    # AND other routes still answer
    assert admin.call("GET", "/v1/agents").status_code == 200


def test_a_crash_in_authentication_is_500_not_a_generic_error(admin: Admin, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_common.accounts, "authenticate_admin", _boom)
    answer = admin.call("GET", "/v1/agents")
    assert answer.status_code == 500 and answer.json_body["error"]["code"] == "internal_error"


def test_a_crash_in_the_console_is_a_500_page_and_is_logged(console: Console, logged: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN listing the toolbox crashes
    monkeypatch.setattr(toolbox, "page", _boom)
    # WHEN the toolbox page is opened
    answer = console.get("/console/tools")
    # THEN a 500 page names the request id that the log line carries
    failures = [line for line in lines(logged) if line["kind"] == "console.internal_error"]
    assert answer.status_code == 500
    assert failures and failures[0]["request_id"] in answer.body.decode()
    assert answer.headers["Content-Type"].startswith("text/html")


def test_a_crash_on_the_sign_in_page_is_a_500_page(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.identity import sessions

    monkeypatch.setattr(sessions, "read", _boom)
    answer = client.http.get("/console/sign-in")
    assert answer.status_code == 500 and "request id" in answer.body.decode()


# --- the log --------------------------------------------------------------------------------------

def test_log_lines_are_json_and_withhold_secrets(logged: Any) -> None:
    # WHEN events carry a field named like a secret, and text no encoder can write
    log.event("test.event", agent_id="ag1", api_key="sk-live", token="t", note="x" + SURROGATE)
    # THEN the line is JSON, the secrets withheld and the text scrubbed
    line = lines(logged)[-1]
    assert line == {"kind": "test.event", "agent_id": "ag1", "api_key": "[withheld]", "token": "[withheld]",
                    "note": "x\ufffd"}


def test_the_request_id_is_api_gateways_or_a_new_one() -> None:
    given = "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"
    assert log.request_id({"requestId": given}) == given
    assert log.request_id({}) != log.request_id(None)
