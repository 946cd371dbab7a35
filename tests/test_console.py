"""The console through Chalice's test client: sessions and CSRF, every page, the forms' range
errors, escaping, and that console actions reach the same domain as the admin API."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from chalice.test import Client

from chalicelib.base.clock import iso, utcnow
from chalicelib.identity import sessions
from tests.conftest import FORM, Admin, Console, Mcp, Vendor
from tests.test_approvals import ORDER, write_tool  # noqa: F401 - the write tool fixture, shared


def text(response: Any) -> str:
    return response.body.decode()


def rows(page: str, attribute: str) -> list[str]:
    """The values of `data-<attribute>` on the page, in page order."""
    return re.findall(rf'data-{attribute}="([^"]+)"', page)


# --- sessions and sign-in -------------------------------------------------------------------------

PAGES = ["/console/agents", "/console/agents/ag1", "/console/approvals", "/console/approvals/run1", "/console/tools",
         "/console/tools/unleashed/list-sales-orders", "/console/connections", "/console/connections/cn1/revoke"]


@pytest.mark.parametrize("path", PAGES)
def test_every_page_without_a_session_redirects_to_sign_in(client: Client, path: str) -> None:
    # WHEN a browser without a session asks for a console page
    answer = client.http.get(path)
    # THEN it is sent to sign in, and comes back to the page afterwards
    assert answer.status_code == 303
    assert answer.headers["Location"] == "/console/sign-in?" + urlencode({"next": path})


def test_a_form_posted_without_a_session_changes_nothing(client: Client, admin: Admin) -> None:
    # WHEN a form is posted with no session at all
    answer = Console(client).post("/console/agents", {"name": "intruder"}, csrf="x")
    # THEN it goes to sign in and no agent exists
    assert answer.status_code == 303 and answer.headers["Location"].startswith("/console/sign-in")
    assert admin.call("GET", "/v1/agents").json_body["items"] == []


def test_sign_in_with_the_admin_token_lands_where_it_was_going(client: Client, admin: Admin) -> None:
    # WHEN a person signs in from a link to an approval page
    answer = Console(client).sign_in(admin.token, next_path="/console/approvals/run1")
    # THEN the session cookie is set and the browser goes back to that page
    assert answer.status_code == 303
    assert answer.headers["Location"] == "/console/approvals/run1"
    assert answer.headers["Set-Cookie"].startswith(f"{sessions.SESSION_COOKIE}=")


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/x", "/v1/agents", "/console\\x"])
def test_sign_in_never_redirects_off_the_console(client: Client, admin: Admin, target: str) -> None:
    answer = Console(client).sign_in(admin.token, next_path=target)
    assert answer.headers["Location"] == "/console/agents"


def test_a_wrong_admin_token_is_refused_without_a_session(client: Client, admin: Admin) -> None:
    # WHEN someone signs in with a token that is not an admin token
    answer = Console(client).sign_in("wsa_not-a-real-token-at-all")
    # THEN the form says so and no session cookie is set
    assert answer.status_code == 401
    assert "That admin token is not valid." in text(answer)
    assert sessions.SESSION_COOKIE + "=" not in answer.headers.get("Set-Cookie", "")


def test_sign_in_without_the_forms_token_is_refused(client: Client, admin: Admin) -> None:
    # GIVEN a sign-in posted from elsewhere: no sign-in cookie, no form token
    body = urlencode({"token": admin.token})
    # WHEN it arrives
    answer = client.http.post("/console/sign-in", headers=FORM, body=body)
    # THEN it is refused and no session is issued
    assert answer.status_code == 403
    assert sessions.SESSION_COOKIE + "=" not in answer.headers.get("Set-Cookie", "")


def test_the_session_cookie_is_httponly_samesite_lax_and_expires(client: Client, admin: Admin) -> None:
    cookie = Console(client).sign_in(admin.token).headers["Set-Cookie"]
    flags = [part.strip() for part in cookie.split(";")]
    assert "HttpOnly" in flags and "SameSite=Lax" in flags and "Path=/console" in flags  # Lax: see session.set_cookie
    assert f"Max-Age={int(sessions.LIFETIME.total_seconds())}" in flags
    assert "Secure" not in flags  # the local stack and tests talk plain HTTP to 127.0.0.1


def test_the_session_cookie_is_secure_outside_local_stages(client: Client, admin: Admin, settings_env: Any) -> None:
    # GIVEN a deployed stage with its console secret
    settings_env(WORKSET_STAGE="prod", WORKSET_TABLE_PREFIX="workset-test", WORKSET_CONSOLE_SECRET="s" * 40)
    # WHEN a person signs in
    cookie = Console(client).sign_in(admin.token).headers["Set-Cookie"]
    # THEN the cookie is only ever sent over HTTPS
    assert "Secure" in [part.strip() for part in cookie.split(";")]


def test_a_deployed_stage_without_a_console_secret_lets_nobody_in(client: Client, admin: Admin,
                                                                 settings_env: Any) -> None:
    # GIVEN a deployed stage whose console secret was never set
    settings_env(WORKSET_STAGE="prod", WORKSET_TABLE_PREFIX="workset-test")
    # WHEN someone opens the sign-in page and posts the right token anyway
    page = client.http.get("/console/sign-in")
    posted = client.http.post("/console/sign-in", headers=FORM, body=urlencode({"token": admin.token}))
    # THEN both say the console is not configured, and no session exists
    assert page.status_code == 503 and "WORKSET_CONSOLE_SECRET" in text(page)
    assert posted.status_code == 503 and "Set-Cookie" not in posted.headers


@pytest.mark.parametrize("tamper", ["account", "expiry", "mac"])
def test_a_tampered_session_cookie_is_no_session(console: Console, tamper: str) -> None:
    # GIVEN a valid session cookie with one part changed
    name, value = console.cookie.split("=", 1)
    account, expires, session_id, mac = value.split(".")
    if tamper == "account":
        account = "acother"
    elif tamper == "expiry":
        expires = str(int(expires) + 10 ** 6)
    else:
        mac = mac[:-2] + ("AA" if not mac.endswith("AA") else "BB")
    console.cookie = f"{name}={account}.{expires}.{session_id}.{mac}"
    # WHEN it is used
    answer = console.get("/console/agents")
    # THEN it does not open the console
    assert answer.status_code == 303


def test_other_cookies_of_the_site_do_not_hide_the_session(console: Console) -> None:
    console.cookie = f'prefs="a,b c"; theme; {console.cookie}; tracking=1'
    assert console.get("/console/agents").status_code == 200


def test_an_expired_session_is_no_session(console: Console, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the clock nine hours on (sessions last eight)
    later = utcnow() + timedelta(hours=9)
    monkeypatch.setattr("chalicelib.console.common.utcnow", lambda: later)
    # WHEN the old cookie is used
    # THEN it is sent to sign in again
    assert console.get("/console/agents").status_code == 303


def test_sign_out_removes_the_cookie(console: Console) -> None:
    answer = console.post("/console/sign-out")
    assert answer.status_code == 303
    assert answer.headers["Set-Cookie"].startswith(f"{sessions.SESSION_COOKIE}=;")
    assert "Max-Age=0" in answer.headers["Set-Cookie"]


# --- CSRF ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("csrf", ["", "forged-token"])
def test_creating_an_agent_without_the_sessions_token_is_refused(console: Console, admin: Admin, csrf: str) -> None:
    # WHEN the create form arrives without the session's CSRF token
    answer = console.post("/console/agents", {"name": "intruder"}, csrf=csrf)
    # THEN it is refused and nothing was created
    assert answer.status_code == 403
    assert admin.call("GET", "/v1/agents").json_body["items"] == []


def test_a_token_of_another_session_is_refused(client: Client, console: Console, admin: Admin,
                                               agent: dict[str, Any]) -> None:
    # GIVEN a second session of the same account, whose token an attacker might have seen
    other = Console(client)
    other.sign_in(admin.token)
    # WHEN it is posted with the first session's cookie
    answer = console.post(f"/console/agents/{agent['id']}/settings", {"name": "x", "cap": "5"}, csrf=other.csrf)
    # THEN it is refused and the agent is unchanged
    assert answer.status_code == 403
    assert admin.call("GET", f"/v1/agents/{agent['id']}").json_body["cap"] == 20


@pytest.mark.usefixtures("write_tool")
def test_promote_demote_and_approve_without_the_token_change_nothing(console: Console, admin: Admin, mcp: Mcp,
                                                                     agent: dict[str, Any]) -> None:
    # GIVEN a promoted tool and a pending run
    admin.publish()
    admin.call("POST", f"/v1/agents/{agent['id']}/working-set", {"vendor": "unleashed", "name": "list-sales-orders"})
    run_id = mcp.call("run_tool", {**ORDER, "input": {"customer": "acme"}})["structuredContent"]["run_id"]
    # WHEN each form is posted with a forged token
    forged = [
        console.post(f"/console/agents/{agent['id']}/promote", ORDER, csrf="forged"),
        console.post(f"/console/agents/{agent['id']}/demote", {"vendor": "unleashed", "name": "list-sales-orders"},
                     csrf="forged"),
        console.post(f"/console/approvals/{run_id}/approve", csrf="forged"),
        console.post("/console/connections", {"vendor": "unleashed", "secret": "s3cret"}, csrf="forged"),
    ]
    # THEN every one is refused, and the set, the run and the connections are as they were
    assert [answer.status_code for answer in forged] == [403, 403, 403, 403]
    items = admin.call("GET", f"/v1/agents/{agent['id']}/working-set").json_body["items"]
    assert [item["name"] for item in items] == ["list-sales-orders"]
    assert admin.call("GET", f"/v1/runs/{run_id}").json_body["status"] == "awaiting_approval"
    assert admin.call("GET", "/v1/connections").json_body["items"] == []


# --- agents ----------------------------------------------------------------------------------------

@pytest.mark.usefixtures("write_tool")
def test_agents_list_shows_size_against_cap_window_and_pending(console: Console, admin: Admin, mcp: Mcp,
                                                               agent: dict[str, Any]) -> None:
    # GIVEN an agent with one promoted tool and one call waiting for a person
    admin.publish()
    mcp.call("promote", {"vendor": "unleashed", "name": "list-sales-orders"})
    mcp.call("run_tool", {**ORDER, "input": {"customer": "acme"}})
    # WHEN the agents list is opened
    page = text(console.get("/console/agents"))
    # THEN its row says so, with an Edit form
    row = page[page.index(f'data-agent="{agent["id"]}"'):]
    row = row[:row.index("</tr>")]
    assert ">hermes</a>" in row and "1 / 20" in row and "21 days" in row
    assert "#approvals\">1</a>" in row
    assert "<summary>Edit</summary>" in row
    assert "just now" in row  # last activity


def test_create_agent_shows_the_key_once_with_the_mcp_url(console: Console, client: Client) -> None:
    # WHEN an agent is created from the console
    answer = console.post("/console/agents", {"name": "athena", "cap": "7", "idle_window_days": "30"})
    page = text(answer)
    # THEN its key and the MCP URL are shown, with copy buttons, and the key works on /mcp
    assert answer.status_code == 200
    key = re.search(r'<code id="api-key">(wsk_[^<]+)</code>', page).group(1)
    assert '<code id="mcp-url">http://127.0.0.1:8000/mcp</code>' in page
    assert page.count("data-copy=") == 2
    assert "find_tool" in Mcp(client, key).tool_names()
    # AND the key is never shown again
    assert key not in text(console.get("/console/agents"))


def test_create_agent_with_a_cap_out_of_range_creates_nothing(console: Console, admin: Admin) -> None:
    answer = console.post("/console/agents", {"name": "athena", "cap": "0", "idle_window_days": "21"})
    assert answer.status_code == 400
    assert "cap: Input should be greater than or equal to 1" in text(answer)
    assert admin.call("GET", "/v1/agents").json_body["items"] == []


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("cap", "0", "cap: Input should be greater than or equal to 1"),
    ("cap", "501", "cap: Input should be less than or equal to 500"),
    ("idle_window_days", "0", "idle_window_days: Input should be greater than or equal to 1"),
    ("idle_window_days", "3651", "idle_window_days: Input should be less than or equal to 3650"),
    ("cap", "ten", "cap: must be a whole number from 1 to 500"),
])
def test_a_setting_out_of_range_shows_the_reason_and_saves_nothing(console: Console, admin: Admin,
                                                                   agent: dict[str, Any], field: str, value: str,
                                                                   reason: str) -> None:
    # GIVEN the settings form filled with a new name and one bad number
    fields = {"name": "renamed", "cap": "20", "idle_window_days": "21", field: value}
    # WHEN it is saved
    answer = console.post(f"/console/agents/{agent['id']}/settings", fields)
    # THEN the page shows the reason and the value typed, and nothing was saved (not even the name)
    assert answer.status_code == 400
    assert f"{reason}. Nothing was saved." in text(answer)
    assert f'name="{field}" value="{value}"' in text(answer)
    saved = admin.call("GET", f"/v1/agents/{agent['id']}").json_body
    assert (saved["name"], saved["cap"], saved["idle_window_days"]) == ("hermes", 20, 21)


def test_the_settings_form_shows_the_ranges_and_when_changes_apply(console: Console, agent: dict[str, Any]) -> None:
    page = text(console.get(f"/console/agents/{agent['id']}"))
    assert 'min="1" max="500"' in page and 'min="1" max="3650"' in page
    assert "1–500 tools" in page and "1–3650 days" in page
    assert "Changes take effect at the next sweep" in page


def test_settings_in_range_are_saved(console: Console, admin: Admin, agent: dict[str, Any]) -> None:
    answer = console.post(f"/console/agents/{agent['id']}/settings",
                          {"name": "athena", "cap": "500", "idle_window_days": "3650"})
    assert answer.status_code == 303
    assert answer.headers["Location"] == f"/console/agents/{agent['id']}?done=saved"
    saved = admin.call("GET", f"/v1/agents/{agent['id']}").json_body
    assert (saved["name"], saved["cap"], saved["idle_window_days"]) == ("athena", 500, 3650)


def test_edit_on_the_agents_list_saves_and_returns_to_the_list(console: Console, admin: Admin,
                                                               agent: dict[str, Any]) -> None:
    # WHEN the Edit form of a row is saved
    answer = console.post(f"/console/agents/{agent['id']}/settings",
                          {"name": "hermes", "cap": "3", "idle_window_days": "7", "back": "list"})
    # THEN the change is saved and the list says when it applies
    assert answer.headers["Location"] == "/console/agents?done=saved"
    assert "take effect at the next sweep" in text(console.get(answer.headers["Location"]))
    saved = admin.call("GET", f"/v1/agents/{agent['id']}").json_body
    assert (saved["cap"], saved["idle_window_days"]) == (3, 7)


def test_another_accounts_agent_is_not_found(console: Console, other_admin: Admin) -> None:
    theirs = other_admin.create_agent("theirs")
    assert console.get(f"/console/agents/{theirs['id']}").status_code == 404
    answer = console.post(f"/console/agents/{theirs['id']}/settings", {"cap": "5"})
    assert answer.status_code == 404
    assert other_admin.call("GET", f"/v1/agents/{theirs['id']}").json_body["cap"] == 20


# --- the working set and History -------------------------------------------------------------------

def test_working_set_is_in_tools_list_order_with_promoted_by_and_last_used(console: Console, admin: Admin,
                                                                           mcp: Mcp, agent: dict[str, Any]) -> None:
    # GIVEN tools promoted by the agent, by a person, and one of them called
    for name in ("a-tool", "b-tool", "c-tool"):
        admin.publish(name=name, description=f"The {name}.")
    mcp.call("promote", {"vendor": "unleashed", "name": "c-tool"})
    admin.call("POST", f"/v1/agents/{agent['id']}/working-set", {"vendor": "unleashed", "name": "a-tool"})
    mcp.call("promote", {"vendor": "unleashed", "name": "b-tool"})
    mcp.call("unleashed__b-tool", {"customer": "acme"})
    # WHEN the agent's page is opened
    page = text(console.get(f"/console/agents/{agent['id']}"))
    # THEN the set is listed as tools/list lists it (after the meta-tools)
    listed = [name for name in mcp.tool_names() if "__" in name]
    assert rows(page, "tool") == listed == ["unleashed__c-tool", "unleashed__a-tool", "unleashed__b-tool"]
    # AND says who promoted each, and when each was last used (exact time on hover, never if not called)
    cells = dict(zip(rows(page, "tool"), re.findall(r'class="promoted-by">([^<]+)<', page)))
    assert cells == {"unleashed__c-tool": "the agent", "unleashed__a-tool": "the console",
                     "unleashed__b-tool": "the agent"}
    used = re.findall(r'class="last-used">(.*?)</td>', page)
    assert "never" in used[0] and "never" in used[1]
    assert re.search(r'<time datetime="[^"]+" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC">just now</time>', used[2])
    # AND when the idle rule will demote them (21 days from promotion or last use)
    assert page.count(">in 21 days</time>") == 3


def test_promote_and_demote_from_the_console_are_history_events(console: Console, admin: Admin,
                                                                agent: dict[str, Any]) -> None:
    admin.publish()
    tool = {"vendor": "unleashed", "name": "list-sales-orders"}
    # WHEN a person promotes, then demotes, a tool from the agent's page
    promoted = console.post(f"/console/agents/{agent['id']}/promote", tool)
    demoted = console.post(f"/console/agents/{agent['id']}/demote", tool)
    # THEN the set changed as the admin API would have changed it, with cause console
    assert promoted.status_code == demoted.status_code == 303
    events = admin.call("GET", f"/v1/agents/{agent['id']}/history").json_body["items"]
    assert [(e["action"], e["cause"]) for e in events] == [("demoted", "console"), ("promoted", "console")]
    # AND the History card reads them newest first as "the console"
    page = text(console.get(f"/console/agents/{agent['id']}"))
    assert re.findall(r'class="action">(\w+)<', page) == ["demoted", "promoted"]
    assert re.findall(r'class="cause">([^<]+)<', page) == ["the console", "the console"]


def test_history_shows_the_sweeps_causes_in_words(console: Console, admin: Admin, mcp: Mcp,
                                                  agent: dict[str, Any]) -> None:
    # GIVEN a cap of one, three tools the agent promoted, and one it called
    admin.call("PATCH", f"/v1/agents/{agent['id']}", {"cap": 1})
    for name in ("a", "b", "c"):
        admin.publish(name=name)
        mcp.call("promote", {"vendor": "unleashed", "name": name})
    mcp.call("unleashed__c", {"customer": "acme"})
    # WHEN the sweep runs a day later, then a month later
    admin.call("POST", "/v1/sweep", {"now": iso(utcnow() + timedelta(days=1))})
    admin.call("POST", "/v1/sweep", {"now": iso(utcnow() + timedelta(days=30))})
    # THEN History says why each moved, newest first
    page = text(console.get(f"/console/agents/{agent['id']}"))
    assert re.findall(r'class="cause">([^<]+)<', page) == [
        "unused past the idle window", "over the working-set cap", "over the working-set cap",
        "the agent asked", "the agent asked", "the agent asked"]


def test_history_is_paginated(console: Console, admin: Admin, agent: dict[str, Any]) -> None:
    # GIVEN thirty history events (more than a page)
    admin.publish()
    tool = {"vendor": "unleashed", "name": "list-sales-orders"}
    for _ in range(15):
        admin.call("POST", f"/v1/agents/{agent['id']}/working-set", tool)
        admin.call("DELETE", f"/v1/agents/{agent['id']}/working-set/unleashed/list-sales-orders")
    # WHEN the first page and then the older one are read
    first = text(console.get(f"/console/agents/{agent['id']}"))
    older = re.search(r'href="(/console/agents/[^"]+\?history=[^"#]+)#history">Older', first).group(1)
    second = text(console.get(html.unescape(older)))
    # THEN together they hold all thirty, newest first, and the last page offers no older one
    actions = re.findall(r'class="action">(\w+)<', first) + re.findall(r'class="action">(\w+)<', second)
    assert actions == ["demoted", "promoted"] * 15
    assert "Older →" not in second and "← Newest" in second


def test_the_promote_search_uses_find_tools_ranking(console: Console, admin: Admin, mcp: Mcp,
                                                     agent: dict[str, Any]) -> None:
    admin.publish(name="list-sales-orders", description="List sales orders in Unleashed.")
    admin.publish(name="list-customers", description="List customers.")
    admin.publish(vendor="xero", name="create-invoice", description="Create an invoice in Xero.")
    hits = mcp.call("find_tool", {"query": "sales orders"})["structuredContent"]["hits"]
    page = text(console.get(f"/console/agents/{agent['id']}?find=sales+orders"))
    assert rows(page, "candidate") == [f"{hit['vendor']}__{hit['name']}" for hit in hits]


def test_the_token_footprint_compares_the_set_with_the_whole_toolbox(console: Console, admin: Admin,
                                                                     agent: dict[str, Any]) -> None:
    # GIVEN a toolbox of twenty tools, one of them promoted
    for index in range(20):
        admin.publish(name=f"tool-{index}", description="A tool with a long description. " * 20)
    admin.call("POST", f"/v1/agents/{agent['id']}/working-set", {"vendor": "unleashed", "name": "tool-0"})
    # WHEN the agent's page is opened
    page = text(console.get(f"/console/agents/{agent['id']}"))
    # THEN the footprint counts 8 meta-tools + 1 promoted against 20 tools, as an estimate, and the set is smaller
    footprint = page[page.index('id="footprint"'):]
    assert "8 meta-tools" in footprint and "1 promoted" in footprint and "20 tools" in footprint
    assert "An estimate" in footprint
    figures = [int(n.replace(",", "")) for n in re.findall(r"<strong>≈ ([\d,]+) tokens</strong>", footprint)]
    assert figures[0] < figures[1] and abs(figures[2] - (figures[1] - figures[0])) <= 1


def test_a_toolbox_smaller_than_the_meta_tools_spares_nothing(console: Console, admin: Admin,
                                                               agent: dict[str, Any]) -> None:
    admin.publish(description="Short.")
    page = text(console.get(f"/console/agents/{agent['id']}"))
    assert "nothing yet: this toolbox is smaller than the meta-tools" in page


# --- approvals and runs ----------------------------------------------------------------------------

@pytest.mark.usefixtures("write_tool")
def test_the_approval_url_page_shows_the_call_and_approving_runs_it_once(console: Console, mcp: Mcp,
                                                                          vendor: Vendor) -> None:
    # GIVEN a call of a write tool waiting for a person
    answer = mcp.call("run_tool", {**ORDER, "input": {"customer": "acme"}})["structuredContent"]
    path = answer["approval_url"].removeprefix("http://127.0.0.1:8000")
    # WHEN the person opens the link the agent was given
    page = text(console.get(path))
    # THEN it shows the tool, its hints and the input, with Approve and Deny
    assert "<code>unleashed__create-order</code>" in page
    assert '<span class="badge writes">writes</span>' in page and 'badge destructive' not in page
    assert "&#34;customer&#34;: &#34;acme&#34;" in page
    assert ">Approve</button>" in page and ">Deny</button>" in page
    # WHEN they approve
    approved = console.post(f"{path}/approve")
    # THEN the vendor was called once and the page shows the result
    assert approved.status_code == 303 and len(vendor.received) == 1
    after = text(console.get(approved.headers["Location"]))
    assert 'class="status-succeeded">succeeded<' in after and "The run was approved." in after
    # AND a second decision is refused as already decided
    again = console.post(f"{path}/approve")
    assert again.status_code == 409 and len(vendor.received) == 1


@pytest.mark.usefixtures("write_tool")
def test_deny_from_the_agents_page_ends_the_run_unsent(console: Console, admin: Admin, mcp: Mcp, vendor: Vendor,
                                                       agent: dict[str, Any]) -> None:
    run_id = mcp.call("run_tool", {**ORDER, "input": {"customer": "acme"}})["structuredContent"]["run_id"]
    page = text(console.get(f"/console/agents/{agent['id']}"))
    assert f'data-run="{run_id}"' in page
    denied = console.post(f"/console/approvals/{run_id}/deny", {"back": f"/console/agents/{agent['id']}"})
    assert denied.headers["Location"] == f"/console/agents/{agent['id']}?done=denied"
    assert admin.call("GET", f"/v1/runs/{run_id}").json_body["status"] == "denied"
    assert vendor.received == []
    after = text(console.get(f"/console/agents/{agent['id']}"))
    assert "Nothing waits for a person." in after and 'class="status-denied">denied<' in after


@pytest.mark.usefixtures("write_tool")
def test_the_approvals_page_lists_every_pending_run_with_its_agent(console: Console, mcp: Mcp) -> None:
    run_id = mcp.call("run_tool", {**ORDER, "input": {"customer": "acme"}})["structuredContent"]["run_id"]
    page = text(console.get("/console/approvals"))
    assert rows(page, "run") == [run_id] and ">hermes</a>" in page


# --- toolbox ---------------------------------------------------------------------------------------

def test_a_tool_description_with_html_is_escaped_everywhere(console: Console, admin: Admin,
                                                            agent: dict[str, Any]) -> None:
    # GIVEN a tool whose description carries a script
    admin.publish(description="<script>alert(1)</script> Lists orders.")
    admin.call("POST", f"/v1/agents/{agent['id']}/working-set", {"vendor": "unleashed", "name": "list-sales-orders"})
    # WHEN the pages that show descriptions are rendered
    pages = [text(console.get(path)) for path in (
        "/console/tools", "/console/tools/unleashed/list-sales-orders", f"/console/agents/{agent['id']}",
        "/console/tools?q=orders")]
    # THEN the description is shown as text, never as markup
    for page in pages:
        assert "&lt;script&gt;alert(1)&lt;/script&gt; Lists orders." in page
        assert "<script>alert(1)" not in page


@pytest.mark.usefixtures("write_tool")
def test_toolbox_lists_tools_with_hints_versions_and_who_has_them(console: Console, admin: Admin,
                                                                  agent: dict[str, Any]) -> None:
    admin.publish()
    admin.publish(description="Version two.")
    admin.call("POST", f"/v1/agents/{agent['id']}/working-set", {"vendor": "unleashed", "name": "list-sales-orders"})
    page = text(console.get("/console/tools"))
    assert rows(page, "tool") == ["unleashed__create-order", "unleashed__list-sales-orders"]
    listed = page[page.index('data-tool="unleashed__list-sales-orders"'):]
    assert "read-only" in listed and ">v2</a>" in listed and ">hermes</a>" in listed
    created = page[page.index('data-tool="unleashed__create-order"'):page.index('data-tool="unleashed__list-sales')]
    assert ">writes<" in created and ">nobody<" in created


def test_every_version_of_a_tool_is_viewable(console: Console, admin: Admin) -> None:
    admin.publish(description="Version one.")
    admin.publish(description="Version two.")
    newest = text(console.get("/console/tools/unleashed/list-sales-orders"))
    first = text(console.get("/console/tools/unleashed/list-sales-orders?version=1"))
    assert '<p class="description">Version two.</p>' in newest
    assert '<p class="description">Version one.</p>' in first
    assert console.get("/console/tools/unleashed/list-sales-orders?version=9").status_code == 404


def test_toolbox_search_ranks_as_find_tool_does(console: Console, admin: Admin, mcp: Mcp) -> None:
    admin.publish(name="list-sales-orders", description="List sales orders in Unleashed.")
    admin.publish(name="get-sales-order", description="Get one sales order.")
    admin.publish(vendor="xero", name="list-invoices", description="List invoices.")
    hits = mcp.call("find_tool", {"query": "unleashed sales orders"})["structuredContent"]["hits"]
    page = text(console.get("/console/tools?q=unleashed+sales+orders"))
    assert rows(page, "tool") == [f"{hit['vendor']}__{hit['name']}" for hit in hits]


# --- connections -----------------------------------------------------------------------------------

def test_a_connection_secret_is_typed_once_and_never_shown(console: Console, admin: Admin) -> None:
    # WHEN a connection is added with a secret
    added = console.post("/console/connections", {"vendor": "unleashed", "auth_type": "header",
                                                  "header_name": "X-Api-Key", "secret": "sk-very-secret",
                                                  "hosts": "api.unleashed.example"})
    # THEN it exists, and neither the answer nor the page shows the secret
    assert added.status_code == 303
    page = text(console.get(added.headers["Location"]))
    [connection] = admin.call("GET", "/v1/connections").json_body["items"]
    assert f'data-connection="{connection["id"]}"' in page and "<code>X-Api-Key</code>" in page
    assert "sk-very-secret" not in page and "sk-very-secret" not in text(added)


def test_a_refused_connection_form_does_not_echo_the_secret(console: Console, admin: Admin) -> None:
    answer = console.post("/console/connections", {"vendor": "Not A Vendor", "secret": "sk-very-secret"})
    assert answer.status_code == 400
    assert "vendor:" in text(answer) and "sk-very-secret" not in text(answer)
    assert admin.call("GET", "/v1/connections").json_body["items"] == []


def test_revoking_confirms_which_agents_tools_it_demotes_then_demotes_them(console: Console, admin: Admin,
                                                                           agent: dict[str, Any]) -> None:
    # GIVEN a connection, a tool using it promoted for one agent
    created = admin.call("POST", "/v1/connections", {"vendor": "unleashed", "auth": {"type": "bearer", "token": "t"},
                                                      "hosts": ["127.0.0.1:9"]}).json_body
    admin.publish(connection=created["id"])
    admin.call("POST", f"/v1/agents/{agent['id']}/working-set", {"vendor": "unleashed", "name": "list-sales-orders"})
    # WHEN the person asks to revoke it
    confirm = text(console.get(f"/console/connections/{created['id']}/revoke"))
    # THEN the confirmation names the agent and its tool, and nothing is revoked yet
    affected = confirm[confirm.index('id="affected"'):]
    assert "<code>unleashed__list-sales-orders</code>" in affected and ">hermes</a>" in affected
    assert admin.call("GET", f"/v1/connections/{created['id']}").json_body["status"] == "active"
    # WHEN they confirm
    done = text(console.post(f"/console/connections/{created['id']}/revoke"))
    # THEN it is revoked, the tool demoted, and History says why
    assert admin.call("GET", f"/v1/connections/{created['id']}").json_body["status"] == "revoked"
    assert "<code>unleashed__list-sales-orders</code> for" in done
    page = text(console.get(f"/console/agents/{agent['id']}"))
    assert re.findall(r'class="cause">([^<]+)<', page)[0] == "its connection was revoked"
