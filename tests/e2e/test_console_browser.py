"""The console in a real browser: Playwright driving Debian's Chromium headless against the served
local stack. Screenshots of the main pages go to test-artifacts/console/ (printed at the end)."""

from __future__ import annotations

import json
import re
import shutil
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect, sync_playwright

from tests.conftest import Vendor
from tests.e2e.conftest import ROOT, Stack, start_stack, stop_stack

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SCREENSHOTS = ROOT / "test-artifacts" / "console"
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="/usr/bin/chromium is not installed: `./dev test` installs Debian's chromium (apt-get install chromium); "
           "Playwright's own browser download cannot work here",
)


@pytest.fixture(scope="module")
def console_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack of its own, so the screenshots show only what these tests made."""
    running = start_stack(tmp_path_factory.mktemp("console-stack"))
    yield running
    stop_stack(running)


@pytest.fixture(scope="module")
def browser(request: pytest.FixtureRequest) -> Iterator[Any]:
    if SCREENSHOTS.exists():
        shutil.rmtree(SCREENSHOTS)
    SCREENSHOTS.mkdir(parents=True)
    with request.config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        print(f"\nConsole screenshots: {SCREENSHOTS}", flush=True)  # printed once, past pytest's capture
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any, console_stack: Stack) -> Iterator[Any]:
    """A signed-in laptop-sized page (a fresh browser context: its own cookies)."""
    context = browser.new_context(viewport=LAPTOP)
    signed_in = context.new_page()
    sign_in(signed_in, console_stack)
    yield signed_in
    context.close()


def sign_in(page: Any, stack: Stack) -> None:
    page.goto(f"{stack.url}/console/agents")
    page.fill("#token", stack.running.token)
    page.click("button:has-text('Sign in')")
    page.wait_for_url(re.compile(r"/console/agents$"))


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def publish_read_tools(stack: Stack, vendor: str, *names: str) -> None:
    for name in names:
        description = f"{name.replace('-', ' ').capitalize()} in {vendor}."
        stack.publish({"vendor": vendor, "name": name, "description": description,
                       "input_schema": {"type": "object", "properties": {"customer": {"type": "string"}}},
                       "annotations": {"readOnlyHint": True},
                       "request": {"method": "GET", "url": "http://127.0.0.1:9/x"}})


def history(page: Any) -> list[tuple[str, str, str]]:
    """(action, tool, cause) of each History row, newest first."""
    found = []
    for row in page.locator("#history tr.event").all():
        found.append((row.locator(".action").inner_text(), row.locator("code").inner_text(),
                      row.locator(".cause").inner_text()))
    return found


def mcp_call(stack: Stack, key: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One tools/call over HTTP, as a 2025-11-25 harness sends it; answers the tool result."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}}).encode()
    request = urllib.request.Request(f"{stack.url}/mcp", data=body, method="POST", headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json", "MCP-Protocol-Version": "2025-11-25",
        "Accept": "application/json, text/event-stream"})
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
        if response.headers.get("Content-Type", "").startswith("text/event-stream"):
            text = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")][-1]
    return json.loads(text)["result"]


def test_sign_in_and_create_an_agent(browser: Any, console_stack: Stack) -> None:
    context = browser.new_context(viewport=LAPTOP)
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = context.new_page()
    # GIVEN a browser without a session
    page.goto(f"{console_stack.url}/console/agents")
    # THEN it is at the sign-in form
    assert page.url.endswith("/console/sign-in?next=%2Fconsole%2Fagents")
    shot(page, "01-sign-in")
    # WHEN a wrong token is tried, then the admin token
    page.fill("#token", "wsa_wrong-token-wrong-token")
    page.click("button:has-text('Sign in')")
    assert page.locator("[role=alert]").inner_text() == "That admin token is not valid."
    page.fill("#token", console_stack.running.token)
    page.click("button:has-text('Sign in')")
    # THEN the agents list opens
    page.wait_for_url(re.compile(r"/console/agents$"))
    # WHEN an agent is created
    page.fill("#create #name-new", "athena")
    page.fill("#create #cap-new", "12")
    page.click("button:has-text('Create agent')")
    # THEN its key is shown once with the MCP URL, and Copy puts the key on the clipboard
    key = page.locator("#api-key").inner_text()
    assert key.startswith("wsk_")
    assert page.locator("#mcp-url").inner_text().endswith("/mcp")
    page.click("[data-copy=api-key]")
    expect(page.locator("[data-copy=api-key]")).to_have_text("Copied")  # waits for the clipboard
    assert page.evaluate("navigator.clipboard.readText()") == key
    shot(page, "03-agent-created")
    # AND the list shows the new agent with its cap
    page.goto(f"{console_stack.url}/console/agents")
    row = page.locator("tr", has=page.locator("a:text-is('athena')"))
    assert "0 / 12" in row.inner_text()
    shot(page, "02-agents")
    context.close()


def test_promote_and_demote_then_history_after_a_sweep(page: Any, console_stack: Stack) -> None:
    # GIVEN an agent and a toolbox of three read tools
    shop = f"shop{uuid.uuid4().hex[:6]}"
    publish_read_tools(console_stack, shop, "list-sales-orders", "list-customers", "get-invoice")
    agent = console_stack.new_agent()
    page.goto(f"{console_stack.url}/console/agents/{agent['id']}")
    # WHEN two tools are found and promoted from the console, and one of them demoted
    page.fill("#find", "sales orders")
    page.click("form:has(#find) button:has-text('Search')")
    expect(page).to_have_url(re.compile(r"find=sales\+orders"))
    for name in ("list-sales-orders", "get-invoice"):
        page.locator(f"[data-candidate='{shop}__{name}'] button:has-text('Promote')").click()
        expect(page.locator(".notice.ok")).to_have_text(f"Promoted {shop}__{name} from the console.")
    expect(page.locator("#working-set tr[data-tool]")).to_have_count(2)
    page.locator(f"tr[data-tool='{shop}__get-invoice'] button:has-text('Demote')").click()
    expect(page.locator(".notice.ok")).to_have_text(f"Demoted {shop}__get-invoice from the console.")
    # THEN the set holds the one left, promoted by the console, never used, and History says so
    assert [row.get_attribute("data-tool") for row in page.locator("#working-set tr[data-tool]").all()] == [
        f"{shop}__list-sales-orders"]
    assert page.locator(".promoted-by").inner_text().startswith("the console")
    assert page.locator(".last-used").inner_text() == "never"
    assert history(page) == [("demoted", f"{shop}__get-invoice", "the console"),
                             ("promoted", f"{shop}__get-invoice", "the console"),
                             ("promoted", f"{shop}__list-sales-orders", "the console")]
    shot(page, "04-agent")
    # WHEN the sweep runs past the idle window
    later = (datetime.now(UTC) + timedelta(days=22)).isoformat().replace("+00:00", "Z")
    status, report = console_stack.admin("POST", "/v1/sweep", {"now": later})
    assert status == 200, report
    page.reload()
    # THEN the tool is gone and History shows why, newest first
    assert page.locator("#working-set tr[data-tool]").count() == 0
    assert history(page)[0] == ("demoted", f"{shop}__list-sales-orders", "unused past the idle window")
    shot(page, "05-agent-after-sweep")


def test_edit_cap_out_of_range_shows_the_reason_and_saves_nothing(page: Any, console_stack: Stack) -> None:
    # GIVEN an agent's page
    agent = console_stack.new_agent()
    page.goto(f"{console_stack.url}/console/agents/{agent['id']}")
    # WHEN the cap is set to 501 and saved
    page.fill("#settings input[name=cap]", "501")
    page.click("#settings button:has-text('Save')")
    # THEN the reason is shown, the typed value kept, and nothing saved
    assert page.locator("#settings [role=alert]").inner_text() == (
        "cap: Input should be less than or equal to 500. Nothing was saved.")
    assert page.locator("#settings input[name=cap]").input_value() == "501"
    shot(page, "06-settings-error")
    assert console_stack.admin("GET", f"/v1/agents/{agent['id']}")[1]["cap"] == 20
    # WHEN a value in range is saved
    page.fill("#settings input[name=cap]", "500")
    page.click("#settings button:has-text('Save')")
    # THEN it is saved, with the note that it applies at the next sweep
    assert "take effect at the next sweep" in page.locator(".notice.ok").inner_text()
    assert console_stack.admin("GET", f"/v1/agents/{agent['id']}")[1]["cap"] == 500


def test_approve_a_pending_run(page: Any, console_stack: Stack, vendor: Vendor) -> None:
    # GIVEN a write tool and an agent whose first call of it waits for a person
    shop = f"shop{uuid.uuid4().hex[:6]}"
    console_stack.publish({"vendor": shop, "name": "create-order", "description": "Create a sales order.",
                           "input_schema": {"type": "object", "properties": {"customer": {"type": "string"}}},
                           "annotations": {"destructiveHint": False},
                           "request": {"method": "POST", "url": f"{vendor.url}/orders"}})
    agent = console_stack.new_agent()
    waiting = mcp_call(console_stack, agent["api_key"], "run_tool",
                       {"vendor": shop, "name": "create-order", "input": {"customer": "acme"}})["structuredContent"]
    assert waiting["status"] == "awaiting_approval" and vendor.received == []
    page.goto(f"{console_stack.url}/console/approvals")
    shot(page, "07-approvals")
    # WHEN the person opens the approval link the agent was given, and approves
    page.goto(console_stack.url + "/console/approvals/" + waiting["approval_url"].rsplit("/", 1)[1])
    assert '"customer": "acme"' in page.locator("#input").inner_text()
    shot(page, "08-approval")
    page.click("button:has-text('Approve')")
    # THEN the run succeeded, the vendor got the request once, and the agent reads the result
    expect(page.locator("#status")).to_contain_text("succeeded")
    assert len(vendor.received) == 1
    shot(page, "09-approved")
    got = mcp_call(console_stack, agent["api_key"], "get_run", {"run_id": waiting["run_id"]})["structuredContent"]
    assert got["status"] == "succeeded"


def test_toolbox_and_connections_pages(page: Any, browser: Any, console_stack: Stack) -> None:
    # GIVEN a connection added from the console, with its secret typed once
    page.goto(f"{console_stack.url}/console/connections")
    page.fill("#vendor", "unleashed")
    page.select_option("#auth_type", "header")
    page.fill("#header_name", "X-Api-Key")
    page.fill("#secret", "sk-browser-secret")
    page.fill("#hosts", "127.0.0.1:9")
    page.click("button:has-text('Add connection')")
    # THEN it is listed, and its secret appears nowhere
    assert "added" in page.locator(".notice.ok").inner_text()
    assert "sk-browser-secret" not in page.content()
    shot(page, "10-connections")
    # WHEN a tool uses it and is promoted for an agent, and the person starts to revoke it
    connection_id = page.locator("tr[data-connection] code").first.inner_text()
    console_stack.publish({"vendor": "unleashed", "name": "list-orders", "description": "List orders.",
                           "input_schema": {"type": "object"}, "annotations": {"readOnlyHint": True},
                           "connection": connection_id, "request": {"method": "GET", "url": "http://127.0.0.1:9/o"}})
    agent = console_stack.new_agent()
    console_stack.admin("POST", f"/v1/agents/{agent['id']}/working-set", {"vendor": "unleashed", "name": "list-orders"})
    page.click(f"tr[data-connection='{connection_id}'] a:has-text('Revoke')")
    # THEN the confirmation names the agent whose tool it will demote
    assert agent["name"] in page.locator("#affected").inner_text()
    shot(page, "11-revoke-confirmation")
    # AND the toolbox shows the tool with the agent that has it, and search finds it
    page.goto(f"{console_stack.url}/console/tools?q=orders")
    assert agent["name"] in page.locator("tr[data-tool='unleashed__list-orders']").inner_text()
    shot(page, "12-toolbox")
    # AND the agent's page reads well on a phone
    phone = browser.new_context(viewport=PHONE)
    small = phone.new_page()
    sign_in(small, console_stack)
    small.goto(f"{console_stack.url}/console/agents/{agent['id']}")
    width = small.evaluate("document.documentElement.scrollWidth")
    shot(small, "13-agent-phone")
    phone.close()
    assert width <= PHONE["width"]


def test_account_page_allow_list_and_sign_out_everywhere(page: Any, browser: Any, console_stack: Stack) -> None:
    # GIVEN a second browser signed in to the same account
    other = browser.new_context(viewport=LAPTOP)
    elsewhere = other.new_page()
    sign_in(elsewhere, console_stack)
    # WHEN the person opens Account from the navigation and saves a bad allow list
    page.click("nav >> text=Account")
    page.wait_for_url(re.compile(r"/console/account$"))
    page.fill("#allowed_hosts", "api.example.com\nhttps://status.example.org")
    page.click("#allowed-hosts button:has-text('Save')")
    # THEN the reason is shown, what was typed is kept, and nothing is saved
    assert "Nothing was saved." in page.locator("#allowed-hosts [role=alert]").inner_text()
    assert page.locator("#allowed_hosts").input_value() == "api.example.com\nhttps://status.example.org"
    assert console_stack.admin("GET", "/v1/account")[1] == {"allowed_hosts": []}
    # WHEN a valid list is saved
    page.fill("#allowed_hosts", "api.example.com, status.example.org:8443")
    page.click("#allowed-hosts button:has-text('Save')")
    # THEN it is saved and shown one host a line
    expect(page.locator(".notice.ok")).to_have_text("Allowed hosts saved.")
    assert page.locator("#allowed_hosts").input_value() == "api.example.com\nstatus.example.org:8443"
    assert console_stack.admin("GET", "/v1/account")[1] == {"allowed_hosts": ["api.example.com",
                                                                              "status.example.org:8443"]}
    shot(page, "14-account")
    # WHEN the person signs out everywhere
    page.click("button:has-text('Sign out everywhere')")
    # THEN this browser is at sign-in, and the other browser's next page asks it to sign in too
    page.wait_for_url(re.compile(r"/console/sign-in$"))
    elsewhere.goto(f"{console_stack.url}/console/agents")
    assert "/console/sign-in?next=" in elsewhere.url
    other.close()
    console_stack.admin("PUT", "/v1/account/allowed-hosts", {"allowed_hosts": []})


def test_import_an_openapi_document_check_then_publish(page: Any, console_stack: Stack) -> None:
    # GIVEN a small OpenAPI document, one operation of which Workset cannot send
    pets = f"pets{uuid.uuid4().hex[:6]}"
    document = """openapi: 3.0.3
info: {title: Pets, version: '1'}
servers: [{url: 'http://127.0.0.1:9/v1'}]
paths:
  /pets:
    get: {operationId: listPets, summary: List pets., responses: {'200': {description: ok}}}
  /session:
    get:
      operationId: whoAmI
      parameters: [{name: sid, in: cookie, required: true, schema: {type: string}}]
      responses: {'200': {description: ok}}
"""
    # WHEN the person opens Import from the navigation, pastes it and checks it
    page.click("nav >> text=Import")
    page.wait_for_url(re.compile(r"/console/import$"))
    expect(page.locator("#upload")).to_be_visible()  # the file reader, once its script ran
    page.fill("#vendor", pets)
    page.fill("#document", document)
    page.click("#import button:has-text('Check')")
    # THEN the table shows every operation with what publishing would do, and nothing is stored yet
    expect(page.locator("#report tr[data-line]")).to_have_count(2)
    assert page.locator("tr[data-line='GET /pets']").get_attribute("data-outcome") == "published"
    assert "cookie parameter 'sid'" in page.locator("tr[data-line='GET /session'] .reason").inner_text()
    assert console_stack.admin("GET", f"/v1/tools/{pets}/list-pets")[0] == 404
    shot(page, "15-import-check")
    # WHEN they publish
    page.click("#report button:has-text('Publish')")
    # THEN the counts say so, and the published tool links to its page
    expect(page.locator("#report .notice.ok")).to_contain_text("Imported: 1 published, 1 skipped.")
    shot(page, "16-import-published")
    page.click(f"#report a:has-text('{pets}__list-pets')")
    page.wait_for_url(re.compile(rf"/console/tools/{pets}/list-pets$"))
    assert "OpenAPI GET /pets" in page.locator("#origin").inner_text()
    # AND the toolbox lists it
    page.goto(f"{console_stack.url}/console/tools?q={pets}")
    expect(page.locator(f"tr[data-tool='{pets}__list-pets']")).to_be_visible()


def test_pin_a_tool_from_the_agent_page_and_see_the_marker(page: Any, console_stack: Stack) -> None:
    # GIVEN an agent with two promoted tools
    shop = f"shop{uuid.uuid4().hex[:6]}"
    publish_read_tools(console_stack, shop, "list-sales-orders", "get-invoice")
    agent = console_stack.new_agent()
    for name in ("list-sales-orders", "get-invoice"):
        ref = {"vendor": shop, "name": name}
        assert console_stack.admin("POST", f"/v1/agents/{agent['id']}/working-set", ref)[0] == 201
    page.goto(f"{console_stack.url}/console/agents/{agent['id']}")
    expect(page.locator("#working-set .pin-marker")).to_have_count(0)
    # WHEN the person pins one from its row
    page.locator(f"tr[data-tool='{shop}__get-invoice'] button:has-text('Pin')").click()
    # THEN the page says so, the row carries the pin marker and offers Unpin, and the other row does not
    expect(page.locator(".notice.ok")).to_have_text(f"Pinned {shop}__get-invoice: the sweep never demotes it.")
    pinned_row = page.locator(f"tr[data-tool='{shop}__get-invoice']")
    expect(pinned_row.locator(".pin-marker")).to_have_text("pinned")
    expect(pinned_row.locator("button:has-text('Unpin')")).to_be_visible()
    expect(page.locator(f"tr[data-tool='{shop}__list-sales-orders'] .pin-marker")).to_have_count(0)
    assert history(page)[0] == ("pinned", f"{shop}__get-invoice", "the console")
    shot(page, "17-agent-pinned")
    # AND the admin API lists it pinned, and a sweep past the idle window demotes only the other
    listed = console_stack.admin("GET", f"/v1/agents/{agent['id']}/working-set")[1]["items"]
    items = {item["name"]: item for item in listed}
    assert (items["get-invoice"]["pinned"], items["list-sales-orders"]["pinned"]) == (True, False)
    later = (datetime.now(UTC) + timedelta(days=22)).isoformat().replace("+00:00", "Z")
    assert console_stack.admin("POST", "/v1/sweep", {"now": later})[0] == 200
    page.reload()
    assert [row.get_attribute("data-tool") for row in page.locator("#working-set tr[data-tool]").all()] == [
        f"{shop}__get-invoice"]


def test_account_page_shows_what_find_tool_learned_and_resets_it(page: Any, console_stack: Stack) -> None:
    # GIVEN an agent whose search was followed by a promote of a hit
    publish_read_tools(console_stack, "ledger", "list-invoices", "list-credit-notes")
    agent = console_stack.new_agent()
    hits = mcp_call(console_stack, agent["api_key"], "find_tool", {"query": "ledger invoices"})["structuredContent"]
    first = hits["hits"][0]
    mcp_call(console_stack, agent["api_key"], "promote", {"vendor": first["vendor"], "name": first["name"]})
    # WHEN the person opens Account
    page.click("nav >> text=Account")
    page.wait_for_url(re.compile(r"/console/account$"))
    # THEN the card shows the pair and its count
    card = page.locator("#search-memory")
    assert card.locator("#learned-count").inner_text() == "1"
    assert "ledger invoices" in card.locator("table").inner_text()
    shot(page, "15-account-search-memory")
    # WHEN they reset it
    card.locator("button:has-text('Reset search memory')").click()
    # THEN the page says so, the count is 0, and the API agrees
    expect(page.locator("#search-memory .notice.ok")).to_contain_text("Search memory reset")
    assert page.locator("#learned-count").inner_text() == "0"
    assert console_stack.admin("GET", "/v1/account/search-memory")[1]["count"] == 0


def test_set_every_call_on_a_tool_and_each_call_waits_again(page: Any, console_stack: Stack, vendor: Vendor) -> None:
    # GIVEN a non-destructive write tool (asks on the first call by default)
    shop = f"shop{uuid.uuid4().hex[:6]}"
    console_stack.publish({"vendor": shop, "name": "refund", "description": "Refund an order.",
                           "input_schema": {"type": "object", "properties": {"order": {"type": "string"}}},
                           "annotations": {"destructiveHint": False},
                           "request": {"method": "POST", "url": f"{vendor.url}/refunds"}})
    page.goto(f"{console_stack.url}/console/tools/{shop}/refund")
    expect(page.locator("#approval-policy")).to_have_attribute("data-policy", "first_call")
    # WHEN the person sets it to ask on every call
    page.click("#approval-policy button:has-text('Ask on every call')")
    # THEN the page says so and names who set it
    expect(page.locator("#approval-policy")).to_have_attribute("data-policy", "every_call")
    expect(page.locator("#policy-history")).to_contain_text("every call")
    shot(page, "14-approval-policy")
    # AND an approved call does not let the next one through: it waits, marked in Approvals
    agent = console_stack.new_agent()
    first = mcp_call(console_stack, agent["api_key"], "run_tool",
                     {"vendor": shop, "name": "refund", "input": {"order": "o1"}})["structuredContent"]
    page.goto(console_stack.url + "/console/approvals/" + first["run_id"])
    expect(page.locator("#every-call")).to_be_visible()
    page.click("button:has-text('Approve')")
    expect(page.locator("#status")).to_contain_text("succeeded")
    second = mcp_call(console_stack, agent["api_key"], "run_tool",
                      {"vendor": shop, "name": "refund", "input": {"order": "o2"}})["structuredContent"]
    assert second["status"] == "awaiting_approval" and second["run_id"] != first["run_id"]
    page.goto(f"{console_stack.url}/console/approvals")
    expect(page.locator(f"tr[data-run='{second['run_id']}'] .every-call")).to_be_visible()
    assert len([r for r in vendor.received if r["path"] == "/refunds"]) == 1
