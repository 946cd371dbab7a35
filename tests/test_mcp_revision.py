"""The 2026-07-28 revision's newer parts at the HTTP level, each held to the text it implements
(docs/specification/2026-07-28/ in modelcontextprotocol/modelcontextprotocol):

- basic/transports/streamable-http, "Standard Request Headers": `Mcp-Method` on all requests,
  `Mcp-Name` (`params.name` or `params.uri`) on `tools/call`, `resources/read`, `prompts/get`;
  "Value Encoding": a value that is not plain ASCII travels as `=?base64?...?=` and "servers MUST
  decode an encoded `Mcp-Name` ... before comparing it"; "Server Validation": a missing header, a
  header that does not match the body, or one with invalid characters is "HTTP status `400 Bad
  Request`" with JSON-RPC error `-32020` (`HeaderMismatch`). Only modern requests are held to it:
  a 2025-11-25 request carries no `_meta` envelope and is not checked.
- server/tools, "Servers SHOULD return tools in a deterministic order (i.e., the same ordering
  across requests when the underlying set of tools has not changed)".
- basic/versioning, "Extension Negotiation": extensions are advertised in the `extensions` field
  of capabilities, "a map of extension identifiers to per-extension settings objects", each
  identifier with a mandatory prefix; "Extensions SHOULD document their expected fallback
  behavior".

The real SDK client's side of the same (it sends these headers and reads the extension) is
tests/e2e/test_mcp_client.py.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest

from chalicelib.base.causes import Cause
from chalicelib.mcp.metatools import META_TOOLS
from tests.conftest import LEGACY, MODERN, Admin, Mcp

WORKING_SET = "io.workset/working-set"
META_KEY = re.compile(r"(?:[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)*[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?/"
                      r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")  # basic/index, "_meta" key format


def modern_body(method: str, params: dict[str, Any] | None = None) -> bytes:
    envelope = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    return json.dumps({"jsonrpc": "2.0", "id": 7, "method": method,
                       "params": {**(params or {}), "_meta": envelope}}).encode()


def send(mcp: Mcp, method: str, params: dict[str, Any] | None, headers: dict[str, str]) -> Any:
    """A modern request with exactly `headers` (besides content type and key)."""
    sent = {"Content-Type": "application/json", "Authorization": f"Bearer {mcp.key}", **headers}
    return mcp.client.http.post("/mcp", headers=sent, body=modern_body(method, params))


def standard(method: str, name: str | None = None) -> dict[str, str]:
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


def mismatch(response: Any) -> str:
    """Asserts the answer is 400 with -32020 and the request's id; answers the message."""
    assert response.status_code == 400, response.body
    body = json.loads(response.body)
    assert body["error"]["code"] == -32020 and body["id"] == 7, body
    return body["error"]["message"]


# --- Mcp-Method / Mcp-Name ---------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "params", "headers"), [
    ("tools/list", None, {"MCP-Protocol-Version": MODERN}),  # Mcp-Method missing
    ("tools/list", None, standard("tools/call")),  # Mcp-Method another method
    ("tools/list", None, standard("Tools/List")),  # values are case-sensitive ("Case Sensitivity")
    ("tools/list", None, {"Mcp-Method": "tools/list"}),  # MCP-Protocol-Version missing
    ("tools/call", {"name": "find_tool", "arguments": {"query": "x"}}, standard("tools/call")),  # Mcp-Name missing
    ("tools/call", {"name": "find_tool", "arguments": {"query": "x"}}, standard("tools/call", "promote")),
    ("tools/call", {"name": "find_tool", "arguments": {"query": "x"}}, standard("tools/call", "FIND_TOOL")),
    ("resources/read", {"uri": "file:///a"}, standard("resources/read", "file:///b")),
    ("prompts/get", {"name": "a"}, standard("prompts/get")),
])
def test_a_missing_or_mismatched_standard_header_is_400_32020(mcp: Mcp, method: str, params: dict[str, Any] | None,
                                                              headers: dict[str, str]) -> None:
    # WHEN a modern request's standard headers are missing or say something else than its body
    message = mismatch(send(mcp, method, params, headers))
    # THEN it is refused with HeaderMismatch, before anything runs
    assert message.startswith("Header mismatch:")


def test_a_mismatched_tools_call_runs_nothing(admin: Admin, mcp: Mcp) -> None:
    # GIVEN a promotable tool
    admin.publish()
    # WHEN a promote's body is sent under another Mcp-Name (a gateway would route or authorize by it)
    response = send(mcp, "tools/call", {"name": "promote", "arguments": {"vendor": "unleashed",
                                                                         "name": "list-sales-orders"}},
                    standard("tools/call", "find_tool"))
    # THEN it is refused and the working set is unchanged
    mismatch(response)
    mcp.modern = True
    assert "unleashed__list-sales-orders" not in mcp.tool_names()


@pytest.mark.parametrize("name", ["find_tool", "=?base64?literal?="])
def test_an_encoded_mcp_name_is_decoded_before_comparing(mcp: Mcp, name: str) -> None:
    # GIVEN a name sent in the Base64 sentinel form ("Value Encoding"; a name that looks like the
    # sentinel itself must be encoded too)
    encoded = f"=?base64?{base64.b64encode(name.encode()).decode()}?="
    # WHEN the request carries it
    response = send(mcp, "tools/call", {"name": name, "arguments": {"query": "orders"}},
                    standard("tools/call", encoded))
    # THEN the header matched: the call got past the headers (an unknown tool is -32602, not -32020)
    body = json.loads(response.body)
    assert body.get("error", {}).get("code") != -32020, body


@pytest.mark.parametrize("header", [
    "=?base64?not base64!?=",  # a broken encoding
    "=?BASE64?ZmluZF90b29s?=",  # the markers are case-sensitive: this is plain text, not find_tool
    "=?base64?" + base64.b64encode(b"\xff\xfe").decode() + "?=",  # not UTF-8
])
def test_a_badly_encoded_mcp_name_is_a_mismatch(mcp: Mcp, header: str) -> None:
    mismatch(send(mcp, "tools/call", {"name": "find_tool", "arguments": {}}, standard("tools/call", header)))


@pytest.mark.parametrize("value", ["find_tool\x01", "find_tool\x7f", "find\u00e9_tool"])
def test_a_header_with_invalid_characters_is_a_mismatch_even_if_it_equals_the_body(mcp: Mcp, value: str) -> None:
    # GIVEN a name that a client must Base64-encode, sent plain (and equal to the body)
    response = send(mcp, "tools/call", {"name": value, "arguments": {}}, standard("tools/call", value))
    # THEN "A header value contains invalid characters" is a validation failure
    assert "characters" in mismatch(response)


def test_a_legacy_request_is_not_held_to_the_new_headers(mcp: Mcp) -> None:
    # GIVEN a 2025-11-25 request (no _meta envelope) whose Mcp-Method and Mcp-Name say other things
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                       "params": {"name": "find_tool", "arguments": {"query": "orders"}}})
    response = mcp.client.http.post("/mcp", body=body, headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {mcp.key}", "MCP-Protocol-Version": LEGACY,
        "Mcp-Method": "tools/list", "Mcp-Name": "promote"})
    # THEN it is answered as before: the headers belong to the newer revision only
    assert response.status_code == 200 and "result" in json.loads(response.body)


# --- a deterministic tools/list --------------------------------------------------------------------------

@pytest.mark.parametrize("modern", [False, True], ids=["legacy", "modern"])
def test_tools_list_is_the_same_list_in_the_same_order_until_the_set_changes(admin: Admin, mcp: Mcp,
                                                                             modern: bool) -> None:
    # GIVEN three tools promoted in an order that is neither alphabetical nor publication order
    for name in ("alpha", "bravo", "charlie"):
        admin.publish(vendor="zoo", name=name)
    mcp.modern = modern
    for name in ("charlie", "alpha", "bravo"):
        mcp.call("promote", {"vendor": "zoo", "name": name})
    # WHEN the list is asked for several times
    lists = [mcp.post("tools/list").json_body["result"]["tools"] for _ in range(3)]
    # THEN every answer is identical, definitions included: meta-tools first, then promotion order
    assert lists[0] == lists[1] == lists[2]
    names = [tool["name"] for tool in lists[0]]
    assert names == [*META_TOOLS, "zoo__charlie", "zoo__alpha", "zoo__bravo"]
    # AND a change moves only what changed: a tool demoted and promoted again goes to the end
    mcp.call("demote", {"vendor": "zoo", "name": "alpha"})
    mcp.call("promote", {"vendor": "zoo", "name": "alpha"})
    assert mcp.tool_names()[len(META_TOOLS):] == ["zoo__charlie", "zoo__bravo", "zoo__alpha"]


# --- the working set as an extension ---------------------------------------------------------------------

def extension_of(mcp: Mcp, modern: bool) -> dict[str, Any]:
    mcp.modern = modern
    if modern:
        capabilities = mcp.post("server/discover").json_body["result"]["capabilities"]
    else:
        capabilities = mcp.post("initialize", {"protocolVersion": LEGACY, "capabilities": {},
                                               "clientInfo": {"name": "t", "version": "1"}}).json_body["result"][
            "capabilities"]
    assert all(META_KEY.fullmatch(identifier) for identifier in capabilities["extensions"])
    assert capabilities["tools"] == {"listChanged": True}
    return capabilities["extensions"]


@pytest.mark.parametrize("modern", [False, True], ids=["initialize", "server/discover"])
def test_the_working_set_is_declared_as_an_extension(mcp: Mcp, modern: bool) -> None:
    # WHEN a client reads the server's capabilities, in either revision
    settings = extension_of(mcp, modern)[WORKING_SET]
    # THEN the list is said to vary by the request's authorization, never to be cached
    assert settings["listVariesBy"] == "authorization" and settings["listTtlMs"] == 0
    # AND what changes it: the meta-tools that do (each a real meta-tool), and every cause History records
    assert set(settings["changedByTools"]) == {"promote", "demote", "acquire"} <= set(META_TOOLS)
    assert settings["changeCauses"] == [cause.value for cause in Cause]
    # AND how a change is announced in each revision, and the fallback for clients that ignore it
    announced = settings["announcements"]
    assert announced["2026-07-28"]["method"] == "subscriptions/listen"
    assert announced["2026-07-28"]["notifications"] == {"toolsListChanged": True}
    assert announced["2025-11-25"]["notification"] == "notifications/tools/list_changed"
    assert "run_tool" in settings["fallback"]


def test_the_tasks_extension_stays_modern_only(mcp: Mcp) -> None:
    assert "io.modelcontextprotocol/tasks" not in extension_of(mcp, modern=False)
    assert "io.modelcontextprotocol/tasks" in extension_of(mcp, modern=True)
