"""Trust boundaries, tried as an attacker would: a hostile agent (acquire, calls, dry runs), a
hostile tool definition and a hostile vendor answer. Each test sends the hostile thing, checks
what comes back, then checks what must be unchanged (no vendor request, no stored version, no
lease left, other agents still served)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.store import agents as agent_store
from tests.conftest import Admin, Mcp, Vendor, log_lines, tool_spec

ORDER = {"vendor": "crm", "name": "add-contact"}


def _host(vendor: Vendor) -> str:
    return vendor.url.removeprefix("http://")


def _allow(admin: Admin, *entries: str) -> None:
    response = admin.call("PUT", "/v1/account/allowed-hosts", {"allowed_hosts": list(entries)})
    assert response.status_code == 200, response.body


def _agent(admin: Admin, client: Client, name: str) -> tuple[dict[str, Any], Mcp]:
    created = admin.create_agent(name)
    return created, Mcp(client, created["api_key"])


def _write_tool(vendor: Vendor, **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        **ORDER, "description": "Add a contact to the CRM.", "annotations": {"destructiveHint": False},
        "input_schema": {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
        "request": {"method": "POST", "url": f"{vendor.url}/contacts"},
    }
    return tool_spec(**{**fields, **overrides})


def _connection(admin: Admin, vendor: Vendor, token: str = "sk_live_supersecret_0123456789", **extra: Any) -> str:
    body = {"vendor": "crm", "auth": {"type": "bearer", "token": token}, "hosts": [_host(vendor)], **extra}
    response = admin.call("POST", "/v1/connections", body)
    assert response.status_code == 201, response.body
    return response.json_body["id"]


def _approved(admin: Admin, mcp: Mcp, arguments: dict[str, Any] | None = None) -> None:
    """Call the write tool once and have a person approve it."""
    waiting = mcp.call("run_tool", {**ORDER, "input": arguments or {"email": "a@example.com"}})
    run_id = waiting["structuredContent"]["run_id"]
    assert admin.call("POST", f"/v1/approvals/{run_id}/approve").status_code == 200


def _error(result: dict[str, Any]) -> dict[str, Any]:
    assert result["isError"] is True, result
    return result["structuredContent"]["error"]


def _versions(admin: Admin, vendor: str = "crm", name: str = "add-contact") -> list[dict[str, Any]]:
    return admin.call("GET", f"/v1/tools/{vendor}/{name}").json_body["versions"]


# 1. An agent cannot rewrite a tool someone else approved ------------------------------------------


def test_an_agent_cannot_publish_a_version_of_an_admins_tool(admin: Admin, client: Client, mcp: Mcp,
                                                              vendor: Vendor) -> None:
    # GIVEN an admin's write tool, approved for a victim agent
    _allow(admin, _host(vendor))
    admin.publish(**_write_tool(vendor))
    _, victim = _agent(admin, client, "victim")
    _approved(admin, victim)
    # WHEN another agent re-points it at a destructive request
    attack = mcp.call("acquire", _write_tool(vendor, request={"method": "DELETE", "url": f"{vendor.url}/contacts/all"},
                                             annotations={"destructiveHint": True}))
    # THEN it is refused, naming the owner, and nothing is stored or sent
    error = _error(attack)
    assert error["code"] == "forbidden" and "a person (admin)" in error["message"]
    assert len(_versions(admin)) == 1
    victim.call("run_tool", {**ORDER, "input": {"email": "b@example.com"}})
    assert [r["method"] + " " + r["path"] for r in vendor.received] == ["POST /contacts", "POST /contacts"]


def test_an_agent_cannot_publish_a_version_of_another_agents_tool(admin: Admin, client: Client, mcp: Mcp,
                                                                   vendor: Vendor) -> None:
    _allow(admin, _host(vendor))
    author, author_mcp = _agent(admin, client, "author")
    assert author_mcp.call("acquire", _write_tool(vendor))["isError"] is False
    error = _error(mcp.call("acquire", _write_tool(vendor, description="Mine now.")))
    assert error["code"] == "forbidden" and author["id"] in error["message"]
    assert [v["published_by"] for v in _versions(admin)] == [author["id"]]


def test_an_agent_may_version_its_own_tool_and_an_admin_any_tool(admin: Admin, client: Client, mcp: Mcp,
                                                                  vendor: Vendor) -> None:
    _allow(admin, _host(vendor))
    author, author_mcp = _agent(admin, client, "author")
    author_mcp.call("acquire", _write_tool(vendor))
    assert author_mcp.call("acquire", _write_tool(vendor, description="v2"))["structuredContent"]["version"] == 2
    admin.publish(**_write_tool(vendor, description="v3 by a person"))
    assert [v["published_by"] for v in _versions(admin)] == [author["id"], author["id"], "admin"]
    # the admin's version makes it the admin's tool: its author may no longer change it
    assert _error(author_mcp.call("acquire", _write_tool(vendor, description="v4")))["code"] == "forbidden"


def test_a_version_that_changes_the_request_asks_again_and_shows_what_changed(admin: Admin, mcp: Mcp,
                                                                               vendor: Vendor) -> None:
    # GIVEN an approved write tool
    admin.publish(**_write_tool(vendor))
    _approved(admin, mcp)
    # WHEN an admin publishes a version that sends it elsewhere
    admin.publish(**_write_tool(vendor, request={"method": "PUT", "url": f"{vendor.url}/contacts/bulk"}))
    again = mcp.call("run_tool", {**ORDER, "input": {"email": "c@example.com"}})
    # THEN a person is asked again, and the approval list shows what changed since the approved version
    assert again["structuredContent"]["status"] == "awaiting_approval"
    assert len(vendor.received) == 1
    pending = admin.call("GET", "/v1/approvals").json_body["items"]
    since = pending[0]["since_decision"]
    assert (since["decision"], since["version"]) == ("allow", 1)
    assert since["changes"] == {"method": {"from": "POST", "to": "PUT"},
                                "path": {"from": "/contacts", "to": "/contacts/bulk"}}


@pytest.mark.parametrize("change", [
    {"request": {"method": "POST", "url": "{url}/contacts", "headers": {"X-HTTP-Method-Override": "DELETE"}}},
    {"request": {"method": "POST", "url": "{url}/contacts?mode=purge"}},
    {"request": {"method": "POST", "url": "http://localhost:{port}/contacts"}},
])
def test_every_part_of_the_request_shape_is_covered(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                    change: dict[str, Any]) -> None:
    admin.publish(**_write_tool(vendor))
    _approved(admin, mcp)
    port = vendor.url.rsplit(":", 1)[1]
    request = json.loads(json.dumps(change["request"]).replace("{url}", vendor.url).replace("{port}", port))
    admin.publish(**_write_tool(vendor, request=request))
    again = mcp.call("run_tool", {**ORDER, "input": {"email": "c@example.com"}})
    assert again["structuredContent"]["status"] == "awaiting_approval"
    assert len(vendor.received) == 1


def test_a_new_connection_is_a_new_request_shape(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    first = _connection(admin, vendor, token="first-token-0000")
    admin.publish(**_write_tool(vendor, connection=first))
    _approved(admin, mcp)
    second = _connection(admin, vendor, token="second-token-000")
    admin.publish(**_write_tool(vendor, connection=second))
    assert mcp.call("run_tool", {**ORDER, "input": {"email": "d@example.com"}})["structuredContent"]["status"] \
        == "awaiting_approval"
    assert len(vendor.received) == 1


def test_the_console_shows_the_publisher_of_each_version(admin: Admin, client: Client, mcp: Mcp,
                                                         vendor: Vendor) -> None:
    from tests.test_console import Console

    _allow(admin, _host(vendor))
    mcp.call("acquire", _write_tool(vendor))
    admin.publish(**_write_tool(vendor, description="v2 by a person"))
    console = Console(client)
    console.sign_in(admin.token)
    page = console.get("/console/tools/crm/add-contact").body.decode()
    assert 'class="publisher">agent <a href="/console/agents/' in page and ">hermes</a>" in page
    assert 'class="publisher">a person (admin)' in page


# 2. A dry run reaches the vendor only for read-only tools -------------------------------------------


def test_a_dry_run_of_a_write_tool_that_uses_get_answers_a_preview(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    # GIVEN a write tool (not read-only) whose request is a GET
    admin.publish(**_write_tool(vendor, request={"method": "GET", "url": f"{vendor.url}/contacts/delete"}))
    # WHEN the agent dry-runs it
    result = mcp.call("run_tool", {**ORDER, "input": {"email": "e@example.com"}, "dryRun": True})
    # THEN it answers the preview and the vendor sees nothing
    assert result["structuredContent"]["preview"]["method"] == "GET"
    assert vendor.received == []


def test_a_dry_run_of_a_read_only_tool_reaches_the_vendor(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    admin.publish(**_write_tool(vendor, annotations={"readOnlyHint": True},
                                request={"method": "GET", "url": f"{vendor.url}/contacts"}))
    result = mcp.call("run_tool", {**ORDER, "input": {"email": "e@example.com"}, "dryRun": True})
    assert result["structuredContent"] == {"orders": [{"id": 1}]}
    assert len(vendor.received) == 1


# 5. Headers and where a connection may go ---------------------------------------------------------


@pytest.mark.parametrize("header", ["Host", "Content-Length", "Transfer-Encoding", "Connection", "TE", "Upgrade",
                                    "Expect", "Proxy-Authorization", "Keep-Alive", "authorization", "X-Dup"])
def test_hop_by_hop_and_framing_headers_are_refused_at_publish(admin: Admin, vendor: Vendor, header: str) -> None:
    headers = {header: "x"} if header != "X-Dup" else {"X-Dup": "1", "x-dup": "2"}
    response = admin.call("POST", "/v1/tools", _write_tool(vendor, request={
        "method": "POST", "url": f"{vendor.url}/contacts", "headers": headers}))
    assert response.status_code == 400
    assert response.json_body["error"]["field"].startswith("request.headers")
    assert admin.call("GET", "/v1/tools").json_body["items"] == []


def test_a_tool_may_not_set_the_header_its_connection_injects(admin: Admin, vendor: Vendor) -> None:
    response = admin.call("POST", "/v1/connections", {"vendor": "crm", "hosts": [_host(vendor)],
                                                      "auth": {"type": "header", "name": "X-Api-Key", "value": "k"}})
    connection = response.json_body["id"]
    refused = admin.call("POST", "/v1/tools", _write_tool(vendor, connection=connection, request={
        "method": "POST", "url": f"{vendor.url}/contacts", "headers": {"x-api-key": "attacker"}}))
    assert refused.status_code == 400 and refused.json_body["error"]["field"] == "request.headers"


@pytest.mark.parametrize(("url", "allow_http"), [
    ("http://{host}/contacts", False),            # the right host and port, but clear text on a real deployment
    ("https://{hostname}:8443/contacts", False),  # the right host, another port
    ("http://{hostname}:1/contacts", True),       # another port, even where http is allowed
])
def test_a_connections_hosts_bind_scheme_and_port(admin: Admin, vendor: Vendor, settings_env, url: str,
                                                  allow_http: bool) -> None:
    connection = _connection(admin, vendor)
    settings_env(WORKSET_ALLOW_PRIVATE_NETWORK="true" if allow_http else "false")
    target = url.format(host=_host(vendor), hostname="127.0.0.1")
    response = admin.call("POST", "/v1/tools", _write_tool(vendor, connection=connection,
                                                           request={"method": "POST", "url": target}))
    assert response.status_code == 400 and response.json_body["error"]["field"] == "connection"


# 7. A definition that publishes must run ------------------------------------------------------------


@pytest.mark.parametrize("url", [
    "{base}/a/{}", "{base}/a/{0}", "{base}/a/{email:d}", "{base}/a/{email.upper}", "{base}/a/{email:>30000000}",
    "{base}/a/{email!r}", "{base}/a/{email", "{base}/a/}", "http://127.0.0.1:99999/a", "http://127.0.0.1:0/a",
    "http://user:pw@127.0.0.1/a", "{base}/a b", "{base}/a\r\nX: y", "{base}/a#frag", "{base}/a/{optional}",
])
def test_url_templates_that_could_not_run_are_refused_at_publish(admin: Admin, vendor: Vendor, url: str) -> None:
    schema = {"type": "object", "properties": {"email": {"type": "string"}, "optional": {"type": "string"}},
              "required": ["email"]}
    response = admin.call("POST", "/v1/tools", _write_tool(
        vendor, input_schema=schema, request={"method": "POST", "url": url.replace("{base}", vendor.url)}))
    assert response.status_code == 400, response.body
    assert response.json_body["error"]["field"] == "request.url"
    assert admin.call("GET", "/v1/tools").json_body["items"] == []


@pytest.mark.parametrize("value", ["caf\u00e9", "\u4e2d", "a\tb"])
def test_header_values_that_cannot_be_sent_are_refused_at_publish(admin: Admin, vendor: Vendor, value: str) -> None:
    response = admin.call("POST", "/v1/tools", _write_tool(vendor, request={
        "method": "POST", "url": f"{vendor.url}/contacts", "headers": {"X-Tag": value}}))
    assert response.status_code == 400 and response.json_body["error"]["field"] == "request.headers"


def test_a_non_ascii_path_is_percent_encoded_and_runs(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    admin.publish(**_write_tool(vendor, annotations={"readOnlyHint": True},
                                request={"method": "GET", "url": f"{vendor.url}/straße/{{email}}"}))
    result = mcp.call("run_tool", {**ORDER, "input": {"email": "ü@example.com"}})
    assert result["isError"] is False
    assert vendor.received[0]["path"] == "/stra%C3%9Fe/%C3%BC%40example.com"


@pytest.mark.parametrize("value", [".", "..", "%2e", "%2E%2e", "%252e%252e"])
def test_a_dot_segment_never_reaches_the_vendor(admin: Admin, agent: dict[str, Any], mcp: Mcp, vendor: Vendor,
                                                value: str) -> None:
    admin.publish(**_write_tool(vendor, annotations={"readOnlyHint": True},
                                request={"method": "GET", "url": f"{vendor.url}/users/{{email}}/profile"}))
    result = mcp.call("run_tool", {**ORDER, "input": {"email": value}})
    assert _error(result) == {"code": "invalid_input", "field": "input.email",
                              "message": f"input.email: {value!r} is not allowed in the URL's path"}
    assert vendor.received == []
    assert admin.call("GET", f"/v1/agents/{agent['id']}/runs").json_body["items"] == []  # and no run started


# 11. Limits ------------------------------------------------------------------------------------------


def test_acquire_has_a_daily_quota_per_agent(admin: Admin, client: Client, mcp: Mcp, vendor: Vendor,
                                             settings_env) -> None:
    settings_env(WORKSET_ACQUIRE_PER_DAY="2")
    _allow(admin, _host(vendor))
    for number in (1, 2):
        assert mcp.call("acquire", _write_tool(vendor, description=f"v{number}"))["isError"] is False
    error = _error(mcp.call("acquire", _write_tool(vendor, description="v3")))
    assert error["code"] == "quota_exceeded"
    assert len(_versions(admin)) == 2
    # another agent's quota is its own
    _, other = _agent(admin, client, "other")
    assert other.call("acquire", _write_tool(vendor, name="other-tool"))["isError"] is False


def test_a_refused_acquire_does_not_spend_the_quota(admin: Admin, mcp: Mcp, vendor: Vendor, settings_env) -> None:
    settings_env(WORKSET_ACQUIRE_PER_DAY="1")
    assert mcp.call("acquire", _write_tool(vendor))["structuredContent"]["error"]["code"] == "host_not_allowed"
    _allow(admin, _host(vendor))
    assert mcp.call("acquire", _write_tool(vendor))["isError"] is False


def test_a_lost_publish_race_is_a_conflict(admin: Admin, vendor: Vendor, monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.store import tools as tool_store
    from chalicelib.store.base import ConditionFailed

    def always_beaten(*args: Any, **kwargs: Any) -> Any:
        raise ConditionFailed(["ConditionalCheckFailed"])

    monkeypatch.setattr(tool_store, "put_version", always_beaten)
    response = admin.call("POST", "/v1/tools", _write_tool(vendor))
    assert response.status_code == 409 and response.json_body["error"]["code"] == "conflict"


def test_a_find_tool_query_is_capped_in_length(mcp: Mcp) -> None:
    assert _error(mcp.call("find_tool", {"query": "x" * 501}))["field"] == "query"


# 13. A "no" holds --------------------------------------------------------------------------------------


def test_a_denial_stands_until_a_person_withdraws_it(admin: Admin, agent: dict[str, Any], mcp: Mcp,
                                                     vendor: Vendor) -> None:
    admin.publish(**_write_tool(vendor))
    run_id = mcp.call("run_tool", {**ORDER, "input": {"email": "a@example.com"}})["structuredContent"]["run_id"]
    admin.call("POST", f"/v1/approvals/{run_id}/deny")
    # later calls are refused at once: no new ask, no vendor request
    assert _error(mcp.call("run_tool", {**ORDER, "input": {"email": "b@example.com"}}))["code"] == "tool_denied"
    assert admin.call("GET", "/v1/approvals").json_body["items"] == []
    listed = admin.call("GET", f"/v1/agents/{agent['id']}/approvals").json_body["items"]
    assert [(d["vendor"], d["name"], d["decision"], d["version"]) for d in listed] == [
        ("crm", "add-contact", "deny", 1)]
    assert listed[0]["request_shape"]["method"] == "POST"
    # WHEN a person withdraws the denial, the next call asks again
    assert admin.call("DELETE", f"/v1/agents/{agent['id']}/approvals/crm/add-contact").status_code == 200
    again = mcp.call("run_tool", {**ORDER, "input": {"email": "c@example.com"}})
    assert again["structuredContent"]["status"] == "awaiting_approval"
    assert vendor.received == []
    assert admin.call("DELETE", f"/v1/agents/{agent['id']}/approvals/crm/add-contact").status_code == 404


def test_an_approval_can_be_withdrawn_too(admin: Admin, agent: dict[str, Any], mcp: Mcp, vendor: Vendor) -> None:
    admin.publish(**_write_tool(vendor))
    _approved(admin, mcp)
    admin.call("DELETE", f"/v1/agents/{agent['id']}/approvals/crm/add-contact")
    again = mcp.call("run_tool", {**ORDER, "input": {"email": "c@example.com"}})
    assert again["structuredContent"]["status"] == "awaiting_approval"


def test_another_accounts_admin_cannot_see_or_withdraw_decisions(admin: Admin, other_admin: Admin,
                                                                 agent: dict[str, Any], mcp: Mcp,
                                                                 vendor: Vendor) -> None:
    admin.publish(**_write_tool(vendor))
    _approved(admin, mcp)
    assert other_admin.call("GET", f"/v1/agents/{agent['id']}/approvals").status_code == 404
    assert other_admin.call("DELETE", f"/v1/agents/{agent['id']}/approvals/crm/add-contact").status_code == 404
    assert len(admin.call("GET", f"/v1/agents/{agent['id']}/approvals").json_body["items"]) == 1


# 14. Echoed secrets ----------------------------------------------------------------------------------


def test_a_vendor_echoing_the_credential_never_shows_it(admin: Admin, agent: dict[str, Any], mcp: Mcp,
                                                        vendor: Vendor) -> None:
    secret = "sk_live_supersecret_0123456789"
    connection = _connection(admin, vendor, token=secret)
    admin.publish(**_write_tool(vendor, connection=connection, annotations={"readOnlyHint": True},
                                request={"method": "GET", "url": f"{vendor.url}/contacts"}))
    # GIVEN a vendor whose 401 quotes the token, in every way it could
    vendor.status = 401
    vendor.body = {"error": f"invalid token Bearer {secret}", secret: "as a key", "encoded": f"t={secret}",
                   "padding": "x" * 3000, "again": [secret]}
    result = mcp.call("run_tool", {**ORDER, "input": {"email": "a@example.com"}})
    # THEN neither the answer nor the stored run holds it
    assert secret not in json.dumps(result)
    (listed,) = admin.call("GET", f"/v1/agents/{agent['id']}/runs").json_body["items"]
    stored = admin.call("GET", f"/v1/runs/{listed['id']}").json_body
    assert secret not in json.dumps(stored) and "[redacted]" in json.dumps(stored)
    # and a successful answer is redacted as well
    vendor.status, vendor.body = 200, {"token": secret, "url": f"https://x/?key={secret}"}
    ok = mcp.call("run_tool", {**ORDER, "input": {"email": "b@example.com"}})
    assert ok["structuredContent"] == {"token": "[redacted]", "url": "https://x/?key=[redacted]"}


def test_a_secret_cut_in_half_by_the_size_cap_is_not_shown(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                           settings_env) -> None:
    secret = "sk_live_supersecret_0123456789"
    connection = _connection(admin, vendor, token=secret)
    admin.publish(**_write_tool(vendor, connection=connection, annotations={"readOnlyHint": True},
                                request={"method": "GET", "url": f"{vendor.url}/contacts"}))
    settings_env(WORKSET_VENDOR_MAX_RESPONSE_BYTES="100")
    vendor.body = ("y" * 85 + secret).encode()  # the cap falls inside the secret
    result = mcp.call("run_tool", {**ORDER, "input": {"email": "a@example.com"}})
    assert result["structuredContent"]["truncated"] is True
    assert secret[:8] not in json.dumps(result)


def test_a_preview_never_shows_the_credential(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    secret = "sk_live_supersecret_0123456789"
    admin.publish(**_write_tool(vendor, connection=_connection(admin, vendor, token=secret)))
    result = mcp.call("run_tool", {**ORDER, "input": {"email": secret}, "dryRun": True})
    assert secret not in json.dumps(result)
    assert result["structuredContent"]["preview"]["headers"]["Authorization"] == "[redacted]"


# 15. Where agent-authored tools may reach --------------------------------------------------------------


def test_an_agent_cannot_author_a_keyless_tool_for_a_host_no_person_allowed(admin: Admin, mcp: Mcp,
                                                                            vendor: Vendor) -> None:
    read = _write_tool(vendor, annotations={"readOnlyHint": True}, request={"method": "GET", "url": f"{vendor.url}/x"})
    error = _error(mcp.call("acquire", read))
    assert (error["code"], error["field"]) == ("host_not_allowed", "request.url")
    assert admin.call("GET", "/v1/tools").json_body["items"] == []
    assert vendor.received == []


def test_an_allowed_host_admits_agent_tools_and_removing_it_stops_their_calls(admin: Admin, mcp: Mcp,
                                                                              vendor: Vendor) -> None:
    _allow(admin, _host(vendor))
    read = _write_tool(vendor, annotations={"readOnlyHint": True}, request={"method": "GET", "url": f"{vendor.url}/x"})
    assert mcp.call("acquire", read)["isError"] is False
    assert mcp.call("crm__add-contact", {"email": "a@example.com"})["isError"] is False
    _allow(admin)  # a person empties the list
    assert _error(mcp.call("crm__add-contact", {"email": "b@example.com"}))["code"] == "host_not_allowed"
    assert len(vendor.received) == 1


def test_admin_tools_are_not_limited_by_the_allow_list(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    admin.publish(**_write_tool(vendor, annotations={"readOnlyHint": True},
                                request={"method": "GET", "url": f"{vendor.url}/x"}))
    assert mcp.call("run_tool", {**ORDER, "input": {"email": "a@example.com"}})["isError"] is False


def test_the_allow_list_is_https_only_on_a_deployed_stage(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                          settings_env) -> None:
    _allow(admin, _host(vendor))
    settings_env(WORKSET_ALLOW_PRIVATE_NETWORK="false")
    read = _write_tool(vendor, annotations={"readOnlyHint": True}, request={"method": "GET", "url": f"{vendor.url}/x"})
    assert _error(mcp.call("acquire", read))["code"] == "host_not_allowed"


@pytest.mark.parametrize("entry", ["https://x.com", "x.com/path", "X.COM", "x.com:99999", "", "a b"])
def test_bad_allow_list_entries_are_refused(admin: Admin, entry: str) -> None:
    response = admin.call("PUT", "/v1/account/allowed-hosts", {"allowed_hosts": ["ok.example.com", entry]})
    assert response.status_code == 400 and response.json_body["error"]["field"] == "allowed_hosts.1"
    assert admin.call("GET", "/v1/account").json_body["allowed_hosts"] == []


# 16. Which connections an agent may use ------------------------------------------------------------


def test_a_call_through_a_connection_outside_the_agents_scope_is_refused(admin: Admin, agent: dict[str, Any],
                                                                        mcp: Mcp, vendor: Vendor) -> None:
    # GIVEN two connections, and an agent limited to the second
    first, second = _connection(admin, vendor, token="first-token-0000"), _connection(admin, vendor, token="sec0000")
    admin.publish(**_write_tool(vendor, connection=first, annotations={"readOnlyHint": True},
                                request={"method": "GET", "url": f"{vendor.url}/x"}))
    response = admin.call("PATCH", f"/v1/agents/{agent['id']}", {"connections": [second]})
    assert response.status_code == 200 and response.json_body["connections"] == [second]
    # WHEN it calls the tool that uses the first
    error = _error(mcp.call("run_tool", {**ORDER, "input": {"email": "a@example.com"}}))
    # THEN it is refused before any request, and find_tool marks the tool
    assert error["code"] == "connection_not_in_scope"
    assert vendor.received == []
    hit = mcp.call("find_tool", {"query": "add contact crm"})["structuredContent"]["hits"][0]
    assert (hit["available"], hit["reason"]) == (False, "connection_not_in_scope")
    # and "all" restores the default
    admin.call("PATCH", f"/v1/agents/{agent['id']}", {"connections": "all"})
    assert mcp.call("run_tool", {**ORDER, "input": {"email": "a@example.com"}})["isError"] is False


def test_an_agent_cannot_acquire_through_a_connection_outside_its_scope(admin: Admin, agent: dict[str, Any],
                                                                       mcp: Mcp, vendor: Vendor) -> None:
    first, second = _connection(admin, vendor, token="first-token-0000"), _connection(admin, vendor, token="sec0000")
    admin.call("PATCH", f"/v1/agents/{agent['id']}", {"connections": [second]})
    error = _error(mcp.call("acquire", _write_tool(vendor, connection=first)))
    assert error["code"] == "connection_not_in_scope"
    assert admin.call("GET", "/v1/tools").json_body["items"] == []


@pytest.mark.parametrize("scope", [["cn0000000000000000"], "some", ["not-an-id"], [1]])
def test_a_scope_naming_unknown_connections_is_refused(admin: Admin, other_admin: Admin, agent: dict[str, Any],
                                                       vendor: Vendor, scope: Any) -> None:
    response = admin.call("PATCH", f"/v1/agents/{agent['id']}", {"connections": scope})
    assert response.status_code == 400 and response.json_body["error"]["field"].startswith("connections")
    assert admin.call("GET", f"/v1/agents/{agent['id']}").json_body["connections"] == "all"


def test_another_accounts_connection_cannot_be_put_in_scope(admin: Admin, other_admin: Admin,
                                                            agent: dict[str, Any], vendor: Vendor) -> None:
    foreign = other_admin.call("POST", "/v1/connections", {"vendor": "crm", "auth": {"type": "bearer", "token": "t"}})
    response = admin.call("PATCH", f"/v1/agents/{agent['id']}", {"connections": [foreign.json_body["id"]]})
    assert response.status_code == 400


# 17. First-class names are the working set -------------------------------------------------------------


@pytest.mark.parametrize("modern", [False, True])
def test_calling_a_tool_that_is_not_promoted_by_name_is_an_unknown_tool(admin: Admin, client: Client,
                                                                       agent: dict[str, Any], vendor: Vendor,
                                                                       modern: bool) -> None:
    admin.publish(**_write_tool(vendor, annotations={"readOnlyHint": True},
                                request={"method": "GET", "url": f"{vendor.url}/x"}))
    mcp = Mcp(client, agent["api_key"], modern=modern)
    response = mcp.post("tools/call", {"name": "crm__add-contact", "arguments": {"email": "a@example.com"}})
    error = response.json_body["error"]
    assert error["code"] == -32602 and "run_tool" in error["message"] and "promote" in error["message"]
    assert vendor.received == []
    assert admin.call("GET", f"/v1/agents/{agent['id']}/runs").json_body["items"] == []


# 8 and 9 where they meet runs: a crash ends the run, and the vendor's deadline ends before the lease ------


def test_a_crash_in_our_own_code_ends_the_run_and_releases_its_lease(admin: Admin, agent: dict[str, Any],
                                                                     client: Client, mcp: Mcp, vendor: Vendor,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     logged: pytest.LogCaptureFixture) -> None:
    from chalicelib.calls import vendor as vendor_module

    admin.publish(**_write_tool(vendor, annotations={"readOnlyHint": True},
                                request={"method": "GET", "url": f"{vendor.url}/x"}))

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(vendor_module, "perform", crash)
    result = mcp.call("run_tool", {**ORDER, "input": {"email": "a@example.com"}})
    assert _error(result)["code"] == "internal_error"
    run = admin.call("GET", f"/v1/agents/{agent['id']}/runs").json_body["items"][0]
    assert run["status"] == "failed"
    state = agent_store.load_state(agent["id"])
    assert state is not None and state.leases == {}
    # the crash is logged once, with the run and the request it came in on
    crashes = log_lines(logged, "run_crashed")
    assert [(line["run_id"], bool(line["request_id"]), line["error"]) for line in crashes] == [
        (run["id"], True, "RuntimeError")]
    # other agents are still served
    _, other = _agent(admin, client, "other")
    assert other.post("tools/list").status_code == 200


def test_a_running_run_is_never_seen_expired_while_the_vendor_is_slow(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                                      settings_env) -> None:
    # GIVEN no lease margin configured at all, a short vendor timeout and a vendor slower than it
    settings_env(WORKSET_LEASE_MARGIN_SECONDS="0", WORKSET_VENDOR_TIMEOUT_SECONDS="1")
    admin.publish(**_write_tool(vendor, annotations={"readOnlyHint": True},
                                request={"method": "GET", "url": f"{vendor.url}/x"}))
    vendor.delay = 3
    seen: list[str] = []
    result: dict[str, Any] = {}
    caller = threading.Thread(target=lambda: result.update(
        mcp.call("run_tool", {**ORDER, "input": {"email": "a@example.com"}})))
    caller.start()
    # WHEN someone reads the run while it runs
    while caller.is_alive():
        items = admin.call("GET", "/v1/agents").json_body["items"]
        runs = admin.call("GET", f"/v1/agents/{items[0]['id']}/runs").json_body["items"]
        seen += [admin.call("GET", f"/v1/runs/{run['id']}").json_body["status"] for run in runs]
        caller.join(0.2)
    # THEN it is never taken for abandoned; it ends by the vendor's deadline
    assert "expired" not in seen
    assert _error(result)["code"] == "vendor_timeout"


# The console's side of 1, 13 and 16 ---------------------------------------------------------------


def test_the_approval_page_shows_what_changed_since_the_approved_version(admin: Admin, console: Any, mcp: Mcp,
                                                                        vendor: Vendor) -> None:
    admin.publish(**_write_tool(vendor))
    _approved(admin, mcp)
    admin.publish(**_write_tool(vendor, request={"method": "PUT", "url": f"{vendor.url}/contacts"}))
    run_id = mcp.call("run_tool", {**ORDER, "input": {"email": "c@example.com"}})["structuredContent"]["run_id"]
    page = console.get(f"/console/approvals/{run_id}").body.decode()
    changed = page[page.index('id="changed-since"'):]
    assert 'data-field="method"' in changed and "PUT" in changed and "version 1" in changed
    assert 'data-field="path"' not in changed


def test_the_agent_page_lists_standing_decisions_and_withdraws_one(admin: Admin, agent: dict[str, Any],
                                                                   console: Any, mcp: Mcp, vendor: Vendor) -> None:
    admin.publish(**_write_tool(vendor))
    run_id = mcp.call("run_tool", {**ORDER, "input": {"email": "a@example.com"}})["structuredContent"]["run_id"]
    admin.call("POST", f"/v1/approvals/{run_id}/deny")
    page = console.get(f"/console/agents/{agent['id']}").body.decode()
    assert 'data-decision="crm__add-contact"' in page and ">denied<" in page
    # a form without the session's token changes nothing
    assert console.post(f"/console/agents/{agent['id']}/decisions/withdraw", ORDER, csrf="forged").status_code == 403
    assert len(admin.call("GET", f"/v1/agents/{agent['id']}/approvals").json_body["items"]) == 1
    answer = console.post(f"/console/agents/{agent['id']}/decisions/withdraw", ORDER)
    assert answer.status_code == 303
    assert admin.call("GET", f"/v1/agents/{agent['id']}/approvals").json_body["items"] == []


def test_the_agent_page_edits_the_connection_scope(admin: Admin, agent: dict[str, Any], console: Any,
                                                   vendor: Vendor) -> None:
    first, second = _connection(admin, vendor, token="first-token-0000"), _connection(admin, vendor, token="sec0000")
    console.post(f"/console/agents/{agent['id']}/connections", {"scope": "some", f"use_{second}": "on"})
    assert admin.call("GET", f"/v1/agents/{agent['id']}").json_body["connections"] == [second]
    refused = console.post(f"/console/agents/{agent['id']}/connections", {"scope": "some", "use_cn0bad": "on"})
    assert refused.status_code == 400
    assert admin.call("GET", f"/v1/agents/{agent['id']}").json_body["connections"] == [second]
    console.post(f"/console/agents/{agent['id']}/connections", {"scope": "all", f"use_{first}": "on"})
    assert admin.call("GET", f"/v1/agents/{agent['id']}").json_body["connections"] == "all"


# 6 and 8 on the vendor's side: answers Workset cannot pass on faithfully ------------------------------


@pytest.mark.parametrize("body", [
    b'{"name": "\\ud800"}', b'{"total": 1e999}', b'{"total": NaN}', b'[' * 100_000 + b']' * 100_000,
    b'{"big": ' + b'9' * 400 + b'}',
])
def test_a_vendor_answer_that_cannot_be_passed_on_is_a_vendor_error(admin: Admin, agent: dict[str, Any], mcp: Mcp,
                                                                    vendor: Vendor, body: bytes) -> None:
    admin.publish(**_write_tool(vendor, annotations={"readOnlyHint": True},
                                request={"method": "GET", "url": f"{vendor.url}/x"}))
    vendor.body = body
    result = mcp.call("run_tool", {**ORDER, "input": {"email": "a@example.com"}})
    assert _error(result)["code"] == "vendor_error"
    run = admin.call("GET", f"/v1/agents/{agent['id']}/runs").json_body["items"][0]
    assert run["status"] == "failed"
    assert mcp.post("tools/list").status_code == 200


# 10 for webhooks: an IPv6 spelling of a refused IPv4 address is refused the same way ---------------------


@pytest.mark.parametrize("host", ["[::ffff:169.254.169.254]", "[::a9fe:a9fe]", "[64:ff9b::a9fe:a9fe]",
                                  "[2002:a9fe:a9fe::1]"])
def test_a_webhook_url_carrying_the_metadata_address_is_refused(admin: Admin, agent: dict[str, Any],
                                                                host: str) -> None:
    # an IP literal resolves to itself: nothing is looked up or connected to
    response = admin.call("PATCH", f"/v1/agents/{agent['id']}", {"webhook_url": f"http://{host}/hook"})
    assert response.status_code == 400 and response.json_body["error"]["field"] == "webhook_url"
    assert admin.call("GET", f"/v1/agents/{agent['id']}").json_body["webhook_url"] is None


# Ids that cannot name a stored item: not found, without a read DynamoDB would refuse -------------------

LONG = "a" * 1500


@pytest.mark.parametrize(("method", "path"), [
    ("GET", f"/v1/runs/{LONG}"), ("GET", f"/v1/tools/{LONG}/{LONG}"), ("GET", f"/v1/connections/{LONG}"),
    ("POST", f"/v1/connections/{LONG}/revoke"), ("GET", f"/v1/agents/{LONG}"),
    ("DELETE", "/v1/agents/{agent}/approvals/" + f"{LONG}/{LONG}"),
    ("DELETE", "/v1/agents/{agent}/working-set/" + f"{LONG}/{LONG}"),
])
def test_an_id_too_long_to_be_a_key_is_not_found(admin: Admin, agent: dict[str, Any], method: str,
                                                 path: str) -> None:
    from chalicelib.store.base import connection
    from chalicelib.store.models import TABLES

    sent: list[str] = []
    clients = [connection().client] + [model._get_connection().connection.client for model in TABLES]
    for aws_client in clients:
        aws_client.meta.events.register("before-call.dynamodb", lambda params, **_: sent.append(json.dumps(
            params, default=str)), unique_id="trust-keys")
    try:
        response = admin.call(method, path.replace("{agent}", agent["id"]))
    finally:
        for aws_client in clients:
            aws_client.meta.events.unregister("before-call.dynamodb", unique_id="trust-keys")
    assert response.status_code == 404, response.body
    assert sent and not [params for params in sent if LONG in params]  # reads were made, none with that key


@pytest.mark.parametrize("task_id", ["", LONG])
def test_a_task_id_that_cannot_be_a_key_is_an_unknown_task(client: Client, agent: dict[str, Any],
                                                           task_id: str) -> None:
    mcp = Mcp(client, agent["api_key"], modern=True)
    assert mcp.post("tasks/get", {"taskId": task_id}).json_body["error"]["code"] == -32602
    assert mcp.call("get_run", {"run_id": LONG[:64]})["structuredContent"]["error"]["code"] == "run_not_found"


def test_an_agent_key_naming_an_impossible_agent_is_unauthorized(client: Client) -> None:
    mcp = Mcp(client, f"wsk_{'a' * 3000}_secret")
    assert mcp.post("tools/list").status_code == 401


def test_a_waiting_run_approved_after_its_connection_left_the_scope_does_not_run(admin: Admin,
                                                                                 agent: dict[str, Any],
                                                                                 mcp: Mcp, vendor: Vendor) -> None:
    first, second = _connection(admin, vendor, token="first-token-0000"), _connection(admin, vendor, token="sec0000")
    admin.publish(**_write_tool(vendor, connection=first))
    run_id = mcp.call("run_tool", {**ORDER, "input": {"email": "a@example.com"}})["structuredContent"]["run_id"]
    admin.call("PATCH", f"/v1/agents/{agent['id']}", {"connections": [second]})
    approved = admin.call("POST", f"/v1/approvals/{run_id}/approve").json_body
    assert approved["status"] == "failed" and approved["error"]["error"]["code"] == "connection_not_in_scope"
    assert vendor.received == []


def test_a_waiting_run_approved_after_its_host_left_the_allow_list_does_not_run(admin: Admin, mcp: Mcp,
                                                                                vendor: Vendor) -> None:
    _allow(admin, _host(vendor))
    mcp.call("acquire", _write_tool(vendor))
    run_id = mcp.call("run_tool", {**ORDER, "input": {"email": "a@example.com"}})["structuredContent"]["run_id"]
    _allow(admin)  # a person empties the list while the run waits
    approved = admin.call("POST", f"/v1/approvals/{run_id}/approve").json_body
    assert approved["status"] == "failed" and approved["error"]["error"]["code"] == "host_not_allowed"
    assert vendor.received == []
