"""acquire: an agent authors a tool; it is published (every version kept) and promoted."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Admin, Mcp, Vendor, tool_spec


@pytest.fixture(autouse=True)
def vendor_allowed(admin: Admin, vendor: Vendor) -> None:
    """A person allowed agents to author keyless tools for the local vendor."""
    response = admin.call("PUT", "/v1/account/allowed-hosts", {"allowed_hosts": [vendor.url.removeprefix("http://")]})
    assert response.status_code == 200, response.body


def _definition(vendor: Vendor, **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "vendor": "weather", "name": "forecast", "description": "Get the weather forecast for a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "request": {"method": "GET", "url": f"{vendor.url}/forecast"},
    }
    return tool_spec(**{**fields, **overrides})


def test_acquire_publishes_and_promotes_with_cause_published(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    # WHEN the agent acquires a tool
    answer = mcp.call("acquire", _definition(vendor))
    # THEN it is version 1, in the working set, promoted by a publish
    assert answer["structuredContent"] == {"vendor": "weather", "name": "forecast", "version": 1, "size": 1}
    agent_id = admin.call("GET", "/v1/agents").json_body["items"][0]["id"]
    items = admin.call("GET", f"/v1/agents/{agent_id}/working-set").json_body["items"]
    assert [(i["name"], i["promoted_by"]) for i in items] == [("forecast", "publish")]
    history = admin.call("GET", f"/v1/agents/{agent_id}/history").json_body["items"]
    assert [(e["action"], e["cause"]) for e in history] == [("promoted", "published")]


def test_an_acquired_tool_is_callable_first_class_and_through_run_tool(mcp: Mcp, vendor: Vendor) -> None:
    mcp.call("acquire", _definition(vendor))
    assert "weather__forecast" in mcp.tool_names()
    first_class = mcp.call("weather__forecast", {"city": "Wellington"})
    by_name = mcp.call("run_tool", {"vendor": "weather", "name": "forecast", "input": {"city": "Auckland"}})
    assert first_class["structuredContent"] == by_name["structuredContent"] == {"orders": [{"id": 1}]}
    assert [r["path"] for r in vendor.received] == ["/forecast?city=Wellington", "/forecast?city=Auckland"]


def test_acquiring_again_adds_a_version_and_keeps_the_first(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    mcp.call("acquire", _definition(vendor))
    again = mcp.call("acquire", _definition(vendor, description="Forecast, version two."))
    assert again["structuredContent"] == {"vendor": "weather", "name": "forecast", "version": 2, "size": 1}
    versions = admin.call("GET", "/v1/tools/weather/forecast").json_body["versions"]
    assert [(v["version"], v["description"]) for v in versions] == [
        (1, "Get the weather forecast for a city."), (2, "Forecast, version two.")]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"name": "Forecast!"}, "name"),
        ({"input_schema": {"type": "string"}}, "input_schema"),
        ({"request": {"method": "POST", "url": "http://127.0.0.1:9/x"}}, "annotations.readOnlyHint"),
        ({"request": {"method": "GET", "url": "file:///etc/passwd"}}, "request.url"),
    ],
)
def test_acquire_validates_like_publishing_and_changes_nothing(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                               overrides: dict, field: str) -> None:
    result = mcp.call("acquire", _definition(vendor, **overrides))
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["field"] == field
    assert admin.call("GET", "/v1/tools").json_body["items"] == []
    assert not [name for name in mcp.tool_names() if "__" in name]  # nothing promoted


def test_an_agent_cannot_attach_a_connection_that_is_not_limited_to_hosts(admin: Admin, mcp: Mcp,
                                                                          vendor: Vendor) -> None:
    # GIVEN a weather credential an admin may use anywhere
    connection = admin.call("POST", "/v1/connections",
                            {"vendor": "weather", "auth": {"type": "bearer", "token": "secret-token"}}).json_body
    # WHEN an agent authors a tool that would carry it to a host of its choosing
    result = mcp.call("acquire", _definition(vendor, connection=connection["id"]))
    # THEN it is refused
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["field"] == "connection"
