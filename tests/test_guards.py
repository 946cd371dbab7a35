"""The accepted guard beyond MCP servers: an agent's own version that claims read-only, an OpenAPI
re-import that turns a POST into a GET, a person publishing directly (which accepts, recorded),
accepting a pending loosening through the API and the console (and every way it is refused), and
request shapes that keep earlier decisions matching."""

from __future__ import annotations

from typing import Any

import pytest
from chalice.test import Client

from chalicelib.identity import accounts
from tests.conftest import CSRF, Admin, Console, Mcp, Vendor, tool_spec

PURGE = {"vendor": "crm", "name": "purge"}
WRITE = {"readOnlyHint": False, "destructiveHint": True}
READ = {"readOnlyHint": True, "destructiveHint": False}
ACCEPT = "/v1/tools/crm/purge/accept-annotations"


def _purge(vendor: Vendor, read_only: bool, method: str = "GET", **overrides: Any) -> dict[str, Any]:
    return tool_spec(**{**PURGE, "description": "Purge the contacts.",
                        "input_schema": {"type": "object", "properties": {"who": {"type": "string"}}},
                        "annotations": {"readOnlyHint": read_only},
                        "request": {"method": method, "url": f"{vendor.url}/purge"}, **overrides})


@pytest.fixture
def allowed(admin: Admin, vendor: Vendor) -> Vendor:
    """The vendor's host on the account's keyless allow list, so agents may author tools for it."""
    answer = admin.call("PUT", "/v1/account/allowed-hosts", {"allowed_hosts": [vendor.url.removeprefix("http://")]})
    assert answer.status_code == 200, answer.body
    return vendor


def _acquire(mcp: Mcp, spec: dict[str, Any]) -> None:
    result = mcp.call("acquire", spec)
    assert result["isError"] is False, result


def _call(mcp: Mcp, *, dry_run: bool = False) -> dict[str, Any]:
    return mcp.call("run_tool", {**PURGE, "input": {"who": "everyone"}, "dryRun": dry_run})["structuredContent"]


def _tool(admin: Admin) -> dict[str, Any]:
    return admin.call("GET", "/v1/tools/crm/purge").json_body


def _pending_by_the_agent(mcp: Mcp, vendor: Vendor) -> None:
    """The agent's tool: v1 a write (a GET not claimed read-only), v2 the same claiming read-only."""
    _acquire(mcp, _purge(vendor, False))
    _acquire(mcp, _purge(vendor, True))


def test_an_agents_own_version_claiming_read_only_is_held_until_a_person_accepts_it(
        admin: Admin, mcp: Mcp, allowed: Vendor) -> None:
    # GIVEN an agent's write tool, and its v2 that claims read-only (the same GET request)
    _pending_by_the_agent(mcp, allowed)
    # THEN v2 is held to the write: the call waits, a dry run is a preview, the vendor sees nothing
    assert _call(mcp)["status"] == "awaiting_approval"
    assert _call(mcp, dry_run=True)["preview"]["method"] == "GET"
    assert allowed.received == []
    assert _tool(admin)["pending_annotations"]["accepted"] == WRITE
    # WHEN a person accepts, THEN reads run at once
    assert admin.call("POST", ACCEPT, {"version": 2}).json_body["changed"] is True
    assert _call(mcp) == {"orders": [{"id": 1}]}
    assert len(allowed.received) == 1


def test_an_agents_version_that_turns_a_post_into_a_get_stays_a_write(admin: Admin, mcp: Mcp,
                                                                      allowed: Vendor) -> None:
    # GIVEN an agent's POST tool, and its v2: a GET claiming read-only
    _acquire(mcp, _purge(allowed, False, "POST"))
    _acquire(mcp, _purge(allowed, True, "GET"))
    # THEN it is still a write: the call waits, a dry run sends nothing
    assert _call(mcp)["status"] == "awaiting_approval"
    assert "preview" in _call(mcp, dry_run=True)
    assert allowed.received == []
    assert _tool(admin)["versions"][-1]["accepted_annotations"] == WRITE


def test_an_openapi_reimport_that_turns_a_post_into_a_get_captures_nothing(admin: Admin, mcp: Mcp,
                                                                           vendor: Vendor) -> None:
    document = ("openapi: 3.0.3\ninfo: {title: Records, version: '1'}\nservers: [{url: 'SERVER'}]\npaths:\n"
                "  /records/wipe:\n    METHOD:\n      operationId: wipeRecords\n      summary: Wipe the records\n"
                ).replace("SERVER", vendor.url)

    def reimport(method: str) -> dict[str, tuple[str, str]]:
        answer = admin.call("POST", "/v1/imports/openapi", {"vendor": "records",
                                                            "document": document.replace("METHOD", method)})
        assert answer.status_code == 200, answer.body
        return {line["key"]: (line["name"], line["outcome"]) for line in answer.json_body["tools"]}

    # GIVEN the document's POST, a write an agent promoted and whose call waits
    assert reimport("post") == {"POST /records/wipe": ("wipe-records", "published")}
    mcp.call("promote", {"vendor": "records", "name": "wipe-records"})
    assert mcp.call("records__wipe-records", {})["structuredContent"]["status"] == "awaiting_approval"
    listed = mcp.tool_names()
    # WHEN the document turns it into a GET (read-only by the import's rule)
    outcomes = reimport("get")
    # THEN the GET is another operation, so another tool: it cannot take the write's name, version
    # or guard, and it is in nobody's working set; the write is unavailable and still a write
    (name, outcome), = (value for key, value in outcomes.items() if key == "GET /records/wipe")
    assert outcome == "published" and name != "wipe-records"
    assert outcomes["POST /records/wipe"] == ("wipe-records", "unavailable")
    old = admin.call("GET", "/v1/tools/records/wipe-records").json_body["versions"]
    assert [(v["version"], v["accepted_annotations"]) for v in old] == [(1, WRITE)]
    assert mcp.call("records__wipe-records", {})["structuredContent"]["error"]["code"] == "tool_unavailable"
    assert mcp.tool_names() == listed
    assert vendor.received == []


def test_a_person_publishing_directly_accepts_its_hints_and_it_is_recorded(admin: Admin, mcp: Mcp,
                                                                           allowed: Vendor) -> None:
    # GIVEN an agent's tool with a pending read-only claim
    _pending_by_the_agent(mcp, allowed)
    # WHEN a person publishes the same definition through the admin API (v3)
    admin.publish(**_purge(allowed, True))
    # THEN its hints take effect at once, recorded as accepted by that person's token
    newest = _tool(admin)["versions"][-1]
    assert (newest["version"], newest["published_by"], newest["accepted_annotations"]) == (3, "admin", READ)
    assert newest["accepted_by"] == accounts.admin_actor(admin.token) and newest["accepted_at"]
    assert _call(mcp) == {"orders": [{"id": 1}]}
    # AND a later version that loosens nothing records no acceptance
    admin.publish(**_purge(allowed, True, description="Purge the contacts, now documented."))
    assert _tool(admin)["versions"][-1]["accepted_by"] is None
    assert _tool(admin)["pending_annotations"] is None


def test_accepting_a_version_a_newer_one_replaced_is_a_conflict_and_changes_nothing(admin: Admin, mcp: Mcp,
                                                                                    allowed: Vendor) -> None:
    _pending_by_the_agent(mcp, allowed)
    _acquire(mcp, _purge(allowed, True, description="Purge the contacts (v3)."))
    stale = admin.call("POST", ACCEPT, {"version": 2})
    assert (stale.status_code, stale.json_body["error"]["code"], stale.json_body["error"]["field"]) == (
        409, "conflict", "version")
    assert [v["accepted_by"] for v in _tool(admin)["versions"]] == [None, None, None]
    assert _call(mcp)["status"] == "awaiting_approval"
    assert allowed.received == []


def test_another_accounts_tool_is_not_found_and_stays_pending(admin: Admin, other_admin: Admin, mcp: Mcp,
                                                              allowed: Vendor) -> None:
    _pending_by_the_agent(mcp, allowed)
    answer = other_admin.call("POST", ACCEPT, {"version": 2})
    assert (answer.status_code, answer.json_body["error"]["code"]) == (404, "tool_not_found")
    assert _tool(admin)["pending_annotations"] is not None


def test_accepting_when_nothing_is_pending_answers_no_change(admin: Admin, vendor: Vendor) -> None:
    admin.publish(**_purge(vendor, False))
    answer = admin.call("POST", ACCEPT, {"version": 1})
    assert answer.status_code == 200, answer.body
    assert answer.json_body["changed"] is False and answer.json_body["pending_annotations"] is None
    assert answer.json_body["versions"][-1]["accepted_by"] is None


@pytest.mark.parametrize(("body", "status"), [
    ({"version": 9}, 404), ({"version": 0}, 404), ({"version": "1"}, 400), ({"version": True}, 400), ({}, 400),
    ({"version": 1, "also": 2}, 400), ([1], 400),
])
def test_a_bad_accept_is_refused_naming_the_version(admin: Admin, vendor: Vendor, body: Any, status: int) -> None:
    admin.publish(**_purge(vendor, False))
    answer = admin.call("POST", ACCEPT, body)
    assert (answer.status_code, answer.json_body["error"].get("field")) == (status, "version")
    assert admin.call("POST", "/v1/tools/crm/nothing/accept-annotations", {"version": 1}).status_code == 404


def test_the_console_shows_a_pending_loosening_and_a_person_accepts_it_with_the_form(
        admin: Admin, client: Client, mcp: Mcp, console: Console, allowed: Vendor) -> None:
    _pending_by_the_agent(mcp, allowed)
    # GIVEN the tool's page: the notice, what is enforced and claimed, the Accept form for v2
    page = console.get("/console/tools/crm/purge").body.decode()
    assert 'id="pending-annotations"' in page and "Accept version 2" in page
    assert 'name="version" value="2"' in page and "looser hints pending" in page
    # WHEN the form comes without the session's CSRF token, THEN nothing is accepted
    assert console.post("/console/tools/crm/purge/accept-annotations", {"version": "2"}, csrf="x").status_code == 403
    assert _tool(admin)["pending_annotations"] is not None
    # WHEN a person sends it for a version they did not see, THEN it is a conflict
    assert console.post("/console/tools/crm/purge/accept-annotations", {"version": "1"}).status_code == 409
    # WHEN they send it for the version they saw
    answer = console.post("/console/tools/crm/purge/accept-annotations", {"version": "2"})
    # THEN it is accepted, recorded with the console's signed-in token, and shown in the versions list
    assert answer.status_code == 303 and "done=accepted" in answer.headers["Location"]
    newest = _tool(admin)["versions"][-1]
    assert newest["accepted_by"] == accounts.admin_actor(admin.token)
    page = console.get("/console/tools/crm/purge?done=accepted").body.decode()
    assert 'id="pending-annotations"' not in page and f"accepted by {newest['accepted_by']}" in page
    assert _call(mcp) == {"orders": [{"id": 1}]}
    assert CSRF.search(page)  # every form on it still carries the token


def test_a_destructive_writes_request_shape_is_what_it_was_before_guards(admin: Admin, agent: dict[str, Any],
                                                                         mcp: Mcp, vendor: Vendor) -> None:
    # GIVEN approvals for a destructive write (MCP's default hints) and for a non-destructive one
    admin.publish(**_purge(vendor, False, "POST", annotations={}))
    admin.publish(**_purge(vendor, False, "POST", name="tidy", annotations={"destructiveHint": False}))
    # (a destructive write asks on every call unless a person lets its approvals stand: issue 26)
    assert admin.call("PUT", "/v1/tools/crm/purge/approval-policy", {"policy": "first_call"}).status_code == 200
    for name in ("purge", "tidy"):
        run_id = mcp.call("run_tool", {"vendor": "crm", "name": name, "input": {}})["structuredContent"]["run_id"]
        assert admin.call("POST", f"/v1/approvals/{run_id}/approve").status_code == 200
    shapes = {d["name"]: d["request_shape"] for d in
              admin.call("GET", f"/v1/agents/{agent['id']}/approvals").json_body["items"]}
    # THEN the destructive write's shape has no guard keys (decisions stored before guards match it
    # still); the non-destructive one says so
    before = {"method", "scheme", "host", "port", "path", "query", "headers", "connection"}
    assert set(shapes["purge"]) == before
    assert set(shapes["tidy"]) == before | {"destructiveHint"} and shapes["tidy"]["destructiveHint"] is False
