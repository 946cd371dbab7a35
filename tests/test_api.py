"""The admin API under /v1: agents, tools, working sets, history, auth and account isolation."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Admin, tool_spec


def test_create_agent_answers_settings_with_defaults_and_a_key_shown_once(admin: Admin) -> None:
    # GIVEN an account WHEN an agent is created with a name only
    created = admin.create_agent("hermes")
    # THEN the defaults are filled and the key comes back once
    assert created["name"] == "hermes"
    assert (created["cap"], created["idle_window_days"], created["size"]) == (20, 21, 0)
    assert created["api_key"].startswith("wsk_")
    fetched = admin.call("GET", f"/v1/agents/{created['id']}").json_body
    assert "api_key" not in fetched
    assert fetched["id"] == created["id"]


def test_agent_list_pages_with_a_cursor(admin: Admin) -> None:
    # GIVEN three agents
    names = ["a", "b", "c"]
    for name in names:
        admin.create_agent(name)
    # WHEN listed two at a time
    first = admin.call("GET", "/v1/agents?limit=2").json_body
    second = admin.call("GET", f"/v1/agents?limit=2&cursor={first['next']}").json_body
    # THEN every agent appears once, oldest first
    assert [a["name"] for a in first["items"] + second["items"]] == names
    assert second["next"] is None or admin.call("GET", f"/v1/agents?cursor={second['next']}").json_body["items"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cap": 0}, "cap"),
        ({"cap": 501}, "cap"),
        ({"cap": "20"}, "cap"),
        ({"idle_window_days": 0}, "idle_window_days"),
        ({"idle_window_days": 3651}, "idle_window_days"),
        ({"name": ""}, "name"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_patch_out_of_range_is_400_naming_the_field_and_saves_nothing(admin: Admin, body: dict, field: str) -> None:
    # GIVEN an agent
    agent = admin.create_agent("hermes", cap=7)
    # WHEN a bad value is sent together with a good one
    response = admin.call("PATCH", f"/v1/agents/{agent['id']}", {"name": "renamed", **body})
    # THEN 400 names the field, and nothing changed
    assert response.status_code == 400
    assert response.json_body["error"]["field"] == field
    assert response.json_body["error"]["code"] == "invalid_input"
    saved = admin.call("GET", f"/v1/agents/{agent['id']}").json_body
    assert (saved["name"], saved["cap"]) == ("hermes", 7)


def test_patch_changes_the_settings(admin: Admin) -> None:
    agent = admin.create_agent("hermes")
    response = admin.call("PATCH", f"/v1/agents/{agent['id']}", {"cap": 500, "idle_window_days": 3650})
    assert response.status_code == 200
    saved = admin.call("GET", f"/v1/agents/{agent['id']}").json_body
    assert (saved["cap"], saved["idle_window_days"]) == (500, 3650)


@pytest.mark.parametrize("body", ["not json", "[1, 2]", ""])
def test_bad_json_body_is_400(admin: Admin, body: str) -> None:
    headers = {"Authorization": f"Bearer {admin.token}", "Content-Type": "application/json"}
    response = admin.client.http.post("/v1/agents", headers=headers, body=body)
    assert response.status_code == 400
    assert response.json_body["error"]["code"] == "invalid_input"
    assert admin.call("GET", "/v1/agents").json_body["items"] == []


@pytest.mark.parametrize("token", [None, "", "Bearer nope", "Basic abc"])
def test_missing_or_wrong_admin_token_is_401(admin: Admin, token: str | None) -> None:
    headers = {"Authorization": token} if token is not None else {}
    response = admin.client.http.get("/v1/agents", headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_another_accounts_agent_is_not_found(admin: Admin, other_admin: Admin) -> None:
    # GIVEN an agent of another account
    theirs = other_admin.create_agent("theirs")
    # WHEN this account asks for it, edits it or reads its lists
    paths = [f"/v1/agents/{theirs['id']}", f"/v1/agents/{theirs['id']}/working-set",
             f"/v1/agents/{theirs['id']}/history"]
    # THEN it is not found, and the edit did not happen
    for path in paths:
        assert admin.call("GET", path).status_code == 404
    assert admin.call("PATCH", f"/v1/agents/{theirs['id']}", {"cap": 3}).status_code == 404
    assert other_admin.call("GET", f"/v1/agents/{theirs['id']}").json_body["cap"] == 20
    assert admin.call("GET", "/v1/agents").json_body["items"] == []


def test_publish_keeps_every_version_and_lists_the_newest(admin: Admin) -> None:
    # GIVEN a tool published twice
    assert admin.publish()["version"] == 1
    assert admin.publish(description="List sales orders, newest first.")["version"] == 2
    # WHEN the tool and the toolbox are read
    versions = admin.call("GET", "/v1/tools/unleashed/list-sales-orders").json_body["versions"]
    toolbox = admin.call("GET", "/v1/tools").json_body["items"]
    # THEN both versions stand unchanged and the toolbox shows the newest
    assert [v["version"] for v in versions] == [1, 2]
    assert versions[0]["description"] == tool_spec()["description"]
    assert [(t["name"], t["version"]) for t in toolbox] == [("list-sales-orders", 2)]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"vendor": "Unleashed"}, "vendor"),
        ({"name": "x" * 62}, "name"),  # over NAME_MAX, whatever the vendor
        ({"name": "x" * 54}, "name"),  # unleashed__ and 54 characters: 65, over MCP's 64
        ({"name": "-lead"}, "name"),
        ({"description": ""}, "description"),
        ({"input_schema": {"type": "array"}}, "input_schema"),
        ({"input_schema": {"type": "object", "properties": {"a": {"type": "nonsense"}}}}, "input_schema"),
        ({"request": {"method": "GET", "url": "ftp://example.com/x"}}, "request.url"),
        ({"request": {"method": "TRACE", "url": "http://example.com/x"}}, "request.method"),
        ({"request": {"method": "GET", "url": "http://example.com/{nope}"}}, "request.url"),
        ({"request": {"method": "POST", "url": "http://example.com/x"}}, "annotations.readOnlyHint"),
        ({"request": {"method": "GET", "url": "http://example.com/x", "headers": {"Authorization": "x"}}},
         "request.headers"),
        ({"extra": 1}, "extra"),
    ],
)
def test_bad_tool_definitions_are_refused_naming_the_field(admin: Admin, overrides: dict, field: str) -> None:
    response = admin.call("POST", "/v1/tools", tool_spec(**overrides))
    assert response.status_code == 400
    assert response.json_body["error"]["field"] == field
    assert admin.call("GET", "/v1/tools").json_body["items"] == []


def test_unknown_tool_is_404_tool_not_found(admin: Admin) -> None:
    response = admin.call("GET", "/v1/tools/unleashed/nothing")
    assert response.status_code == 404
    assert response.json_body["error"]["code"] == "tool_not_found"


def test_tools_are_private_to_their_account(admin: Admin, other_admin: Admin) -> None:
    admin.publish()
    assert other_admin.call("GET", "/v1/tools").json_body["items"] == []
    assert other_admin.call("GET", "/v1/tools/unleashed/list-sales-orders").status_code == 404


def test_console_promotion_and_demotion_show_in_working_set_and_history(admin: Admin) -> None:
    # GIVEN a tool and an agent
    admin.publish()
    agent = admin.create_agent()
    base = f"/v1/agents/{agent['id']}"
    # WHEN an admin promotes then demotes it
    promoted = admin.call("POST", f"{base}/working-set", {"vendor": "unleashed", "name": "list-sales-orders"})
    listed = admin.call("GET", f"{base}/working-set").json_body["items"]
    demoted = admin.call("DELETE", f"{base}/working-set/unleashed/list-sales-orders")
    # THEN the set and the history say so, with cause console
    assert promoted.json_body == {"size": 1, "changed": True}
    assert [(i["name"], i["promoted_by"], i["last_used_at"]) for i in listed] == [
        ("list-sales-orders", "console", None)
    ]
    assert demoted.json_body == {"size": 0, "changed": True}
    events: list[dict[str, Any]] = admin.call("GET", f"{base}/history").json_body["items"]
    assert [(e["action"], e["cause"]) for e in events] == [("demoted", "console"), ("promoted", "console")]
    assert all(e["at"].endswith("Z") for e in events)


def test_foreign_cursor_is_refused(admin: Admin) -> None:
    agent = admin.create_agent()
    response = admin.call("GET", f"/v1/agents/{agent['id']}/history?cursor=eyJ4IjogMX0=")
    assert response.status_code == 400
    assert response.json_body["error"]["field"] == "cursor"


def test_oversized_body_is_413_and_saves_nothing(admin: Admin) -> None:
    response = admin.call("POST", "/v1/tools", tool_spec(description="x" * 300_000))
    assert response.status_code == 413
    assert response.json_body["error"]["code"] == "too_large"
    assert admin.call("GET", "/v1/tools").json_body["items"] == []
