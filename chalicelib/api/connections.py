"""Admin routes for connections: add (the secret is typed once), list, give a new secret in
place, revoke, and the recent calls through one."""

from __future__ import annotations

from typing import Any

from chalicelib.access import connections
from chalicelib.agents import sweep
from chalicelib.api import shapes
from chalicelib.api.common import admin_route, body, limit, query
from chalicelib.base.clock import utcnow


@admin_route("/v1/connections", "POST", status=201)
def create_connection(account_id: str) -> dict[str, Any]:
    return shapes.connection(connections.create(account_id, body(), utcnow()))


@admin_route("/v1/connections", "GET")
def list_connections(account_id: str) -> dict[str, Any]:
    page = connections.list_all(account_id, limit=limit(), cursor=query("cursor"))
    return shapes.page(page, shapes.connection)


@admin_route("/v1/connections/{connection_id}", "GET")
def get_connection(account_id: str, connection_id: str) -> dict[str, Any]:
    return shapes.connection(connections.get(account_id, connection_id))


@admin_route("/v1/connections/{connection_id}/auth", "PUT")
def replace_auth(account_id: str, connection_id: str) -> dict[str, Any]:
    return shapes.connection(connections.replace_auth(account_id, connection_id, body(), utcnow()))


@admin_route("/v1/connections/{connection_id}/calls", "GET")
def recent_calls(account_id: str, connection_id: str) -> dict[str, Any]:
    page = connections.recent_calls(account_id, connection_id, limit=limit(), cursor=query("cursor"))
    return shapes.page(page, shapes.connection_call)


@admin_route("/v1/connections/{connection_id}/revoke", "POST")
def revoke_connection(account_id: str, connection_id: str) -> dict[str, Any]:
    now = utcnow()
    revocation = connections.revoke(account_id, connection_id, now)
    report = sweep.review_all(revocation.agents, now)  # demote now what the sweep would
    return {**shapes.connection(revocation.connection), **report.to_dict()}
