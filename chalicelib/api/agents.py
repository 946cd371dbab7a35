"""Admin routes for agents: settings, working sets, history, runs."""

from __future__ import annotations

from typing import Any

from chalicelib.agents import workingset
from chalicelib.api import shapes
from chalicelib.api.common import admin_route, body, limit, query, tool_ref
from chalicelib.base.causes import Cause, PromotedBy
from chalicelib.base.clock import utcnow
from chalicelib.base.errors import InvalidInput
from chalicelib.calls import runs
from chalicelib.identity import accounts
from chalicelib.oauth import tokens


@admin_route("/v1/agents", "POST", status=201)
def create_agent(account_id: str) -> dict[str, Any]:
    created = accounts.create_agent(account_id, body(), utcnow())
    return shapes.created_agent(created)


@admin_route("/v1/agents", "GET")
def list_agents(account_id: str) -> dict[str, Any]:
    archived = query("archived")
    if archived not in (None, "true", "false"):
        raise InvalidInput("archived must be true or false", field="archived")
    page = accounts.list_agents(account_id, limit=limit(), cursor=query("cursor"), archived=archived == "true")
    return shapes.page(page, shapes.agent)


@admin_route("/v1/agents/{agent_id}", "GET")
def get_agent(account_id: str, agent_id: str) -> dict[str, Any]:
    return shapes.agent(accounts.get_state(account_id, agent_id).agent)


@admin_route("/v1/agents/{agent_id}", "PATCH")
def update_agent(account_id: str, agent_id: str) -> dict[str, Any]:
    return shapes.created_agent(accounts.update_agent(account_id, agent_id, body()))


@admin_route("/v1/agents/{agent_id}/key", "POST")
def rotate_key(account_id: str, agent_id: str) -> dict[str, Any]:
    return shapes.created_agent(accounts.rotate_key(account_id, agent_id))


@admin_route("/v1/agents/{agent_id}/revoke", "POST")
def revoke_agent(account_id: str, agent_id: str) -> dict[str, Any]:
    return shapes.agent(accounts.revoke_agent(account_id, agent_id, utcnow()))


@admin_route("/v1/agents/{agent_id}/archive", "POST")
def archive_agent(account_id: str, agent_id: str) -> dict[str, Any]:
    return shapes.agent(accounts.archive_agent(account_id, agent_id, utcnow()))


@admin_route("/v1/agents/{agent_id}/grants", "GET")
def grants(account_id: str, agent_id: str) -> dict[str, Any]:
    return {"items": [shapes.grant(grant) for grant in tokens.grants(account_id, agent_id)], "next": None}


@admin_route("/v1/agents/{agent_id}/grants/{grant_id}", "DELETE")
def revoke_grant(account_id: str, agent_id: str, grant_id: str) -> dict[str, Any]:
    return shapes.grant(tokens.revoke_grant(account_id, agent_id, grant_id, utcnow()))


@admin_route("/v1/agents/{agent_id}/working-set", "GET")
def working_set(account_id: str, agent_id: str) -> dict[str, Any]:
    state = accounts.get_state(account_id, agent_id)
    return {"items": [shapes.promotion(p) for p in state.promotions], "next": None}


@admin_route("/v1/agents/{agent_id}/working-set", "POST", status=201)
def promote(account_id: str, agent_id: str) -> dict[str, Any]:
    ref = tool_ref(body())
    state = accounts.get_state(account_id, agent_id)
    change = workingset.promote(state, *ref, by=PromotedBy.CONSOLE, actor=accounts.ADMIN, now=utcnow())
    return {"size": change.size, "changed": change.changed}


@admin_route("/v1/agents/{agent_id}/working-set/{vendor}/{name}", "DELETE")
def demote(account_id: str, agent_id: str, vendor: str, name: str) -> dict[str, Any]:
    state = accounts.get_state(account_id, agent_id)
    change = workingset.demote(state, vendor, name, cause=Cause.CONSOLE, actor=accounts.ADMIN, now=utcnow())
    return {"size": change.size, "changed": change.changed}


@admin_route("/v1/agents/{agent_id}/pins/{vendor}/{name}", "PUT")
def pin(account_id: str, agent_id: str, vendor: str, name: str) -> dict[str, Any]:
    state = accounts.get_state(account_id, agent_id)
    return shapes.pin(workingset.pin(state, vendor, name, cause=Cause.CONSOLE, actor=accounts.ADMIN, now=utcnow()))


@admin_route("/v1/agents/{agent_id}/pins/{vendor}/{name}", "DELETE")
def unpin(account_id: str, agent_id: str, vendor: str, name: str) -> dict[str, Any]:
    state = accounts.get_state(account_id, agent_id)
    return shapes.pin(workingset.unpin(state, vendor, name, cause=Cause.CONSOLE, actor=accounts.ADMIN, now=utcnow()))


@admin_route("/v1/agents/{agent_id}/history", "GET")
def history(account_id: str, agent_id: str) -> dict[str, Any]:
    accounts.get_state(account_id, agent_id)
    page = workingset.history(agent_id, limit=limit(), cursor=query("cursor"))
    return shapes.page(page, shapes.event)


@admin_route("/v1/agents/{agent_id}/runs", "GET")
def agent_runs(account_id: str, agent_id: str) -> dict[str, Any]:
    accounts.get_state(account_id, agent_id)
    return shapes.page(runs.list_for_agent(agent_id, limit=limit(), cursor=query("cursor")), shapes.run_summary)


@admin_route("/v1/agents/{agent_id}/approvals", "GET")
def standing_decisions(account_id: str, agent_id: str) -> dict[str, Any]:
    return {"items": [shapes.decision(d) for d in runs.decisions(account_id, agent_id)], "next": None}


@admin_route("/v1/agents/{agent_id}/approvals/{vendor}/{name}", "DELETE")
def withdraw_decision(account_id: str, agent_id: str, vendor: str, name: str) -> dict[str, Any]:
    runs.withdraw_decision(account_id, agent_id, vendor, name)
    return {"withdrawn": True}
