"""Connections: add one (the secret is typed once and never shown again), and revoke one after a
confirmation that lists the agents' tools the revocation will demote."""

from __future__ import annotations

import re
from typing import Any

from chalice import Response

from chalicelib import connections, sweep, toolbox
from chalicelib.console.common import ALL_PAGE, Ctx, action, agent_names, every, page, redirect
from chalicelib.errors import InvalidInput
from chalicelib.store import sweep as sweep_store

KEPT_FIELDS = ("vendor", "auth_type", "header_name", "hosts")  # what a refused form shows again: never the secret


@page("/console/connections")
def connections_page(ctx: Ctx) -> Response:
    return _page(ctx)


@action("/console/connections")
def add_connection(ctx: Ctx) -> Response:
    try:
        created = connections.create(ctx.account_id, _payload(ctx.form), ctx.now)
    except InvalidInput as error:
        return _page(ctx, 400, error=error.message, values={name: ctx.form.get(name, "") for name in KEPT_FIELDS})
    return redirect("/console/connections", done="added", connection=created.connection_id)


@page("/console/connections/{connection_id}/revoke")
def confirm_revoke(ctx: Ctx, connection_id: str) -> Response:
    connection = connections.get(ctx.account_id, connection_id)
    affected = []
    for tool in toolbox.using_connection(ctx.account_id, connection_id):
        agent_ids = sweep_store.agents_with_tool(ctx.account_id, *tool.key)
        affected.append((tool, agent_ids))
    return ctx.render("revoke.html", connection=connection, affected=affected, names=agent_names(ctx.account_id))


@action("/console/connections/{connection_id}/revoke")
def revoke(ctx: Ctx, connection_id: str) -> Response:
    connection, report = sweep.revoke_connection(ctx.account_id, connection_id, ctx.now)
    return ctx.render("revoked.html", connection=connection, report=report, names=agent_names(ctx.account_id))


def _page(ctx: Ctx, status: int = 200, *, error: str | None = None, values: dict[str, str] | None = None) -> Response:
    listing = list(every(lambda cursor: connections.list_all(ctx.account_id, limit=ALL_PAGE, cursor=cursor)))
    return ctx.render("connections.html", status, listing=listing, error=error,
                      values=values or {"vendor": "", "auth_type": "bearer", "header_name": "", "hosts": ""},
                      done=ctx.params.get("done"), added=ctx.params.get("connection", ""))


def _payload(form: dict[str, str]) -> dict[str, Any]:
    """`{vendor, auth, hosts}` as the admin API takes it, from the form's flat fields."""
    secret = form.get("secret", "")
    if form.get("auth_type") == "header":
        auth = {"type": "header", "name": form.get("header_name", "").strip(), "value": secret}
    else:
        auth = {"type": "bearer", "token": secret}
    hosts = [host for host in re.split(r"[\s,]+", form.get("hosts", "").strip().lower()) if host]
    return {"vendor": form.get("vendor", "").strip(), "auth": auth, "hosts": hosts}
