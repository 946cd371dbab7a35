"""MCP servers as vendors: the registered servers with how their last sync went, registering
one (its tools are published at once), and syncing one now."""

from __future__ import annotations

from chalice import Response

from chalicelib.base.errors import WorksetError
from chalicelib.catalog import upstreams
from chalicelib.catalog.imports import Report
from chalicelib.console.common import ALL_PAGE, Ctx, action, active_connections, every, page
from chalicelib.identity import accounts

FIELDS = ("vendor", "url", "connection")


@page("/console/upstreams")
def upstreams_page(ctx: Ctx) -> Response:
    return _page(ctx)


@action("/console/upstreams")
def register(ctx: Ctx) -> Response:
    values = {name: ctx.form.get(name, "").strip() for name in FIELDS}
    payload = {"vendor": values["vendor"], "url": values["url"], "connection": values["connection"] or None}
    try:
        _, report = upstreams.register(ctx.account_id, payload, accounts.ADMIN, ctx.now)
    except WorksetError as error:  # refused or unreachable: nothing registered
        return _page(ctx, error.status, values=values, error=error.message, failed="register")
    return _page(ctx, report=report, done="registered")


@action("/console/upstreams/{vendor}/sync")
def sync(ctx: Ctx, vendor: str) -> Response:
    try:
        report = upstreams.sync(ctx.account_id, vendor, accounts.ADMIN, ctx.now)
    except WorksetError as error:  # the list shows the failure too: sync remembers it
        return _page(ctx, error.status, error=error.message, failed="sync", vendor=vendor)
    return _page(ctx, report=report, done="synced")


def _page(ctx: Ctx, status: int = 200, *, values: dict[str, str] | None = None, report: Report | None = None,
          done: str | None = None, error: str | None = None, failed: str | None = None,
          vendor: str = "") -> Response:
    listing = list(every(lambda cursor: upstreams.list_all(ctx.account_id, limit=ALL_PAGE, cursor=cursor)))
    return ctx.render("upstreams.html", status, listing=listing, values=values or dict.fromkeys(FIELDS, ""),
                      report=report, done=done, error=error, failed=failed, vendor=vendor,
                      connections=active_connections(ctx.account_id))
