"""The JSON shapes the admin API keeps (SPEC.md, "Shapes the admin API keeps")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chalicelib.agents.workingset import PinChange
from chalicelib.base.clock import iso
from chalicelib.calls.runs import ShapeChange
from chalicelib.catalog import toolbox
from chalicelib.identity.accounts import Created
from chalicelib.net import urls
from chalicelib.store.records import (
    Agent,
    Approval,
    Call,
    Connection,
    Grant,
    HistoryEvent,
    Page,
    Promotion,
    Run,
    ToolVersion,
    Upstream,
)
from chalicelib.tools import definitions, guards
from chalicelib.tools.guards import Guard


def agent(record: Agent) -> dict[str, Any]:
    """An agent's settings and working-set size."""
    return {
        "id": record.agent_id,
        "name": record.name,
        "cap": record.cap,
        "idle_window_days": record.idle_window_days,
        "size": record.size,
        "webhook_url": record.webhook_url,
        "connections": "all" if record.connection_scope is None else list(record.connection_scope),
        "created_at": iso(record.created_at),
        "revoked_at": iso(record.revoked_at),
        "archived_at": iso(record.archived_at),
    }


def grant(record: Grant) -> dict[str, Any]:
    """An OAuth client's grant to an agent (never its tokens)."""
    return {
        "id": record.grant_id,
        "client_id": record.client_id,
        "client_name": record.client_name,
        "scope": record.scope,
        "resource": record.resource,
        "created_at": iso(record.created_at),
        "consented_by": record.consented_by,
        "refreshed_at": iso(record.refreshed_at),
        "revoked_at": iso(record.revoked_at),
    }


def created_agent(created: Created) -> dict[str, Any]:
    """An agent as created or edited, with the secrets shown only this once."""
    shaped = agent(created.agent)
    if created.api_key:
        shaped["api_key"] = created.api_key
    if created.webhook_secret:
        shaped["webhook_secret"] = created.webhook_secret
    return shaped


def promotion(record: Promotion) -> dict[str, Any]:
    """A working-set item; `pinned_at` and `pinned_by` are null unless it is pinned."""
    return {
        "vendor": record.vendor,
        "name": record.name,
        "promoted_by": record.promoted_by,
        "promoted_at": iso(record.promoted_at),
        "last_used_at": iso(record.last_used_at),
        "pinned": record.pinned,
        "pinned_at": iso(record.pinned_at),
        "pinned_by": record.pinned_by,
    }


def pin(change: PinChange) -> dict[str, Any]:
    """A tool's pin after a pin or unpin, with the agent's pin count and limit."""
    return {"pinned": change.pinned, "changed": change.changed, "pins": change.pins, "pin_limit": change.limit}


def event(record: HistoryEvent) -> dict[str, Any]:
    """A history event (`run_id` for a decision on a run: who decided is its `actor`)."""
    shape = {
        "vendor": record.vendor,
        "name": record.name,
        "action": record.action,
        "cause": record.cause,
        "actor": record.actor,
        "at": iso(record.at),
    }
    if record.run_id is not None:
        shape["run_id"] = record.run_id
    return shape


def tool_version(record: ToolVersion) -> dict[str, Any]:
    """One version of a tool with its definition (`annotations` as its author declared them), the
    hints Workset enforces for it (`accepted_annotations`), whether its declared hints are looser
    and wait for a person (`annotations_pending`), and who accepted looser hints, if anyone did."""
    guard = Guard.of_version(record)
    return {
        **definitions.shown(record.definition),
        "version": record.version,
        "published_at": iso(record.published_at),
        "published_by": record.published_by,
        "accepted_annotations": guard.hints,
        "annotations_pending": guards.pending(Guard.declared(record.definition.get("annotations")), guard),
        "accepted_by": record.accepted_by,
        "accepted_at": iso(record.accepted_at),
        **({"origin": record.origin} if record.origin else {}),
        **({"unavailable": record.unavailable} if record.unavailable else {}),
    }


def tool(versions: list[ToolVersion]) -> dict[str, Any]:
    """A tool with every version, oldest first, and the newest version's pending loosening (null
    when none waits): what it declares, what Workset enforces until a person accepts it."""
    newest = versions[-1]
    guard, declared = Guard.of_version(newest), Guard.declared(newest.definition.get("annotations"))
    pending = {"version": newest.version, "declared": declared.hints, "accepted": guard.hints} \
        if guards.pending(declared, guard) else None
    return {"vendor": newest.vendor, "name": newest.name, "versions": [tool_version(v) for v in versions],
            "pending_annotations": pending}


def upstream(record: Upstream) -> dict[str, Any]:
    """A registered MCP server and how its last sync went."""
    return {
        "id": record.vendor,
        "vendor": record.vendor,
        "url": urls.redacted(record.url),  # a key may be among its query's values
        "connection": record.connection_id,
        "revision": record.revision,
        "created_at": iso(record.created_at),
        "synced_at": iso(record.synced_at),
        "last_sync": record.sync,
    }


def page(result: Page, shape: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """`{"items": [...], "next": cursor-or-null}`."""
    return {"items": [shape(item) for item in result.items], "next": result.next}


def run_summary(record: Run) -> dict[str, Any]:
    """A run in a list: what was called and how it stands (`GET /v1/runs/{id}` has the rest)."""
    return {
        "id": record.run_id,
        "agent_id": record.agent_id,
        "vendor": record.vendor,
        "name": record.name,
        "version": record.version,
        "dry_run": record.dry_run,
        "status": record.status,
        "created_at": iso(record.created_at),
        "updated_at": iso(record.updated_at),
        "lease_expires_at": iso(record.lease_expires_at),
        "decided_by": record.decided_by,
    }


def run(record: Run) -> dict[str, Any]:
    """A run: what was called, with what, how it stands and what it answered."""
    return {**run_summary(record), "input": record.input, "result": record.result, "error": record.error}


def decision(record: Approval) -> dict[str, Any]:
    """A standing approval or denial: for which tool, request shape and version, by whom."""
    return {
        "vendor": record.vendor,
        "name": record.name,
        "decision": record.decision,
        "version": record.version,
        "request_shape": toolbox.shown_shape(record.shape) if record.shape else record.shape,
        "decided_by": record.approved_by,
        "decided_at": iso(record.approved_at),
    }


def pending(record: Run, change: ShapeChange | None) -> dict[str, Any]:
    """A run waiting for a person, with what changed since the agent's earlier decision on the
    tool (null when there was none)."""
    shaped = run(record)
    shaped["since_decision"] = None if change is None else {
        **decision(change.decision), "changes": change.changes}
    return shaped


def connection(record: Connection) -> dict[str, Any]:
    """A connection without its secret: the kind of credential, where it goes and how it stands
    (`active`, `revoked`, `needs_reconnect`, `not_connected`). OAuth settings are shown (a client
    id is public); no secret, token or password ever is."""
    auth: dict[str, Any] = {"type": record.auth_type}
    if record.auth_type == "header":
        auth["name"] = record.header_name
    if record.auth_type == "query":
        auth["name"] = record.query_name
    if record.oauth:
        auth.update({key: record.oauth[key] for key in ("authorize_url", "token_url", "client_id")
                     if key in record.oauth})
        scope = record.oauth.get("scope") or ""
        if record.auth_type == "oauth2_authorization_code":
            auth["scopes"] = scope.split()
        elif scope:
            auth["scope"] = scope
    return {
        "id": record.connection_id,
        "vendor": record.vendor,
        "auth": auth,
        "auth_type": record.auth_type,
        "hosts": list(record.hosts),
        "status": record.status,
        "status_reason": record.status_reason,
        "created_at": iso(record.created_at),
        "connected_at": iso(record.connected_at),
        "revoked_at": iso(record.revoked_at),
    }


def connection_call(record: Call) -> dict[str, Any]:
    """One call through a connection: which tool, which agent, how it ended, when (never its
    input or result)."""
    return {
        "run_id": record.run_id,
        "agent_id": record.agent_id,
        "vendor": record.vendor,
        "name": record.name,
        "version": record.version,
        "dry_run": record.dry_run,
        "status": record.status,
        "error_code": record.error_code,
        "at": iso(record.created_at),
        "updated_at": iso(record.updated_at),
    }
