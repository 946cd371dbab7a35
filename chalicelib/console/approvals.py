"""Runs waiting for a person, one run's page (the `approval_url` an MCP answer links to), and the
Approve and Deny forms."""

from __future__ import annotations

from chalice import Response

from chalicelib.base.errors import ToolNotFound
from chalicelib.base.outcomes import RunStatus
from chalicelib.calls import runs
from chalicelib.catalog import toolbox
from chalicelib.console.common import ALL_PAGE, Ctx, action, agent_names, every, page, redirect, safe_next
from chalicelib.store.records import Run
from chalicelib.tools.definitions import Tool


@page("/console/approvals")
def approvals(ctx: Ctx) -> Response:
    pending = list(every(lambda cursor: runs.list_pending(ctx.account_id, limit=ALL_PAGE, cursor=cursor,
                                                          now=ctx.now)))
    return ctx.render("approvals.html", pending=pending, tools=tools_of(ctx.account_id, pending),
                      every_call=runs.asked_every_call(pending), names=agent_names(ctx.account_id),
                      done=ctx.params.get("done"))


@page("/console/approvals/{run_id}")
def run_page(ctx: Ctx, run_id: str) -> Response:
    run = runs.get_for_account(ctx.account_id, run_id, ctx.now)
    change = runs.change_since_decision(ctx.account_id, run) if run.status == RunStatus.AWAITING else None
    return ctx.render("run.html", run=run, tool=tools_of(ctx.account_id, [run]).get(run.run_id), change=change,
                      names=agent_names(ctx.account_id), done=ctx.params.get("done"))


@action("/console/approvals/{run_id}/approve")
def approve(ctx: Ctx, run_id: str) -> Response:
    runs.approve(ctx.account_id, run_id, ctx.session.actor, ctx.now)
    return _back(ctx, run_id, "approved")


@action("/console/approvals/{run_id}/deny")
def deny(ctx: Ctx, run_id: str) -> Response:
    runs.deny(ctx.account_id, run_id, ctx.session.actor, ctx.now)
    return _back(ctx, run_id, "denied")


def tools_of(account_id: str, listed: list[Run]) -> dict[str, Tool]:
    """Run id -> the tool version it calls (for its hints); a vanished tool is left out."""
    found: dict[str, Tool] = {}
    for run in listed:
        try:
            found[run.run_id] = toolbox.resolve_version(account_id, run.vendor, run.name, run.version)
        except ToolNotFound:
            continue
    return found


def _back(ctx: Ctx, run_id: str, done: str) -> Response:
    target = ctx.form.get("back", "").split("?", 1)[0]
    return redirect(safe_next(target) if target else f"/console/approvals/{run_id}", done=done)
