"""notifications/tools/list_changed on MCP itself: on the HTTP response (2025-11-25) and on
subscriptions/listen (2026-07-28)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from chalicelib.base.clock import iso, utcnow
from chalicelib.store import outbox
from tests.conftest import Admin, Mcp, Vendor

SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"


@pytest.fixture
def tools(admin: Admin, vendor: Vendor) -> None:
    for name in ("a", "b"):
        admin.publish(vendor="shop", name=name, description=f"Tool {name}.", annotations={"readOnlyHint": True},
                      input_schema={"type": "object"}, request={"method": "GET", "url": f"{vendor.url}/{name}"})


def _promote(mcp: Mcp, name: str) -> Any:
    return mcp.post("tools/call", {"name": "promote", "arguments": {"vendor": "shop", "name": name}})


def test_a_legacy_promote_carries_the_notification_before_the_result(mcp: Mcp, tools: None) -> None:
    answer = _promote(mcp, "a")
    assert answer.headers["Content-Type"] == "text/event-stream"
    assert [n["method"] for n in answer.notifications] == ["notifications/tools/list_changed"]
    assert answer.json_body["result"]["structuredContent"]["size"] == 1
    repeat = _promote(mcp, "a")  # changes nothing: no notification
    assert repeat.notifications == []
    assert mcp.post("tools/list").notifications == []


def test_a_change_made_elsewhere_rides_on_the_next_legacy_response_once(admin: Admin, mcp: Mcp, tools: None,
                                                                         agent: dict) -> None:
    _promote(mcp, "a")
    report = admin.call("POST", "/v1/sweep", {"now": iso(utcnow() + timedelta(days=22))}).json_body
    assert len(report["demoted"]) == 1
    first = mcp.post("tools/list")
    second = mcp.post("tools/list")
    assert [n["method"] for n in first.notifications] == ["notifications/tools/list_changed"]
    assert second.notifications == []


def test_modern_responses_never_carry_notifications(mcp: Mcp, tools: None) -> None:
    mcp.modern = True
    assert _promote(mcp, "a").notifications == []


def test_listen_acknowledges_then_closes_cleanly_when_nothing_changes(mcp: Mcp, settings_env) -> None:
    settings_env(WORKSET_LISTEN_HOLD_SECONDS="0.2")
    mcp.modern = True
    answer = mcp.post("subscriptions/listen", {"notifications": {"toolsListChanged": True}})
    (ack,) = answer.notifications
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"toolsListChanged": True}
    assert ack["params"]["_meta"][SUBSCRIPTION] == answer.json_body["id"]
    assert answer.json_body["result"]["resultType"] == "complete"


def test_listen_yields_a_change_made_by_another_client_of_the_same_agent(
    admin: Admin, mcp: Mcp, tools: None, agent: dict, settings_env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a held listen during which, after it read the agent's state and before its first poll,
    # the agent's set is changed through the admin API (on another thread, as another request is)
    settings_env(WORKSET_LISTEN_HOLD_SECONDS="10")
    mcp.modern = True
    other_client = Mcp(mcp.client, agent["api_key"], modern=True)
    polls: list[int] = []
    change_seq = outbox.change_seq

    def promote_then_poll(agent_id: str) -> int:
        if not polls:
            promoting = threading.Thread(target=lambda: admin.call(
                "POST", f"/v1/agents/{agent['id']}/working-set", {"vendor": "shop", "name": "a"}))
            promoting.start()
            promoting.join()
        polls.append(1)
        return change_seq(agent_id)

    monkeypatch.setattr(outbox, "change_seq", promote_then_poll)
    # WHEN the agent listens
    answer = mcp.post("subscriptions/listen", {"notifications": {"toolsListChanged": True}})
    # THEN the change is told on the listen, at its first poll, and the other client lists the tool
    assert len(polls) == 1
    methods = [n["method"] for n in answer.notifications]
    assert methods == ["notifications/subscriptions/acknowledged", "notifications/tools/list_changed"]
    assert answer.notifications[1]["params"]["_meta"][SUBSCRIPTION] == answer.json_body["id"]
    assert other_client.tool_names()[-1] == "shop__a"


def test_listen_sends_nothing_that_was_not_asked_for(mcp: Mcp, settings_env) -> None:
    settings_env(WORKSET_LISTEN_HOLD_SECONDS="5")
    mcp.modern = True
    answer = mcp.post("subscriptions/listen", {"notifications": {"promptsListChanged": True}})
    (ack,) = answer.notifications
    assert ack["params"]["notifications"] == {}


def test_listen_is_a_modern_method_only(mcp: Mcp) -> None:
    answer = mcp.post("subscriptions/listen", {"notifications": {"toolsListChanged": True}})
    assert answer.json_body["error"]["code"] == -32601
