"""A credential pasted into an HTTP tool's literal headers (`X-Api-Key: abc123`, `Cookie: ...`,
`X-Custom: Bearer ...`) is sent to the vendor as written, and shown nowhere else: not in a dry
run's preview (what an agent and a person see of a write, stored in the run), not in an
approval's request shape, not in what changed since a decision, not on the page a person approves
from, not in a log line. Other headers are shown (`X-HTTP-Method-Override: DELETE` is what a
person must see); the stored shape keeps every value, so a changed key still asks a person again.
The header twin of test_template_query.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chalicelib.base import sensitive
from chalicelib.catalog import toolbox
from tests.conftest import Admin, Console, Mcp, Vendor, tool_spec

KEY = "sk_live_headerkey_0123456789"
OTHER = "sk_live_attackerkey_9876543210"
TOOL = {"vendor": "crm", "name": "add-contact"}
HUGE = "sk_live_" + "x" * 992  # the longest value a header may have (1,000 characters)


def _keyed(vendor: Vendor, headers: dict[str, str] | None = None, **overrides: Any) -> dict[str, Any]:
    """A write tool whose literal headers carry a key beside a header a person must see."""
    return tool_spec(**{
        **TOOL, "description": "Add a contact to the CRM.", "annotations": {"destructiveHint": False},
        "input_schema": {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
        "request": {"method": "POST", "url": f"{vendor.url}/contacts",
                    "headers": headers if headers is not None else {"X-Api-Key": KEY,
                                                                    "X-HTTP-Method-Override": "PUT"}},
        **overrides})


def _run(mcp: Mcp, **extra: Any) -> dict[str, Any]:
    return mcp.call("run_tool", {**TOOL, "input": {"email": "a@example.com"}, **extra})


@pytest.mark.parametrize(("name", "value", "shown"), [
    ("X-Api-Key", "abc123", "…"),
    ("x-aPi-KeY", "abc123", "…"),  # odd casing
    ("Authorization", "Bearer sk_live_abc", "…"),  # refused at publish; a stored one predates the check
    ("Proxy-Authorization", "Basic dTpw", "…"),
    ("Cookie", "sid=abc", "…"),
    ("X-Auth-Token", "abc", "…"),
    ("X-Client-Secret", "abc", "…"),
    ("X-Passwd", "abc", "…"),
    ("X-Password", "abc", "…"),
    ("X-Signature", "abc", "…"),
    ("X-Session-Id", "abc", "…"),
    ("X-Credential", "abc", "…"),
    ("X-Api-K\u0435y", "abc123", "…"),  # a Cyrillic е: a look-alike says nothing Workset can read
    ("X-Api-Key ", "abc123", "…"),  # a trailing space: not a plain name
    ("X-Custom", "Bearer abc123", "…"),  # the value's shape says it is a credential
    ("X-Custom", "wsk_abc123", "…"),  # a Workset key
    ("X-Custom", "mode=fast; token=abc123", "…"),
    ("X-Custom", "a=token=abc123", "…"),  # a name after another pair's `=`
    ("X-Custom", "v-" * 500, "v-" * 500),  # long, no credential: shown (and read once, not once a `-`)
    ("X-Custom", "key-" * 250, "key-" * 250),  # a secret word in a value that sets nothing
    ("X-Api-Key", HUGE, "…"),
    ("X-HTTP-Method-Override", "DELETE", "DELETE"),  # what a person must see
    ("X-Tenant", "nz", "nz"),
    ("Accept", "application/vnd.crm+json", "application/vnd.crm+json"),
    ("X-Template", "{email}", "{email}"),  # a header is sent as written: braces are text, kept where shown
])
def test_a_header_is_shown_unless_its_name_or_value_says_credential(name: str, value: str, shown: str) -> None:
    assert sensitive.shown_header(name, value) == shown


def test_a_stored_shape_with_a_look_alike_header_is_shown_without_its_value() -> None:
    # GIVEN a request shape stored before names were checked, one header a look-alike of a key's
    shape = {"method": "POST", "query": "", "headers": {"x-api-k\u0435y": KEY, "x-tenant": "nz"}}
    # THEN what a person is shown hides that value, keeps the other, and the stored shape is unchanged
    assert toolbox.shown_shape(shape)["headers"] == {"x-api-k\u0435y": "…", "x-tenant": "nz"}
    assert shape["headers"]["x-api-k\u0435y"] == KEY


@pytest.mark.parametrize("name", ["X-Api-Key ", " X-Api-Key", "X-Api-K\u0435y", "X-Api-\uff2bey", "X-Api-Key\u200b",
                                  "X-Api_Key", "Cookie:", "proxy-authorization", "AUTHORIZATION"])
def test_a_hostile_header_name_is_refused_at_publish(admin: Admin, vendor: Vendor, name: str) -> None:
    # WHEN a definition names a header with a space, a look-alike letter, an invisible one, or a
    # credential's own header
    response = admin.call("POST", "/v1/tools", _keyed(vendor, {name: KEY}))
    # THEN it is refused naming the headers, and nothing is stored
    assert response.status_code == 400, response.body
    assert response.json_body["error"]["field"].startswith("request.headers")
    assert admin.call("GET", "/v1/tools").json_body["items"] == []


@pytest.mark.parametrize(("headers", "shown"), [
    ({"X-Api-Key": KEY, "X-HTTP-Method-Override": "PUT"}, {"X-Api-Key": "…", "X-HTTP-Method-Override": "PUT"}),
    ({"x-aPi-KEY": KEY}, {"x-aPi-KEY": "…"}),
    ({"Cookie": f"session={KEY}"}, {"Cookie": "…"}),
    ({"X-Custom": f"Bearer {KEY}"}, {"X-Custom": "…"}),
    ({"X-Vendor-Signature": HUGE}, {"X-Vendor-Signature": "…"}),
])
def test_a_dry_run_previews_the_headers_but_not_a_pasted_key(admin: Admin, mcp: Mcp, agent: dict[str, Any],
                                                             vendor: Vendor, logged: Any, headers: dict[str, str],
                                                             shown: dict[str, str]) -> None:
    # GIVEN a person's write tool whose literal headers carry a key
    admin.publish(**_keyed(vendor, headers))
    # WHEN an agent dry-runs it
    result = _run(mcp, dryRun=True)
    # THEN the preview shows every header's name, the others' values, and not the key
    preview = result["structuredContent"]["preview"]
    secret = KEY if KEY in json.dumps(headers) else HUGE
    assert secret not in json.dumps(result)
    assert preview["headers"] == {**shown, "Content-Type": "application/json", "Accept": "application/json"}
    # AND nothing reached the vendor; the run a person reads back and the log hold no key either
    assert vendor.received == []
    runs = admin.call("GET", f"/v1/agents/{agent['id']}/runs")
    (run_id,) = [run["id"] for run in runs.json_body["items"]]
    stored = admin.call("GET", f"/v1/runs/{run_id}").json_body
    assert stored["result"]["preview"]["headers"] == preview["headers"]
    assert secret not in runs.body.decode() + json.dumps(stored) + logged.text


def test_input_filled_headers_and_the_connections_keep_how_they_were_shown(admin: Admin, mcp: Mcp,
                                                                           vendor: Vendor) -> None:
    # GIVEN a tool with a connection's header key and an input-filled header named like a key
    host = vendor.url.split("//", 1)[1]
    connection = admin.call("POST", "/v1/connections", {
        "vendor": "crm", "hosts": [host], "auth": {"type": "header", "name": "X-Vendor-Key", "value": OTHER}}).json_body
    admin.publish(**_keyed(vendor, {"X-Api-Key": KEY}, connection=connection["id"], input_schema={
        "type": "object", "properties": {"email": {"type": "string"}, "idem": {"type": "string"}},
        "required": ["email", "idem"]}, request={
            "method": "POST", "url": f"{vendor.url}/contacts", "headers": {"X-Api-Key": KEY},
            "params": [{"field": "idem", "name": "Idempotency-Key", "in": "header"}]}))
    # WHEN an agent dry-runs it
    result = mcp.call("run_tool", {**TOOL, "input": {"email": "a@example.com", "idem": "call-7"}, "dryRun": True})
    headers = result["structuredContent"]["preview"]["headers"]
    # THEN the connection's value is redacted as before, the input's shown as the input is, the template's hidden
    assert headers["X-Vendor-Key"] == "[redacted]" and headers["Idempotency-Key"] == "call-7"
    assert headers["X-Api-Key"] == "…"
    assert KEY not in json.dumps(result) and OTHER not in json.dumps(result)


def test_the_key_is_still_sent_to_the_vendor_as_written(admin: Admin, mcp: Mcp, vendor: Vendor, logged: Any) -> None:
    admin.publish(**_keyed(vendor))
    waiting = _run(mcp)["structuredContent"]
    assert admin.call("POST", f"/v1/approvals/{waiting['run_id']}/approve").status_code == 200
    sent = vendor.received[0]["headers"]
    assert sent["X-Api-Key"] == KEY and sent["X-HTTP-Method-Override"] == "PUT"
    assert KEY not in logged.text


def test_approval_shapes_and_what_changed_show_no_key(admin: Admin, mcp: Mcp, agent: dict[str, Any],
                                                       console: Console, vendor: Vendor) -> None:
    # GIVEN a write tool with a key in its headers, and a person's approval of a call
    admin.publish(**_keyed(vendor))
    waiting = _run(mcp)["structuredContent"]
    page = console.get(f"/console/approvals/{waiting['run_id']}").body.decode()
    assert admin.call("POST", f"/v1/approvals/{waiting['run_id']}/approve").status_code == 200
    assert KEY not in page
    # THEN the agent's decisions show the header names, the key's value hidden and the override's shown
    decisions = admin.call("GET", f"/v1/agents/{agent['id']}/approvals")
    assert KEY not in decisions.body.decode()
    assert decisions.json_body["items"][0]["request_shape"]["headers"] == {"x-api-key": "…",
                                                                            "x-http-method-override": "PUT"}
    # WHEN a hostile new version changes only the key (to send the calls to another account)
    admin.publish(**_keyed(vendor, {"X-API-KEY": OTHER, "X-HTTP-Method-Override": "PUT"}))
    again = _run(mcp)["structuredContent"]
    # THEN a person is asked again (the stored shape keeps the values), and is shown that the
    # headers changed, without either key, and told why both sides read alike
    assert again["status"] == "awaiting_approval" and len(vendor.received) == 1
    pending = admin.call("GET", "/v1/approvals")
    changes = pending.json_body["items"][0]["since_decision"]["changes"]
    hidden = {"x-api-key": "…", "x-http-method-override": "PUT"}
    assert changes == {"headers": {"from": hidden, "to": hidden}}
    page = console.get(f"/console/approvals/{again['run_id']}").body.decode()
    for shown in (pending.body.decode(), page):
        assert KEY not in shown and OTHER not in shown
    assert 'id="changed-since"' in page and 'id="hidden-values"' in page


def test_a_changed_override_is_shown_in_full(admin: Admin, mcp: Mcp, console: Console, vendor: Vendor) -> None:
    # GIVEN an approved tool that overrides its method to PUT
    admin.publish(**_keyed(vendor))
    waiting = _run(mcp)["structuredContent"]
    assert admin.call("POST", f"/v1/approvals/{waiting['run_id']}/approve").status_code == 200
    # WHEN a new version overrides it to DELETE, the key unchanged
    admin.publish(**_keyed(vendor, {"X-Api-Key": KEY, "X-HTTP-Method-Override": "DELETE"}))
    again = _run(mcp)["structuredContent"]
    # THEN a person is shown PUT becoming DELETE, and still not the key
    changes = admin.call("GET", "/v1/approvals").json_body["items"][0]["since_decision"]["changes"]
    assert changes == {"headers": {"from": {"x-api-key": "…", "x-http-method-override": "PUT"},
                                   "to": {"x-api-key": "…", "x-http-method-override": "DELETE"}}}
    page = console.get(f"/console/approvals/{again['run_id']}").body.decode()
    assert "DELETE" in page and KEY not in page


def test_a_log_line_withholds_what_the_same_words_name(logged: Any) -> None:
    from chalicelib.base import log
    from tests.conftest import log_lines

    # WHEN a line carries fields named with any of the words, and an error quotes a session's value
    log.event("test.words", x_signature="s1", session_ref="s2", auth_header="s3", tenant="nz")
    log.failure("test.failure", ValueError(f"refused: session={KEY}"))
    # THEN those values are withheld, the others kept
    words, failure = log_lines(logged, "test.words")[0], log_lines(logged, "test.failure")[0]
    assert (words["x_signature"], words["session_ref"], words["auth_header"], words["tenant"]) == (
        "[withheld]", "[withheld]", "[withheld]", "nz")
    assert failure["message"] == "refused: session=[withheld]" and KEY not in logged.text
