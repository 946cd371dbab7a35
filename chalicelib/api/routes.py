"""The admin API under /v1: JSON in and out, one admin bearer token per account."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import Any

from chalice import Blueprint, Response

from chalicelib import accounts, toolbox, workingset
from chalicelib.api import shapes
from chalicelib.clock import utcnow
from chalicelib.config import settings
from chalicelib.errors import InvalidInput, TooLarge, WorksetError
from chalicelib.responses import json_response
from chalicelib.store import history as history_store
from chalicelib.workingset import Cause, PromotedBy

bp = Blueprint(__name__)

PAGE_DEFAULT = 50
PAGE_MAX = 100


def admin_route(path: str, method: str, status: int = 200) -> Callable[[Callable[..., Any]], Any]:
    """Register a view that needs an admin token; domain errors become `{"error": ...}` bodies."""

    def register(view: Callable[..., Any]) -> Any:
        @wraps(view)
        def wrapped(**params: str) -> Response:
            try:
                account_id = accounts.authenticate_admin(_bearer())
                return json_response(status, view(account_id, **params))
            except WorksetError as error:
                headers = {"WWW-Authenticate": 'Bearer realm="workset"'} if error.status == 401 else {}
                return json_response(error.status, {"error": error.to_dict()}, headers)

        return bp.route(path, methods=[method], content_types=["application/json"])(wrapped)

    return register


@admin_route("/v1/agents", "POST", status=201)
def create_agent(account_id: str) -> dict[str, Any]:
    agent, key = accounts.create_agent(account_id, _body(), utcnow())
    return {**shapes.agent(agent), "api_key": key}


@admin_route("/v1/agents", "GET")
def list_agents(account_id: str) -> dict[str, Any]:
    page = accounts.list_agents(account_id, limit=_limit(), cursor=_query("cursor"))
    return shapes.page(page, shapes.agent)


@admin_route("/v1/agents/{agent_id}", "GET")
def get_agent(account_id: str, agent_id: str) -> dict[str, Any]:
    return shapes.agent(accounts.get_state(account_id, agent_id).agent)


@admin_route("/v1/agents/{agent_id}", "PATCH")
def update_agent(account_id: str, agent_id: str) -> dict[str, Any]:
    return shapes.agent(accounts.update_agent(account_id, agent_id, _body()))


@admin_route("/v1/agents/{agent_id}/working-set", "GET")
def working_set(account_id: str, agent_id: str) -> dict[str, Any]:
    state = accounts.get_state(account_id, agent_id)
    return {"items": [shapes.promotion(p) for p in state.promotions], "next": None}


@admin_route("/v1/agents/{agent_id}/working-set", "POST", status=201)
def promote(account_id: str, agent_id: str) -> dict[str, Any]:
    ref = _tool_ref(_body())
    state = accounts.get_state(account_id, agent_id)
    change = workingset.promote(state, *ref, by=PromotedBy.CONSOLE, actor="admin", now=utcnow())
    return {"size": change.size, "changed": change.changed}


@admin_route("/v1/agents/{agent_id}/working-set/{vendor}/{name}", "DELETE")
def demote(account_id: str, agent_id: str, vendor: str, name: str) -> dict[str, Any]:
    state = accounts.get_state(account_id, agent_id)
    change = workingset.demote(state, vendor, name, cause=Cause.CONSOLE, actor="admin", now=utcnow())
    return {"size": change.size, "changed": change.changed}


@admin_route("/v1/agents/{agent_id}/history", "GET")
def history(account_id: str, agent_id: str) -> dict[str, Any]:
    accounts.get_state(account_id, agent_id)
    page = history_store.list_events(agent_id, limit=_limit(), cursor=_query("cursor"))
    return shapes.page(page, shapes.event)


@admin_route("/v1/tools", "POST", status=201)
def publish_tool(account_id: str) -> dict[str, Any]:
    spec = toolbox.parse_spec(_body())
    tool = toolbox.publish(account_id, spec, published_by="admin", now=utcnow())
    return {"vendor": spec.vendor, "name": spec.name, "version": tool.version.version}


@admin_route("/v1/tools", "GET")
def list_tools(account_id: str) -> dict[str, Any]:
    page = toolbox.page(account_id, limit=_limit(), cursor=_query("cursor"))
    return shapes.page(page, shapes.tool_version)


@admin_route("/v1/tools/{vendor}/{name}", "GET")
def get_tool(account_id: str, vendor: str, name: str) -> dict[str, Any]:
    found = toolbox.versions(account_id, vendor, name)
    return {"vendor": vendor, "name": name, "versions": [shapes.tool_version(v) for v in found]}


def _bearer() -> str | None:
    value = bp.current_request.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _body() -> Any:
    raw = bp.current_request.raw_body
    if not raw:
        raise InvalidInput("the body must be a JSON object")
    if len(raw) > settings().max_request_bytes:
        raise TooLarge(f"the body is larger than {settings().max_request_bytes} bytes")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise InvalidInput("the body is not valid JSON") from None


def _query(name: str) -> str | None:
    return (bp.current_request.query_params or {}).get(name)


def _limit() -> int:
    text = _query("limit")
    if text is None:
        return PAGE_DEFAULT
    if not text.isdigit() or not 1 <= int(text) <= PAGE_MAX:
        raise InvalidInput(f"limit must be an integer from 1 to {PAGE_MAX}", field="limit")
    return int(text)


def _tool_ref(body: Any) -> tuple[str, str]:
    if not isinstance(body, dict) or not isinstance(body.get("vendor"), str) or not isinstance(body.get("name"), str):
        raise InvalidInput("vendor and name are required", field="vendor")
    return body["vendor"], body["name"]

