"""The console's pictures: the agent page's working set over 30 days and each tool's calls, the
toolbox page's calls per tool and tokens spared per agent. Drawn from History and runs; their
text alternative says the same figures; their DynamoDB reads are bounded whatever the data."""

from __future__ import annotations

import html
import re
from datetime import datetime, timedelta
from typing import Any

import pytest

from chalicelib.agents import workingset
from chalicelib.base.causes import Cause, PromotedBy
from chalicelib.base.clock import utcnow
from chalicelib.console import activity, charts
from chalicelib.identity import accounts
from tests.conftest import Admin, Console, Mcp, Vendor
from tests.iam import record_aws_fixture  # noqa: F401 - fixture `record_aws`: every AWS call a test makes
from tests.infra import AwsCall


def _account(admin: Admin) -> str:
    found = accounts.account_of_admin_token(admin.token)
    assert found is not None
    return found


def _publish(admin: Admin, vendor: Vendor, *names: str) -> None:
    for name in names:
        admin.publish(name=name, description=f"{name.replace('-', ' ').capitalize()} in Unleashed.",
                      input_schema={"type": "object", "properties": {"customer": {"type": "string"}}},
                      request={"method": "GET", "url": f"{vendor.url}/orders"})


def _move(admin: Admin, agent_id: str, moves: list[tuple[str, str, str | Cause, datetime]]) -> None:
    """Promote or demote tools at given moments, through the domain (as the API and sweep do)."""
    account_id = _account(admin)
    for action, name, cause, moment in moves:
        state = accounts.get_state(account_id, agent_id)
        if action == "promote":
            workingset.promote(state, "unleashed", name, by=PromotedBy.CONSOLE, actor="admin", now=moment)
        else:
            workingset.demote(state, "unleashed", name, cause=Cause(cause), actor="sweep", now=moment)


def _figure(page: str, key: str) -> str:
    found = re.search(rf'<figure class="chart" id="chart-{key}".*?</figure>', page, re.DOTALL)
    assert found, f"no picture {key}"
    return found.group(0)


def _desc(figure: str) -> str:
    found = re.search(r"<desc [^>]*>(.*?)</desc>", figure, re.DOTALL)
    assert found
    return html.unescape(found.group(1))


def _rows(figure: str) -> list[list[str]]:
    body = figure.split("<tbody>")[1].split("</tbody>")[0]
    return [[html.unescape(cell) for cell in re.findall(r"<td>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", body, re.DOTALL)]


def test_the_agent_page_draws_its_working_set_day_by_day_with_demotions_by_cause(
        admin: Admin, console: Console, vendor: Vendor) -> None:
    # GIVEN three tools promoted 10 days ago, one demoted as idle 3 days ago and one by the cap yesterday
    _publish(admin, vendor, "list-sales-orders", "get-invoice", "list-customers")
    agent = admin.create_agent()
    now = utcnow()
    ten, three, one = now - timedelta(days=10), now - timedelta(days=3), now - timedelta(days=1)
    _move(admin, agent["id"], [("promote", "list-sales-orders", "", ten), ("promote", "get-invoice", "", ten),
                               ("promote", "list-customers", "", ten), ("demote", "get-invoice", Cause.IDLE, three),
                               ("demote", "list-customers", Cause.CAP, one)])
    # WHEN the person opens the agent's page
    page = console.get(f"/console/agents/{agent['id']}").body.decode()
    figure = _figure(page, "working-set")
    # THEN the picture is an SVG image named by its title and description
    assert re.search(r'<svg class="chart"[^>]* role="img" aria-labelledby="chart-working-set-title"', figure)
    # AND its description says the figures: from 0 to 1 tool, 3 promoted, 2 demoted (1 idle, 1 cap)
    assert _desc(figure) == ("Over the last 30 days the working set went from 0 to 1 tools (largest 3); 3 promoted "
                             "and 2 demoted (1 unused past the idle window, 1 over the working-set cap).")
    # AND its table lists the days that moved, with the size at each day's end
    assert _rows(figure) == [
        [ten.date().isoformat(), "3", "3", "0"],
        [three.date().isoformat(), "2", "0", "1 unused past the idle window"],
        [one.date().isoformat(), "1", "0", "1 over the working-set cap"],
        [now.date().isoformat(), "1", "0", "0"]]
    # AND each demotion is drawn in its cause's colour, the promotions in theirs
    assert len(re.findall(r'class="demoted cause-idle"><title>', figure)) == 1
    assert len(re.findall(r'class="demoted cause-cap"><title>', figure)) == 1
    assert len(re.findall(r'class="promoted"><title>', figure)) == 1


def test_the_agent_page_draws_each_tools_calls(admin: Admin, console: Console, vendor: Vendor, agent: dict[str, Any],
                                               mcp: Mcp) -> None:
    # GIVEN two promoted tools, one called three times and one once as a dry run, and one never called
    _publish(admin, vendor, "list-sales-orders", "get-invoice", "list-customers")
    for name in ("list-sales-orders", "get-invoice", "list-customers"):
        mcp.call("promote", {"vendor": "unleashed", "name": name})
    for _ in range(3):
        assert not mcp.call("unleashed__list-sales-orders", {"customer": "acme"}).get("isError")
    mcp.call("run_tool", {"vendor": "unleashed", "name": "get-invoice", "input": {"customer": "acme"}, "dryRun": True})
    # WHEN the person opens the agent's page
    figure = _figure(console.get(f"/console/agents/{agent['id']}").body.decode(), "tool-use")
    # THEN the calls picture says 3 calls, the most called tool first, every promoted tool a row
    assert _desc(figure) == ("3 calls over the last 30 days across 1 tools; the most called is "
                             "unleashed__list-sales-orders (3).")
    assert _rows(figure) == [["unleashed__list-sales-orders", "3", "0", "0", "yes"],
                             ["unleashed__get-invoice", "0", "1", "0", "yes"],
                             ["unleashed__list-customers", "0", "0", "0", "yes"]]
    assert len(re.findall(r'<rect x="[^"]*"[^>]*class="calls"', figure)) == 1


def test_the_toolbox_page_draws_calls_per_tool_and_the_tokens_each_agent_is_spared(
        admin: Admin, console: Console, vendor: Vendor, client: Any) -> None:
    # GIVEN a toolbox larger than the meta-tools, and two agents: one with a tool promoted and
    # called twice, one with nothing promoted
    _publish(admin, vendor, "list-sales-orders", "get-invoice", "list-customers")
    for index in range(4):
        admin.publish(name=f"tool-{index}", description="A tool with a long description. " * 30)
    busy = admin.create_agent("busy")
    admin.create_agent("idle")
    caller = Mcp(client, busy["api_key"])
    caller.call("promote", {"vendor": "unleashed", "name": "list-sales-orders"})
    caller.call("unleashed__list-sales-orders", {"customer": "acme"})
    caller.call("unleashed__list-sales-orders", {"customer": "globex"})
    # WHEN the person opens the toolbox
    page = console.get("/console/tools").body.decode()
    calls, spared = _figure(page, "toolbox-calls"), _figure(page, "spared")
    # THEN calls per tool say two calls of the one tool
    assert _rows(calls) == [["unleashed__list-sales-orders", "2", "0", "0"]]
    # AND each agent's row splits the toolbox into what its tools/list carries and what it is spared
    rows = {row[0]: (int(row[1].replace(",", "")), int(row[2].replace(",", ""))) for row in _rows(spared)}
    assert set(rows) == {"busy", "idle"}
    assert rows["busy"][0] > rows["idle"][0]  # one promoted tool more to list
    assert rows["busy"][0] + rows["busy"][1] == rows["idle"][0] + rows["idle"][1]  # the same whole toolbox
    assert rows["idle"][1] > rows["busy"][1] > 0
    assert _desc(spared).endswith(f"idle's working set spares it ≈ {rows['idle'][1]:,}.")


def test_a_search_or_a_later_page_of_the_toolbox_reads_no_pictures(admin: Admin, console: Console,
                                                                   vendor: Vendor) -> None:
    # GIVEN a toolbox
    _publish(admin, vendor, "list-sales-orders")
    # WHEN the person searches it
    page = console.get("/console/tools?q=orders").body.decode()
    # THEN the hits are shown without the pictures (they belong to the first page)
    assert 'data-tool="unleashed__list-sales-orders"' in page and "<figure" not in page


def _dynamodb(record: list[AwsCall]) -> list[str]:
    return [operation for service, operation, _, _ in record if service == "dynamodb"]


def test_the_pictures_read_a_bounded_number_of_pages_whatever_the_history(
        admin: Admin, console: Console, vendor: Vendor, record_aws: list[AwsCall], monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN reads of 2 items a page, at most 3 pages a list, and an agent with a few events
    monkeypatch.setattr(activity, "READ_PAGE", 2)
    monkeypatch.setattr(activity, "READ_PAGES", 3)
    _publish(admin, vendor, "list-sales-orders", "get-invoice")
    agent = admin.create_agent()
    now = utcnow()

    def cycles(count: int, start: int) -> list[tuple[str, str, str | Cause, datetime]]:
        moments = [now - timedelta(days=20, minutes=start + n) for n in range(count)]
        return [move for moment in moments for move in (("promote", "get-invoice", "", moment),
                                                          ("demote", "get-invoice", Cause.AGENT_ASKED, moment))]

    _move(admin, agent["id"], cycles(2, 0))  # 4 events: within 3 pages of 2
    record_aws.clear()
    console.get(f"/console/agents/{agent['id']}")
    few = _dynamodb(record_aws)
    # WHEN many more events come (40: far past the bound) and the page is opened again
    _move(admin, agent["id"], cycles(18, 100))
    record_aws.clear()
    page = console.get(f"/console/agents/{agent['id']}").body.decode()
    many = _dynamodb(record_aws)
    # THEN the page made at most one query more for the pictures (the bound), not one per event
    assert len(many) <= len(few) + 1
    # AND the picture says the older days were left out
    assert "Only the newest events were read" in _desc(_figure(page, "working-set"))


def test_an_agents_pictures_cost_at_most_two_lists_of_pages(admin: Admin, vendor: Vendor,
                                                             record_aws: list[AwsCall]) -> None:
    # GIVEN an agent with a working set
    _publish(admin, vendor, "list-sales-orders")
    agent = admin.create_agent()
    _move(admin, agent["id"], [("promote", "list-sales-orders", "", utcnow())])
    state = accounts.get_state(_account(admin), agent["id"])
    # WHEN its pictures' figures are read
    record_aws.clear()
    moved = activity.agent_activity(state, utcnow())
    # THEN it took one query of History and one of runs (both within their first page)
    assert _dynamodb(record_aws) == ["Query", "Query"] and moved.reads == 2
    assert moved.reads <= 2 * activity.READ_PAGES


@pytest.mark.parametrize("name", ["<script>alert(1)</script>", "a&b \"quoted\""])
def test_hostile_names_are_text_in_the_pictures(name: str) -> None:
    # GIVEN a tool use whose name carries markup (names are checked on publish; the pictures escape anyway)
    use = activity.ToolUse("unleashed", name, 2, promoted=True)
    moved = activity.AgentActivity([activity.Day(utcnow().date(), 1)], [use], True, True, 2)
    # WHEN the picture is laid out and drawn
    from chalicelib.console.common import _environment

    drawn = _environment().from_string('{% import "charts.html" as c %}{{ c.picture(p) }}').render(
        p=charts.tool_use(moved))
    # THEN the name is escaped text, never markup
    assert "<script>" not in drawn and html.escape(f"unleashed__{name}")[:18] in drawn.replace("&#34;", "&quot;")
