"""The console's Import page (an OpenAPI document checked, then published) and MCP servers page
(register, sync now), and how the toolbox shows imported and unavailable tools; through Chalice's
test client, with the SDK's MCP server on 127.0.0.1 as the upstream."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import pytest
from chalice.test import Client
from markupsafe import escape

from chalicelib.base.config import IMPORT_BODY_BYTES
from chalicelib.catalog import imports
from chalicelib.net import mcpclient
from tests.conftest import Admin
from tests.test_console import Console, rows, text
from tests.upstream_servers import sdk_server, sdk_url_fixture  # noqa: F401 - the sdk_url fixture

DOCUMENT = """openapi: 3.0.3
info: {title: Pets, version: "1"}
servers: [{url: "http://127.0.0.1:9/v1"}]
paths:
  /pets:
    get:
      operationId: listPets
      summary: List pets.
      responses: {"200": {description: ok}}
  /pets/{id}:
    get:
      operationId: getPet
      summary: Get a pet.
      parameters: [{name: id, in: path, required: true, schema: {type: string}}]
      responses: {"200": {description: ok}}
    delete:
      operationId: deletePet
      parameters: [{name: id, in: path, required: true, schema: {type: string}}]
      responses: {"204": {description: gone}}
  /session:
    get:
      operationId: whoAmI
      parameters: [{name: sid, in: cookie, required: true, schema: {type: string}}]
      responses: {"200": {description: ok}}
"""
FORM = {"vendor": "pets", "document": DOCUMENT, "exclude": "deletePet"}
CHECKED = re.compile(r'name="checked" value="([0-9a-f]{64})"')


@pytest.fixture(autouse=True)
def no_sessions() -> Iterator[None]:
    """Each test negotiates with the MCP server afresh."""
    mcpclient.forget_sessions()
    yield
    mcpclient.forget_sessions()


def check(console: Console, fields: dict[str, str]) -> Any:
    return console.post("/console/import", {**fields, "step": "check"})


def publish(console: Console, fields: dict[str, str]) -> Any:
    """Check, then press Publish on the checked form (as the browser does)."""
    checked = CHECKED.search(text(check(console, fields))).group(1)
    return console.post("/console/import", {**fields, "step": "publish", "checked": checked})


def outcomes(page: str) -> list[tuple[str, str]]:
    """(operation, outcome) of each line of the report, in page order."""
    return [(html.unescape(key), outcome) for key, outcome in
            re.findall(r'data-line="([^"]+)" data-outcome="([^"]+)"', page)]


def tool_names(admin: Admin) -> list[str]:
    return [f"{tool['vendor']}__{tool['name']}" for tool in admin.call("GET", "/v1/tools").json_body["items"]]


# --- the Import page ------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/console/import", "/console/upstreams"])
def test_the_new_pages_without_a_session_redirect_to_sign_in(client: Client, path: str) -> None:
    answer = client.http.get(path)
    assert answer.status_code == 303 and answer.headers["Location"].startswith("/console/sign-in?next=")


def test_the_navigation_links_import_and_mcp_servers(console: Console) -> None:
    page = text(console.get("/console/agents"))
    assert 'href="/console/import">Import</a>' in page and 'href="/console/upstreams">MCP servers</a>' in page


def test_the_import_form_offers_the_accounts_active_connections(console: Console, admin: Admin) -> None:
    # GIVEN two connections of different vendors, one of them revoked
    auth = {"type": "bearer", "token": "t"}
    kept = admin.call("POST", "/v1/connections", {"vendor": "pets", "auth": auth, "hosts": ["127.0.0.1:9"]}).json_body
    gone = admin.call("POST", "/v1/connections", {"vendor": "shop", "auth": auth}).json_body
    admin.call("POST", f"/v1/connections/{gone['id']}/revoke")
    # WHEN the Import page is opened
    page = text(console.get("/console/import"))
    # THEN the form has the document box, the file reader, and only the active connection to choose
    assert '<textarea id="document" name="document"' in page and 'type="file" id="document_file"' in page
    assert f'<option value="{kept["id"]}">' in page and gone["id"] not in page


def test_a_check_shows_every_operation_and_stores_nothing(console: Console, admin: Admin) -> None:
    # WHEN a document is checked, excluding one operation
    answer = check(console, FORM)
    page = text(answer)
    # THEN every operation is in the report: two to publish, two skipped with their reasons
    assert answer.status_code == 200
    assert outcomes(page) == [("GET /pets", "published"), ("GET /pets/{id}", "published"),
                              ("DELETE /pets/{id}", "skipped"), ("GET /session", "skipped")]
    assert "excluded by &#39;deletePet&#39;" in page
    assert "needs cookie parameter &#39;sid&#39;, which Workset does not send" in page
    assert '<button type="submit" form="import" name="step" value="publish">Publish</button>' in page
    # AND nothing was stored
    assert tool_names(admin) == []


def test_a_check_says_how_many_new_versions_the_day_still_allows(console: Console) -> None:
    # WHEN a document of two publishable operations is checked, nothing published yet today
    page = text(check(console, FORM))
    # THEN the check counts its new versions against the vendor's day, which has room for all
    shown = re.search(r'<p class="muted" id="day-cap" data-new="2" data-allows="(\d+)">(.*?)</p>', page, re.DOTALL)
    assert shown is not None and int(shown.group(1)) == imports.MAX_VERSIONS_PER_DAY
    assert "Publishing adds 2 new versions of <code>pets</code>'s tools" in shown.group(2)
    assert f"at most {imports.MAX_VERSIONS_PER_DAY} a day, UTC" in shown.group(2) and "refused" not in page


def test_publish_stores_the_checked_tools_and_links_them(console: Console, admin: Admin) -> None:
    # WHEN the checked document is published
    answer = publish(console, FORM)
    page = text(answer)
    # THEN the tools exist, the page counts them, and links each published one
    assert answer.status_code == 200
    assert tool_names(admin) == ["pets__get-pet", "pets__list-pets"]
    assert '<div data-count="published"><strong>2</strong> published</div>' in page
    assert '<div data-count="skipped"><strong>2</strong> skipped</div>' in page
    assert 'href="/console/tools/pets/list-pets"><code>pets__list-pets</code></a>' in page
    assert 'href="/console/tools/pets/get-pet"' in page and 'href="/console/tools/pets/who-am-i"' not in page
    # AND published by a person, as the admin API would record it
    assert admin.call("GET", "/v1/tools/pets/list-pets").json_body["versions"][0]["published_by"] == "admin"


def test_publishing_what_changed_after_the_check_checks_it_again(console: Console, admin: Admin) -> None:
    # GIVEN a check of one document
    checked = CHECKED.search(text(check(console, FORM))).group(1)
    # WHEN Publish is pressed after the operations to exclude were changed
    answer = console.post("/console/import", {**FORM, "exclude": "", "step": "publish", "checked": checked})
    # THEN the new inputs are checked, not published
    page = text(answer)
    assert "The form changed after the last check" in page
    assert ("DELETE /pets/{id}", "published") in outcomes(page)
    assert tool_names(admin) == []


@pytest.mark.parametrize(("fields", "reason"), [
    ({"document": "openapi: 3.0.3\npaths: [unclosed"}, "YAML"),
    ({"document": '{"swagger": "2.0", "paths": {}}'}, "2.0"),
    ({"document": ""}, "document: give the document or its url, one of the two"),
    ({"url": "http://127.0.0.1:9/openapi.yaml"}, "document: give the document or its url, one of the two"),
    ({"vendor": "Not A Vendor"}, "vendor"),
    ({"document": "openapi: 3.0.3\npaths: {}\nx-a: &a " + "x" * 20_000 + "\nx-b: [" + ",".join(["*a"] * 4_000) + "]\n"},
     "once its YAML aliases and merge keys are repeated"),  # issue 24: 36 KB that aliases make 80 MB
])
def test_a_bad_import_shows_the_reason_keeps_the_form_and_stores_nothing(console: Console, admin: Admin,
                                                                         fields: dict[str, str], reason: str) -> None:
    # WHEN a bad import is published straight away (no check before)
    answer = console.post("/console/import", {**FORM, **fields, "step": "publish"})
    page = text(answer)
    # THEN the form is shown again with the reason, what was typed kept, and nothing stored
    assert answer.status_code == 400
    alert = re.search(r'<p class="notice error" role="alert">(.*?)</p>', page, re.DOTALL).group(1)
    assert reason in html.unescape(alert) and alert.endswith("Nothing was stored.")
    assert str(escape({**FORM, **fields}["document"])) in page  # as Jinja escapes it
    assert 'data-line="' not in page and 'name="checked"' not in page
    assert tool_names(admin) == []


def test_a_url_that_cannot_be_fetched_is_a_reason_not_a_crash(console: Console, admin: Admin) -> None:
    answer = check(console, {"vendor": "pets", "url": "http://127.0.0.1:9/openapi.yaml"})
    assert answer.status_code == 400
    assert "url: the document could not be fetched" in text(answer)
    assert tool_names(admin) == []


@pytest.mark.parametrize("csrf", ["", "forged-token"])
def test_import_without_the_sessions_token_stores_nothing(console: Console, admin: Admin, csrf: str) -> None:
    # GIVEN a valid check of the document
    checked = CHECKED.search(text(check(console, FORM))).group(1)
    # WHEN Publish arrives without the session's token
    answer = console.post("/console/import", {**FORM, "step": "publish", "checked": checked}, csrf=csrf)
    # THEN it is refused and nothing was stored
    assert answer.status_code == 403
    assert tool_names(admin) == []


def test_a_hostile_document_is_only_ever_shown_as_text(console: Console, admin: Admin) -> None:
    # GIVEN a document whose paths, operationIds and text carry markup, and that closes the textarea
    hostile = """openapi: 3.0.3
info: {title: "</textarea><script>alert(1)</script>", version: "1"}
servers: [{url: "http://127.0.0.1:9"}]
paths:
  "/x<script>alert(2)</script>":
    get:
      operationId: "<img src=x onerror=alert(3)>"
      summary: "<script>alert(4)</script>"
      parameters: [{name: "<b>", in: cookie, schema: {type: string}}]
      responses: {"200": {description: ok}}
"""
    # WHEN it is checked
    page = text(check(console, {"vendor": "pets", "document": hostile}))
    # THEN every piece is escaped: no markup of the document reaches the page
    assert "<script>alert" not in page and "<img src=x" not in page and "<b>" not in page
    assert "&lt;/textarea&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<code>GET /x&lt;script&gt;alert(2)&lt;/script&gt;</code>" in page
    assert "&lt;img src=x onerror=alert(3)&gt;" in page
    assert tool_names(admin) == []


def test_a_document_larger_than_other_forms_may_be_is_imported(console: Console, admin: Admin) -> None:
    # GIVEN a document of 400 KB, larger than any other console form may be (256 KB)
    padded = DOCUMENT + f"x-padding: {'a' * 400_000}\n"
    # WHEN it is published
    answer = publish(console, {**FORM, "document": padded})
    # THEN it is read like any other
    assert answer.status_code == 200
    assert tool_names(admin) == ["pets__get-pet", "pets__list-pets"]


def test_the_larger_limit_is_the_import_pages_alone(console: Console, admin: Admin) -> None:
    # WHEN the create-agent form arrives with 400 KB in it
    answer = console.post("/console/agents", {"name": "hermes", "padding": "a" * 400_000})
    # THEN it is refused as too large, and no agent exists
    assert answer.status_code == 413 and "nothing was read or changed" in text(answer)
    assert admin.call("GET", "/v1/agents").json_body["items"] == []


def test_an_import_form_over_its_limit_is_refused(console: Console, admin: Admin) -> None:
    answer = check(console, {**FORM, "document": DOCUMENT + "#" * IMPORT_BODY_BYTES})
    assert answer.status_code == 413 and "The form is larger than 6 MB" in text(answer)
    assert tool_names(admin) == []


# --- how the toolbox shows imported tools ---------------------------------------------------------

def test_an_operation_the_document_dropped_is_shown_unavailable_with_why(console: Console, admin: Admin) -> None:
    # GIVEN the document published, then published again without GET /pets/{id}
    publish(console, FORM)
    shorter = DOCUMENT.replace("  /pets/{id}:\n    get:\n      operationId: getPet\n      summary: Get a pet.\n"
                               "      parameters: [{name: id, in: path, required: true, schema: {type: string}}]\n"
                               "      responses: {\"200\": {description: ok}}\n", "  /pets/{id}:\n")
    again = text(publish(console, {**FORM, "document": shorter}))
    # THEN the report says so, and still links the tool (kept, not deleted)
    assert ("GET /pets/{id}", "unavailable") in outcomes(again) and ("GET /pets", "unchanged") in outcomes(again)
    assert 'href="/console/tools/pets/get-pet"' in again
    # AND the toolbox shows the badge with the reason, and where each tool came from
    listed = text(console.get("/console/tools"))
    row = listed[listed.index('data-tool="pets__get-pet"'):]
    row = row[:row.index("</tr>")]
    assert '<span class="badge unavailable">unavailable</span>' in row
    assert "no longer offered by the OpenAPI document" in row
    assert "from OpenAPI GET /pets/{id}" in row
    other = listed[listed.index('data-tool="pets__list-pets"'):]
    assert "from OpenAPI GET /pets<" in other and "badge unavailable" not in other[:other.index("</tr>")]
    # AND the tool's page says it is unavailable and why, and its origin with the operationId
    page = text(console.get("/console/tools/pets/get-pet"))
    assert '<p class="notice warn" id="unavailable">Unavailable: no longer offered by the OpenAPI document' in page
    assert "OpenAPI GET /pets/{id} (operationId <code>getPet</code>)" in page


def test_an_operation_without_an_operation_id_shows_its_origin(console: Console, admin: Admin) -> None:
    # GIVEN a published operation that has no operationId
    bare = """openapi: 3.0.3
info: {title: Pets, version: "1"}
servers: [{url: "http://127.0.0.1:9"}]
paths:
  /pets:
    get: {summary: List pets., responses: {"200": {description: ok}}}
"""
    assert publish(console, {"vendor": "pets", "document": bare}).status_code == 200
    [name] = [tool["name"] for tool in admin.call("GET", "/v1/tools").json_body["items"]]
    # WHEN its page is opened
    page = console.get(f"/console/tools/pets/{name}")
    # THEN it says where it came from, with no operationId to name
    assert page.status_code == 200
    assert re.search(r'id="origin">Version 1 came from\s+OpenAPI GET /pets\.</p>', text(page))


def test_a_tool_stored_with_hidden_characters_in_its_origin_shows_them_encoded(console: Console,
                                                                              admin: Admin) -> None:
    # GIVEN an imported tool stored before imports encoded its path's hidden characters: a
    # right-to-left override and a zero-width space in its origin's key
    from chalicelib.base.clock import utcnow
    from chalicelib.identity import accounts
    from chalicelib.store import tools as tool_store

    admin.publish(vendor="pets", name="get-pet")
    account_id = accounts.authenticate_admin(admin.token)
    head = tool_store.get_head(account_id, "pets", "get-pet")
    tool_store.put_version(account_id, tool_store.NewVersion(
        "pets", "get-pet", head.definition, 1, origin={"kind": "openapi", "key": "GET /pets/\u202e{id}\u200b"}),
        "admin", utcnow())
    # WHEN the toolbox and the tool's page are opened
    listed = text(console.get("/console/tools"))
    page = text(console.get("/console/tools/pets/get-pet"))
    # THEN both show the origin with those characters percent-encoded, never as they are
    assert "from OpenAPI GET /pets/%E2%80%AE{id}%E2%80%8B" in listed
    assert "OpenAPI GET /pets/%E2%80%AE{id}%E2%80%8B" in page
    assert "\u202e" not in listed + page and "\u200b" not in listed + page


def test_a_tool_published_by_hand_says_no_origin(console: Console, admin: Admin) -> None:
    admin.publish()
    listed = text(console.get("/console/tools"))
    page = text(console.get("/console/tools/unleashed/list-sales-orders"))
    assert 'class="muted small origin"' not in listed and 'id="origin"' not in page
    assert 'class="badge unavailable"' not in listed + page and 'id="unavailable"' not in page


# --- MCP servers ----------------------------------------------------------------------------------

def test_registering_an_mcp_server_publishes_its_tools_and_lists_it(console: Console, admin: Admin,
                                                                    sdk_url: str) -> None:
    # WHEN an MCP server is registered from the console
    answer = console.post("/console/upstreams", {"vendor": "forecast", "url": sdk_url, "connection": ""})
    page = text(answer)
    # THEN its tools are published, the report links them, and the list shows the server synced
    assert answer.status_code == 200
    assert sorted(tool_names(admin)) == ["forecast__create-note", "forecast__fail", "forecast__get-forecast"]
    assert sorted(outcomes(page)) == [("create_note", "published"), ("fail", "published"),
                                      ("get_forecast", "published")]
    assert "Registered forecast: 3 published." in page
    assert 'href="/console/tools/forecast/get-forecast"' in page
    assert rows(page, "upstream") == ["forecast"]
    row = page[page.index('data-upstream="forecast"'):]
    assert html.escape(sdk_url) in row and "ok: 3 published" in row and "just now" in row
    # AND the toolbox says where the tools came from
    assert "from MCP server forecast" in text(console.get("/console/tools"))
    tool = text(console.get("/console/tools/forecast/get-forecast"))
    assert 'MCP server forecast</a> (its tool <code>get_forecast</code>)' in tool


def test_sync_now_shows_the_syncs_counts(console: Console, admin: Admin, sdk_url: str) -> None:
    # GIVEN a server registered through the admin API
    assert admin.call("POST", "/v1/upstreams", {"vendor": "forecast", "url": sdk_url}).status_code == 201
    # WHEN a person presses Sync now
    answer = console.post("/console/upstreams/forecast/sync")
    page = text(answer)
    # THEN the page shows what the sync did: nothing changed
    assert answer.status_code == 200
    assert "Synced forecast: 3 unchanged." in page
    assert '<div data-count="unchanged"><strong>3</strong> unchanged</div>' in page
    assert "ok: 3 unchanged" in page[page.index('data-upstream="forecast"'):]


def test_a_failed_sync_shows_why_and_the_list_remembers(console: Console, admin: Admin) -> None:
    # GIVEN a server registered while it served, that has stopped since
    with sdk_server() as url:
        assert admin.call("POST", "/v1/upstreams", {"vendor": "forecast", "url": url}).status_code == 201
    mcpclient.forget_sessions()
    # WHEN a person presses Sync now
    answer = console.post("/console/upstreams/forecast/sync")
    page = text(answer)
    # THEN the page says it failed, the tools are as they were, and the list shows the failure
    assert answer.status_code >= 400
    assert "Syncing forecast failed:" in page and "Its tools are as they were." in page
    row = page[page.index('data-upstream="forecast"'):]
    assert "failed:" in row[:row.index("</tr>")]
    assert len(tool_names(admin)) == 3


def test_registering_an_unreachable_server_registers_nothing(console: Console, admin: Admin) -> None:
    answer = console.post("/console/upstreams", {"vendor": "forecast", "url": "http://127.0.0.1:9/mcp"})
    page = text(answer)
    assert answer.status_code >= 400 and "Nothing was registered." in page
    assert 'value="http://127.0.0.1:9/mcp"' in page  # the form keeps what was typed
    assert admin.call("GET", "/v1/upstreams").json_body["items"] == [] and tool_names(admin) == []


@pytest.mark.parametrize("csrf", ["", "forged-token"])
def test_register_and_sync_without_the_sessions_token_change_nothing(console: Console, admin: Admin, sdk_url: str,
                                                                     csrf: str) -> None:
    # GIVEN a registered server
    admin.call("POST", "/v1/upstreams", {"vendor": "forecast", "url": sdk_url})
    synced_at = admin.call("GET", "/v1/upstreams/forecast").json_body["synced_at"]
    # WHEN a register and a sync arrive without the session's token
    forged = [console.post("/console/upstreams", {"vendor": "other", "url": sdk_url}, csrf=csrf),
              console.post("/console/upstreams/forecast/sync", csrf=csrf)]
    # THEN both are refused: no second server, no new sync
    assert [answer.status_code for answer in forged] == [403, 403]
    assert [item["vendor"] for item in admin.call("GET", "/v1/upstreams").json_body["items"]] == ["forecast"]
    assert admin.call("GET", "/v1/upstreams/forecast").json_body["synced_at"] == synced_at


def test_a_waiting_call_of_a_server_tool_shows_what_it_will_call(console: Console, admin: Admin, client: Client,
                                                                  sdk_url: str) -> None:
    # GIVEN a registered server whose write tool an agent called
    from tests.conftest import Mcp

    admin.call("POST", "/v1/upstreams", {"vendor": "forecast", "url": sdk_url})
    mcp = Mcp(client, admin.create_agent()["api_key"])
    waiting = mcp.call("run_tool", {"vendor": "forecast", "name": "create-note", "input": {"title": "t", "body": "b"}})
    # WHEN a person opens the approval
    page = text(console.get(f"/console/approvals/{waiting['structuredContent']['run_id']}"))
    # THEN it says which server and which of its tools the call will reach
    assert f"MCP tools/call create_note at {html.escape(sdk_url)}" in page
