"""Admin routes for the toolbox: publishing versions and reading them."""

from __future__ import annotations

from typing import Any

from chalicelib import accounts, definitions, toolbox
from chalicelib.api import shapes
from chalicelib.api.common import admin_route, body, limit, query
from chalicelib.clock import utcnow


@admin_route("/v1/tools", "POST", status=201)
def publish_tool(account_id: str) -> dict[str, Any]:
    spec = definitions.parse_spec(body())
    tool = toolbox.publish(account_id, spec, published_by=accounts.ADMIN, now=utcnow())
    return {"vendor": spec.vendor, "name": spec.name, "version": tool.version.version}


@admin_route("/v1/tools", "GET")
def list_tools(account_id: str) -> dict[str, Any]:
    page = toolbox.page(account_id, limit=limit(), cursor=query("cursor"))
    return shapes.page(page, shapes.tool_version)


@admin_route("/v1/tools/{vendor}/{name}", "GET")
def get_tool(account_id: str, vendor: str, name: str) -> dict[str, Any]:
    found = toolbox.versions(account_id, vendor, name)
    return {"vendor": vendor, "name": name, "versions": [shapes.tool_version(v) for v in found]}
