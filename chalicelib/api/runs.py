"""Admin routes for runs and the approvals people give them."""

from __future__ import annotations

from typing import Any

from chalicelib.api import shapes
from chalicelib.api.common import admin_route, bearer, limit, query
from chalicelib.base.clock import utcnow
from chalicelib.base.errors import InvalidInput
from chalicelib.calls import runs
from chalicelib.identity import accounts


@admin_route("/v1/approvals", "GET")
def pending_approvals(account_id: str) -> dict[str, Any]:
    status = query("status") or "pending"
    if status != "pending":
        raise InvalidInput("status: only pending approvals are listed", field="status")
    page = runs.list_pending(account_id, limit=limit(), cursor=query("cursor"), now=utcnow())
    changes = runs.changes_since_decisions(account_id, page.items)
    return shapes.page(page, lambda run: shapes.pending(run, changes[run.run_id]))


@admin_route("/v1/approvals/{run_id}/approve", "POST")
def approve(account_id: str, run_id: str) -> dict[str, Any]:
    return shapes.run(runs.approve(account_id, run_id, accounts.admin_actor(bearer() or ""), utcnow()))


@admin_route("/v1/approvals/{run_id}/deny", "POST")
def deny(account_id: str, run_id: str) -> dict[str, Any]:
    return shapes.run(runs.deny(account_id, run_id, accounts.admin_actor(bearer() or ""), utcnow()))


@admin_route("/v1/runs/{run_id}", "GET")
def get_run(account_id: str, run_id: str) -> dict[str, Any]:
    return shapes.run(runs.get_for_account(account_id, run_id, utcnow()))
