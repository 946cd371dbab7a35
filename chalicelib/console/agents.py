"""The agents list, creating an agent, and an agent's page: its working set as the harness sees
it, History, settings, approvals, runs and token footprint."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from chalice import Response

from chalicelib.access import connections
from chalicelib.agents import workingset
from chalicelib.base.causes import Cause, PromotedBy
from chalicelib.base.config import settings
from chalicelib.base.errors import InvalidInput, PinLimit
from chalicelib.calls import runs
from chalicelib.catalog import toolbox
from chalicelib.console import activity, charts, present
from chalicelib.console.common import ALL_PAGE, PAGE_SIZE, Ctx, action, every, page, redirect, whole_toolbox
from chalicelib.identity import accounts
from chalicelib.mcp.metatools import META_TOOLS
from chalicelib.oauth import tokens
from chalicelib.store.records import Agent, AgentState, Promotion, Run
from chalicelib.tools.definitions import Tool

RECENT_RUNS = 10
PICKER_SIZE = 20
RANGES = {"cap": accounts.CAP_RANGE, "idle_window_days": accounts.IDLE_WINDOW_RANGE}


@dataclass(frozen=True)
class AgentRow:
    """A line of the agents list."""

    agent: Agent
    last_activity: datetime | None
    pending: int


@dataclass(frozen=True)
class SetRow:
    """A line of the working set: the tool as tools/list shows it, and when the rule may demote it."""

    tool: Tool
    promotion: Promotion
    demote_at: datetime | None  # when the idle rule may demote it (a revoked connection: at once; pinned: never)


@page("/console/agents")
def agents_list(ctx: Ctx) -> Response:
    return _agents_page(ctx)


@action("/console/agents")
def create_agent(ctx: Ctx) -> Response:
    try:
        created = accounts.create_agent(ctx.account_id, settings_payload(ctx.form), ctx.now)
    except InvalidInput as error:
        return _agents_page(ctx, 400, error=error.message, values=ctx.form)
    return ctx.render("agent_created.html", created=created, mcp_url=settings().mcp_url, rotated=False)


@page("/console/agents/{agent_id}")
def agent_page(ctx: Ctx, agent_id: str) -> Response:
    return _agent_page(ctx, agent_id)


@action("/console/agents/{agent_id}/settings")
def save_settings(ctx: Ctx, agent_id: str) -> Response:
    try:
        accounts.update_agent(ctx.account_id, agent_id, settings_payload(ctx.form))
    except InvalidInput as error:
        return _agent_page(ctx, agent_id, 400, settings_error=error.message, values=ctx.form)
    if ctx.form.get("back") == "list":
        return redirect("/console/agents", done="saved")
    return redirect(f"/console/agents/{agent_id}", done="saved")


@action("/console/agents/{agent_id}/decisions/withdraw")
def withdraw_decision(ctx: Ctx, agent_id: str) -> Response:
    vendor, name = _form_tool(ctx)
    runs.withdraw_decision(ctx.account_id, agent_id, vendor, name)
    return _done(agent_id, "withdrawn", vendor, name)


@action("/console/agents/{agent_id}/connections")
def save_connection_scope(ctx: Ctx, agent_id: str) -> Response:
    chosen = [name.removeprefix("use_") for name in ctx.form if name.startswith("use_")]
    scope: str | list[str] = "all" if ctx.form.get("scope") == "all" else chosen
    try:
        accounts.update_agent(ctx.account_id, agent_id, {"connections": scope})
    except InvalidInput as error:
        return _agent_page(ctx, agent_id, 400, settings_error=error.message)
    return redirect(f"/console/agents/{agent_id}", done="scope")


@action("/console/agents/{agent_id}/promote")
def promote(ctx: Ctx, agent_id: str) -> Response:
    state = accounts.get_state(ctx.account_id, agent_id)
    vendor, name = _form_tool(ctx)
    workingset.promote(state, vendor, name, by=PromotedBy.CONSOLE, actor=accounts.ADMIN, now=ctx.now)
    return _done(agent_id, "promoted", vendor, name)


@action("/console/agents/{agent_id}/pin")
def pin(ctx: Ctx, agent_id: str) -> Response:
    state = accounts.get_state(ctx.account_id, agent_id)
    vendor, name = _form_tool(ctx)
    try:
        workingset.pin(state, vendor, name, cause=Cause.CONSOLE, actor=accounts.ADMIN, now=ctx.now)
    except PinLimit as error:
        return _agent_page(ctx, agent_id, error.status, pin_error=error.message)
    return _done(agent_id, "pinned", vendor, name)


@action("/console/agents/{agent_id}/unpin")
def unpin(ctx: Ctx, agent_id: str) -> Response:
    state = accounts.get_state(ctx.account_id, agent_id)
    vendor, name = _form_tool(ctx)
    workingset.unpin(state, vendor, name, cause=Cause.CONSOLE, actor=accounts.ADMIN, now=ctx.now)
    return _done(agent_id, "unpinned", vendor, name)


@action("/console/agents/{agent_id}/demote")
def demote(ctx: Ctx, agent_id: str) -> Response:
    state = accounts.get_state(ctx.account_id, agent_id)
    vendor, name = _form_tool(ctx)
    workingset.demote(state, vendor, name, cause=Cause.CONSOLE, actor=accounts.ADMIN, now=ctx.now)
    return _done(agent_id, "demoted", vendor, name)


@action("/console/agents/{agent_id}/key")
def rotate_key(ctx: Ctx, agent_id: str) -> Response:
    created = accounts.rotate_key(ctx.account_id, agent_id)
    return ctx.render("agent_created.html", created=created, mcp_url=settings().mcp_url, rotated=True)


@action("/console/agents/{agent_id}/revoke")
def revoke_agent(ctx: Ctx, agent_id: str) -> Response:
    accounts.revoke_agent(ctx.account_id, agent_id, ctx.now)
    return redirect(f"/console/agents/{agent_id}", done="revoked")


@action("/console/agents/{agent_id}/archive")
def archive_agent(ctx: Ctx, agent_id: str) -> Response:
    agent = accounts.archive_agent(ctx.account_id, agent_id, ctx.now)
    return redirect("/console/agents", done="archived", name=agent.name)


@action("/console/agents/{agent_id}/grants/revoke")
def revoke_grant(ctx: Ctx, agent_id: str) -> Response:
    grant = tokens.revoke_grant(ctx.account_id, agent_id, ctx.form.get("grant", ""), ctx.now)
    return redirect(f"/console/agents/{agent_id}", done="grant_revoked", client=grant.client_name)


def _form_tool(ctx: Ctx) -> tuple[str, str]:
    """The (vendor, name) a working-set form names."""
    return ctx.form.get("vendor", ""), ctx.form.get("name", "")


def _done(agent_id: str, done: str, vendor: str, name: str) -> Response:
    """Back to the agent's page, saying what was done to which tool."""
    return redirect(f"/console/agents/{agent_id}", done=done, tool=f"{vendor}__{name}")


def settings_payload(form: dict[str, str]) -> dict[str, Any]:
    """Name, cap and idle window from a form, as the domain takes them (a blank number is left
    out: the default on create, unchanged on edit); the domain checks the ranges."""
    payload: dict[str, Any] = {}
    if "name" in form:
        payload["name"] = form["name"].strip()
    for field, (low, high) in RANGES.items():
        text = form.get(field, "").strip()
        if not text:
            continue
        try:
            payload[field] = int(text)
        except ValueError:
            raise InvalidInput(f"{field}: must be a whole number from {low} to {high}", field=field) from None
    return payload


def _agents_page(ctx: Ctx, status: int = 200, *, error: str | None = None,
                 values: dict[str, str] | None = None) -> Response:
    archived = ctx.params.get("archived") == "1"
    listing = accounts.list_agents(ctx.account_id, limit=PAGE_SIZE, cursor=ctx.params.get("cursor"), archived=archived)
    pending = Counter(run.agent_id for run in _pending(ctx))
    rows = [AgentRow(agent, _last_activity(agent.agent_id), pending[agent.agent_id]) for agent in listing.items]
    defaults = {"name": "", "cap": str(accounts.DEFAULT_CAP),
                "idle_window_days": str(accounts.DEFAULT_IDLE_WINDOW_DAYS)}
    return ctx.render("agents.html", status, rows=rows, next_cursor=listing.next, error=error,
                      values={**defaults, **(values or {})}, ranges=RANGES, done=ctx.params.get("done"),
                      done_name=ctx.params.get("name", ""), paged=bool(ctx.params.get("cursor")), archived=archived)


def _agent_page(ctx: Ctx, agent_id: str, status: int = 200, *, settings_error: str | None = None,
                values: dict[str, str] | None = None, pin_error: str | None = None) -> Response:
    state = accounts.get_state(ctx.account_id, agent_id)
    promoted = workingset.promoted_tools(state)
    rows = [_set_row(state, tool) for tool in promoted]
    history = workingset.history(agent_id, limit=PAGE_SIZE, cursor=ctx.params.get("history"))
    every_tool = whole_toolbox(ctx.account_id)
    moved = activity.agent_activity(state, ctx.now)
    agent = state.agent
    current = {"name": agent.name, "cap": str(agent.cap), "idle_window_days": str(agent.idle_window_days)}
    return ctx.render(
        "agent.html", status, state=state, agent=agent, rows=rows, history=history,
        history_cursor=ctx.params.get("history"), picker=_picker(ctx, state, every_tool),
        find=ctx.params.get("find", ""), pending=[run for run in _pending(ctx) if run.agent_id == agent_id],
        recent=runs.list_for_agent(agent_id, limit=RECENT_RUNS, cursor=None).items,
        footprint=present.footprint(promoted, every_tool), settings_error=settings_error,
        values={**current, **(values or {})}, ranges=RANGES, done=ctx.params.get("done"),
        done_tool=ctx.params.get("tool", ""), done_client=ctx.params.get("client", ""), over_cap=len(state.promotions) > agent.cap,
        meta_tools=META_TOOLS, decisions=state.approvals, pin_error=pin_error,
        pin_limit=workingset.pin_limit(agent.cap),
        pictures=[charts.working_set(moved), charts.tool_use(moved)],
        connections=list(every(lambda cursor: connections.list_all(ctx.account_id, limit=ALL_PAGE, cursor=cursor))),
    )


def _set_row(state: AgentState, tool: Tool) -> SetRow:
    promotion = state.promotion(*tool.key)
    assert promotion is not None  # promoted_tools answers only promoted tools
    if promotion.due_cause:
        return SetRow(tool, promotion, promotion.due_at or promotion.promoted_at)
    if promotion.pinned:
        return SetRow(tool, promotion, None)
    deadline = workingset.idle_deadline(state, promotion.last_used_at or promotion.promoted_at)
    return SetRow(tool, promotion, deadline)


def _picker(ctx: Ctx, state: AgentState, every_tool: list[Tool]) -> list[Tool]:
    """Tools to promote: the search hits for `find` (find_tool's ranking), else the first tools
    of the toolbox that are not in the set."""
    query = ctx.params.get("find", "").strip()
    if query:
        return toolbox.search(ctx.account_id, query, PICKER_SIZE)[0]
    return [tool for tool in every_tool if state.promotion(*tool.key) is None][:PICKER_SIZE]


def _pending(ctx: Ctx) -> list[Run]:
    return list(every(lambda cursor: runs.list_pending(ctx.account_id, limit=ALL_PAGE, cursor=cursor, now=ctx.now)))


def _last_activity(agent_id: str) -> datetime | None:
    """The newer of the agent's last run and the last change of its working set."""
    last_run = runs.list_for_agent(agent_id, limit=1, cursor=None).items
    last_event = workingset.history(agent_id, limit=1).items
    moments = [item.created_at for item in last_run] + [item.at for item in last_event]
    return max(moments, default=None)
