"""Admin routes that bring tools from where they already are: an OpenAPI document's operations,
an MCP server's tools."""

from __future__ import annotations

from typing import Any

from chalicelib.api import shapes
from chalicelib.api.common import admin_route, body, limit, query
from chalicelib.base.clock import utcnow
from chalicelib.catalog import imports, upstreams
from chalicelib.identity import accounts


@admin_route("/v1/imports/openapi", "POST")
def import_openapi(account_id: str) -> dict[str, Any]:
    return imports.import_openapi(account_id, body(), published_by=accounts.ADMIN, now=utcnow()).to_dict()


@admin_route("/v1/upstreams", "POST", status=201)
def register_upstream(account_id: str) -> dict[str, Any]:
    upstream, report = upstreams.register(account_id, body(), published_by=accounts.ADMIN, now=utcnow())
    return {**shapes.upstream(upstreams.get(account_id, upstream.vendor)), "sync": report.to_dict()}


@admin_route("/v1/upstreams", "GET")
def list_upstreams(account_id: str) -> dict[str, Any]:
    return shapes.page(upstreams.list_all(account_id, limit=limit(), cursor=query("cursor")), shapes.upstream)


@admin_route("/v1/upstreams/{vendor}", "GET")
def get_upstream(account_id: str, vendor: str) -> dict[str, Any]:
    return shapes.upstream(upstreams.get(account_id, vendor))


@admin_route("/v1/upstreams/{vendor}/sync", "POST")
def sync_upstream(account_id: str, vendor: str) -> dict[str, Any]:
    report = upstreams.sync(account_id, vendor, published_by=accounts.ADMIN, now=utcnow())
    return {**shapes.upstream(upstreams.get(account_id, vendor)), "sync": report.to_dict()}
