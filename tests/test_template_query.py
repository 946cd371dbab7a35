"""A key written into an HTTP tool's URL template (`?api_key=abc123&q={query}`, as many vendors
take theirs) is sent to the vendor as written, and shown nowhere else: not in a dry run's preview
(what an agent and a person see of a write), not in an approval's request shape, not in what
changed since a decision, not on the page a person approves from. The query's names and its
`{placeholders}` are shown, so a person still sees what goes where; the stored shape keeps the
values, so a changed key still asks a person again."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from chalicelib.net import urls
from tests.conftest import Admin, Console, Mcp, Vendor, tool_spec

KEY = "sk_live_templatekey_0123456789"
TOOL = {"vendor": "crm", "name": "add-contact"}


def _keyed(vendor: Vendor, query: str = f"api_key={KEY}&q={{query}}&mode=add", **overrides: Any) -> dict[str, Any]:
    """A write tool whose URL template carries a literal key beside a placeholder."""
    return tool_spec(**{
        **TOOL, "description": "Add a contact to the CRM.", "annotations": {"destructiveHint": False},
        "input_schema": {"type": "object", "properties": {"email": {"type": "string"}, "query": {"type": "string"}},
                         "required": ["email", "query"]},
        "request": {"method": "POST", "url": f"{vendor.url}/contacts?{query}"}, **overrides})


def _run(mcp: Mcp, **extra: Any) -> dict[str, Any]:
    return mcp.call("run_tool", {**TOOL, "input": {"email": "a@example.com", "query": "cats & dogs"}, **extra})


@pytest.mark.parametrize(("query", "shown"), [
    ("api_key=abc123&q={query}", "api_key=…&q={query}"),
    ("q={query}&sig=abc{query2}def", "q={query}&sig=…{query2}…"),  # a key around a placeholder
    ("{query}&debug&token=", "{query}&…&token=…"),  # a bare pair; an empty value is not told
    ("k=%7Bquery%7D", "k=…"),  # an encoded brace is a literal, not a placeholder
    ("a=b=c;key=d", "a=…"),  # what a vendor might read as a second pair stays in the hidden value
    ("api_key=abc123", "api_key=…"),  # an MCP server's URL, as before
    ("k=abc{query", "k=…"),  # an unbalanced brace is a literal (a tool's URL refuses it)
    ("k=}{query}{", "k=…{query}…"),
    ("k={{query}}", "k=…{query}…"),  # nested: the inner placeholder, the outer braces hidden
    ("k=%7B%7Bquery%7D%7D", "k=…"),
    ("k={sk_live_abc123}", "k={sk_live_abc123}"),  # a placeholder's name: an input field, never a sent value
    ("sk_live_abc123", "…"),  # a bare value
])
def test_a_query_is_shown_with_its_names_and_placeholders_only(query: str, shown: str) -> None:
    assert urls.redacted_query(query) == shown


def test_a_urls_user_info_and_fragment_are_hidden_with_its_query() -> None:
    shown = urls.redacted("https://user:pass@h.example/p?k=abc{query}#frag{query}")
    assert shown == "https://…@h.example/p?k=…{query}#…"


def test_a_dry_run_previews_the_input_but_not_the_templates_key(admin: Admin, mcp: Mcp, agent: dict[str, Any],
                                                                 vendor: Vendor) -> None:
    # GIVEN a person's write tool whose URL template carries a key
    admin.publish(**_keyed(vendor))
    # WHEN an agent dry-runs it
    result = _run(mcp, dryRun=True)
    # THEN the preview shows where the input goes and the template's names, not the key's value
    preview = result["structuredContent"]["preview"]
    assert KEY not in str(result)
    assert preview["url"] == f"{vendor.url}/contacts?api_key=…&q=cats%20%26%20dogs&mode=…"
    assert preview["body"] == {"email": "a@example.com"}
    # AND nothing reached the vendor; the run a person reads back holds no key either
    assert vendor.received == []
    runs = admin.call("GET", f"/v1/agents/{agent['id']}/runs")
    (run_id,) = [run["id"] for run in runs.json_body["items"]]
    stored = admin.call("GET", f"/v1/runs/{run_id}").json_body
    assert stored["result"]["preview"]["url"] == preview["url"]
    assert KEY not in runs.body.decode() + str(stored)


def test_the_key_is_still_sent_to_the_vendor_as_written(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    admin.publish(**_keyed(vendor, annotations={"readOnlyHint": False, "destructiveHint": False}))
    waiting = _run(mcp)["structuredContent"]
    assert admin.call("POST", f"/v1/approvals/{waiting['run_id']}/approve").status_code == 200
    sent = dict(parse_qsl(urlsplit(vendor.received[0]["path"]).query))
    assert sent == {"api_key": KEY, "q": "cats & dogs", "mode": "add"}


def test_approval_shapes_and_what_changed_show_no_key(admin: Admin, mcp: Mcp, agent: dict[str, Any],
                                                       console: Console, vendor: Vendor) -> None:
    # GIVEN a write tool with a key in its URL template, and a person's approval of a call
    admin.publish(**_keyed(vendor))
    waiting = _run(mcp)["structuredContent"]
    page = console.get(f"/console/approvals/{waiting['run_id']}").body.decode()
    assert admin.call("POST", f"/v1/approvals/{waiting['run_id']}/approve").status_code == 200
    # THEN the page a person approved from showed the query's names and placeholder, not the key
    assert KEY not in page and "api_key=…&amp;q={query}&amp;mode=…" in page
    # AND the agent's decisions show the request shape the same way
    decisions = admin.call("GET", f"/v1/agents/{agent['id']}/approvals")
    assert KEY not in decisions.body.decode()
    assert decisions.json_body["items"][0]["request_shape"]["query"] == "api_key=…&q={query}&mode=…"
    # WHEN a hostile new version changes only the key (to send the calls to another account)
    other = "sk_live_attackerkey_9876543210"
    admin.publish(**_keyed(vendor, query=f"api_key={other}&q={{query}}&mode=add"))
    again = _run(mcp)["structuredContent"]
    # THEN a person is asked again (the stored shape keeps the values), and is shown that the query
    # changed, without either key
    assert again["status"] == "awaiting_approval" and len(vendor.received) == 1
    pending = admin.call("GET", "/v1/approvals")
    changes = pending.json_body["items"][0]["since_decision"]["changes"]
    assert changes == {"query": {"from": "api_key=…&q={query}&mode=…", "to": "api_key=…&q={query}&mode=…"}}
    page = console.get(f"/console/approvals/{again['run_id']}").body.decode()
    for shown in (pending.body.decode(), page):
        assert KEY not in shown and other not in shown
    assert re.search(r"api_key=…&amp;q={query}&amp;mode=…", page)
