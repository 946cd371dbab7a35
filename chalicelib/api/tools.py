"""Admin routes for the toolbox: publishing versions, reading them, and accepting a version's
looser hints."""

from __future__ import annotations

from typing import Any

from chalicelib.api import shapes
from chalicelib.api.common import admin_route, bearer, body, limit, query
from chalicelib.base.clock import utcnow
from chalicelib.base.errors import InvalidInput
from chalicelib.catalog import toolbox
from chalicelib.identity import accounts
from chalicelib.tools import definitions


@admin_route("/v1/tools", "POST", status=201)
def publish_tool(account_id: str) -> dict[str, Any]:
    spec = definitions.parse_spec(body())
    # a person publishing this very definition accepts its hints (chalicelib/tools/guards.py)
    tool = toolbox.publish(account_id, spec, published_by=accounts.ADMIN, now=utcnow(),
                           person=accounts.admin_actor(bearer() or ""))
    return {"vendor": spec.vendor, "name": spec.name, "version": tool.version.version}


@admin_route("/v1/tools", "GET")
def list_tools(account_id: str) -> dict[str, Any]:
    page = toolbox.page(account_id, limit=limit(), cursor=query("cursor"))
    return shapes.page(page, shapes.tool_version)


@admin_route("/v1/tools/{vendor}/{name}", "GET")
def get_tool(account_id: str, vendor: str, name: str) -> dict[str, Any]:
    return shapes.tool(toolbox.versions(account_id, vendor, name))


@admin_route("/v1/tools/{vendor}/{name}/accept-annotations", "POST")
def accept_annotations(account_id: str, vendor: str, name: str) -> dict[str, Any]:
    """`{"version": n}`: the newest version's looser hints become what Workset enforces."""
    payload = body()
    version = payload.get("version") if isinstance(payload, dict) else None
    if not isinstance(version, int) or isinstance(version, bool) or set(payload) != {"version"}:
        raise InvalidInput("version: give the number of the version whose hints you reviewed, and nothing else",
                           field="version")
    _, changed = toolbox.accept_annotations(account_id, vendor, name, version,
                                            accounts.admin_actor(bearer() or ""), utcnow())
    return {**shapes.tool(toolbox.versions(account_id, vendor, name, consistent=True)), "changed": changed}
