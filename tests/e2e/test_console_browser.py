"""The console in a real browser: Playwright driving Debian's Chromium headless against the served
local stack. Screenshots of the main pages go to test-artifacts/console/ (printed at the end)."""

from __future__ import annotations

import base64
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
def browser() -> Iterator[Any]:
    if SCREENSHOTS.exists():
        shutil.rmtree(SCREENSHOTS)
    SCREENSHOTS.mkdir(parents=True)  # tests/conftest.py names the folder at the end of the run
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
    page.click("label[for=kind-header]")
    # THEN only the chosen kind's fields show (CSS alone): the header name, not the OAuth ones
    assert page.is_visible("#header_name") and not page.is_visible("#token_url")
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


# --- pictures and polish (issue 28) -----------------------------------------------------------------

COLOURS = {"promoted": (31, 122, 77), "demoted by the console": (154, 163, 181), "calls": (47, 91, 211),
           "spared": (63, 166, 107), "listed": (138, 147, 166)}


def colours_in(browser: Any, png: bytes) -> dict[str, int]:
    """How many pixels of a screenshot have each of COLOURS (decoded by the browser itself, in a
    blank page of its own: no image library needed)."""
    context = browser.new_context()
    blank = context.new_page()
    counts = blank.evaluate("""async ([data, colours]) => {
        const image = new Image();
        image.src = "data:image/png;base64," + data;
        await image.decode();
        const canvas = document.createElement("canvas");
        canvas.width = image.width; canvas.height = image.height;
        const drawing = canvas.getContext("2d");
        drawing.drawImage(image, 0, 0);
        const pixels = drawing.getImageData(0, 0, image.width, image.height).data;
        const counts = Object.fromEntries(Object.keys(colours).map(name => [name, 0]));
        for (let i = 0; i < pixels.length; i += 4) {
            for (const [name, [r, g, b]] of Object.entries(colours)) {
                if (pixels[i] === r && pixels[i + 1] === g && pixels[i + 2] === b) counts[name]++;
            }
        }
        return counts;
    }""", [base64.b64encode(png).decode(), COLOURS])
    context.close()
    return counts


def test_the_agent_page_pictures_its_working_set_and_each_tools_calls(page: Any, browser: Any, console_stack: Stack,
                                                                     vendor: Vendor) -> None:
    # GIVEN an agent that got three tools, gave one back from the console and called one three times
    shop = f"shop{uuid.uuid4().hex[:6]}"
    for name in ("list-orders", "get-invoice", "list-customers"):
        console_stack.publish({"vendor": shop, "name": name, "description": f"{name.replace('-', ' ')} in the shop.",
                               "input_schema": {"type": "object"}, "annotations": {"readOnlyHint": True},
                               "request": {"method": "GET", "url": f"{vendor.url}/{name}"}})
    agent = console_stack.new_agent()
    for name in ("list-orders", "get-invoice", "list-customers"):
        assert console_stack.admin("POST", f"/v1/agents/{agent['id']}/working-set", {"vendor": shop, "name": name})[0] == 201
    assert console_stack.admin("DELETE", f"/v1/agents/{agent['id']}/working-set/{shop}/list-customers")[0] == 200
    for _ in range(3):
        assert not mcp_call(console_stack, agent["api_key"], f"{shop}__list-orders", {}).get("isError")
    # WHEN the person opens the agent's page
    page.goto(f"{console_stack.url}/console/agents/{agent['id']}")
    moves = page.locator("#chart-working-set")
    picture = moves.locator("svg.chart")
    # THEN the working-set picture is drawn, at a real size, with its text alternative naming the figures
    expect(picture).to_be_visible()
    box = picture.bounding_box()
    assert box["width"] > 300 and box["height"] > 100
    assert picture.get_attribute("role") == "img"
    described = page.locator(f"#{picture.get_attribute('aria-describedby')}").text_content()
    assert "3 promoted and 1 demoted (1 the console)" in described and "to 2 tools" in described
    assert moves.locator(".chart-description").inner_text() == described
    # AND its bars are there, each with a hover text saying the day's figures
    assert "3 promoted" in moves.locator("rect.promoted title").first.text_content()
    # AND the calls picture has one bar, for the called tool, and says 3 calls
    uses = page.locator("#chart-tool-use")
    assert uses.locator("svg text.label").first.text_content() == f"{shop}__list-orders"
    bar = uses.locator("rect.calls").first.bounding_box()
    assert bar["width"] > 50 and bar["height"] > 5
    assert uses.locator("desc").text_content().startswith("3 calls over the last 30 days across 1 tools")
    # AND the screenshots show the bars in their colours (checked pixel by pixel)
    shot(page, "18-agent-pictures-page")
    moves.screenshot(path=str(SCREENSHOTS / "19-agent-working-set-picture.png"))
    uses.screenshot(path=str(SCREENSHOTS / "20-agent-tool-use-picture.png"))
    seen = colours_in(browser, (SCREENSHOTS / "19-agent-working-set-picture.png").read_bytes())
    assert seen["promoted"] > 20 and seen["demoted by the console"] > 20, seen
    assert colours_in(browser, (SCREENSHOTS / "20-agent-tool-use-picture.png").read_bytes())["calls"] > 200
    # AND the row's Pin and Demote buttons sit side by side on one line, the same height
    row = page.locator(f"tr[data-tool='{shop}__list-orders']")
    pin, demote = row.locator("button:has-text('Pin')").bounding_box(), row.locator("button:has-text('Demote')").bounding_box()
    assert abs(pin["y"] - demote["y"]) < 1 and abs(pin["height"] - demote["height"]) < 1 and pin["x"] < demote["x"]


def test_the_toolbox_page_pictures_calls_per_tool_and_tokens_spared(page: Any, browser: Any, console_stack: Stack,
                                                                   vendor: Vendor) -> None:
    # GIVEN a toolbox much larger than the meta-tools, and an agent that called a tool twice
    shop = f"shop{uuid.uuid4().hex[:6]}"
    for name in ("list-orders", *(f"long-{index}" for index in range(5))):
        console_stack.publish({"vendor": shop, "name": name, "description": "List orders in the shop. " * 40,
                               "input_schema": {"type": "object"}, "annotations": {"readOnlyHint": True},
                               "request": {"method": "GET", "url": f"{vendor.url}/orders"}})
    agent = console_stack.new_agent()
    for _ in range(2):
        mcp_call(console_stack, agent["api_key"], "run_tool", {"vendor": shop, "name": "list-orders", "input": {}})
    # WHEN the person opens the toolbox
    page.goto(f"{console_stack.url}/console/tools")
    calls, spared = page.locator("#chart-toolbox-calls"), page.locator("#chart-spared")
    # THEN both pictures are drawn at a real size
    for figure in (calls, spared):
        expect(figure.locator("svg.chart")).to_be_visible()
        assert figure.locator("svg.chart").bounding_box()["height"] > 20
    # AND the calls picture's figures list the tool with its two calls
    calls.locator("summary").click()
    row = calls.locator("table.chart-figures tr", has_text=f"{shop}__list-orders")
    assert row.locator("td").nth(1).inner_text() == "2"
    # AND the agent has a row in the spared picture, whose figures match its bar's hover text
    spared.locator("summary").click()
    cells = spared.locator("table.chart-figures tr", has_text=agent["name"]).locator("td").all_inner_texts()
    tip = spared.locator("rect.spared title", has_text=agent["name"]).first.text_content()
    assert tip == f"{agent['name']}: lists ≈ {cells[1]} tokens, spared ≈ {cells[2]}"
    # AND the screenshot shows the calls bar and the spared bars in their colours
    png = page.locator("#pictures").screenshot(path=str(SCREENSHOTS / "21-toolbox-pictures.png"))
    seen = colours_in(browser, png)
    assert seen["calls"] > 100 and seen["spared"] > 100, seen


def test_the_front_door_and_the_icon_and_no_failed_request_on_a_page(page: Any, console_stack: Stack) -> None:
    # GIVEN every answer the browser gets is watched
    failed: list[str] = []
    page.on("response", lambda response: failed.append(f"{response.status} {response.url}")
            if response.status >= 400 else None)
    # WHEN the person opens the site's root
    page.goto(f"{console_stack.url}/")
    # THEN the browser lands on the console, and neither the page nor its icon failed
    assert page.url == f"{console_stack.url}/console/agents"
    icon = page.request.get(f"{console_stack.url}/favicon.ico")
    assert icon.status == 200 and icon.headers["content-type"] == "image/svg+xml"
    page.goto(f"{console_stack.url}/console/tools")
    assert failed == []


def test_the_connections_form_shows_only_the_chosen_kinds_fields_without_javascript(browser: Any,
                                                                                      console_stack: Stack) -> None:
    # GIVEN a browser with JavaScript turned off, signed in
    context = browser.new_context(viewport=LAPTOP, java_script_enabled=False)
    plain = context.new_page()
    sign_in(plain, console_stack)
    plain.goto(f"{console_stack.url}/console/connections")
    # THEN a bearer token (checked by default) needs no extra field
    assert not any(plain.is_visible(f"#{field}") for field in ("header_name", "param_name", "username", "token_url"))
    # WHEN the person chooses HTTP Basic, then OAuth 2 authorization code
    plain.click("label[for=kind-basic]")
    basic = {field: plain.is_visible(f"#{field}") for field in ("username", "header_name", "token_url")}
    plain.click("label[for=kind-oauth2_authorization_code]")
    shot(plain, "22-connections-oauth-fields")
    oauth = {field: plain.is_visible(f"#{field}") for field in ("authorize_url", "token_url", "client_id", "username")}
    context.close()
    # THEN each shows exactly its own fields
    assert basic == {"username": True, "header_name": False, "token_url": False}
    assert oauth == {"authorize_url": True, "token_url": True, "client_id": True, "username": False}


def test_url_inputs_are_styled_as_the_text_ones(page: Any, console_stack: Stack) -> None:
    # WHEN the person chooses OAuth 2 client credentials on the Connections form
    page.goto(f"{console_stack.url}/console/connections")
    page.click("label[for=kind-oauth2_client_credentials]")
    # THEN the token URL input (type url) has the text inputs' border, corners, padding and width
    style = ("el => ['borderTopWidth', 'borderTopColor', 'borderRadius', 'paddingLeft', 'maxWidth']"
             ".map(name => getComputedStyle(el)[name])")
    assert page.locator("#token_url").evaluate(style) == page.locator("#client_id").evaluate(style)
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
