"""Admin routes for approval policies: a tool's, the account's default for a vendor's tools, and
the history of who set what (chalicelib/calls/policies.py)."""

from __future__ import annotations

from typing import Any

from chalicelib.api import shapes
from chalicelib.api.common import admin_route, bearer, body, limit, query
from chalicelib.base.clock import iso, utcnow
from chalicelib.base.errors import InvalidInput
from chalicelib.calls import policies
from chalicelib.catalog import toolbox
from chalicelib.identity import accounts
from chalicelib.store.records import HistoryEvent, PolicySetting


@admin_route("/v1/approval-policies", "GET")
def list_policies(account_id: str) -> dict[str, Any]:
    """Every policy a person set, by vendor and name (`name` null: the vendor's default)."""
    return shapes.page(policies.listing(account_id, limit=limit(), cursor=query("cursor")), setting)


@admin_route("/v1/approval-policies/history", "GET")
def policy_history(account_id: str) -> dict[str, Any]:
    """Who set which policy when, newest first (`cause` is the policy set, or `default`)."""
    return shapes.page(policies.history(account_id, limit=limit(), cursor=query("cursor")), _change)


@admin_route("/v1/tools/{vendor}/{name}/approval-policy", "GET")
def tool_policy(account_id: str, vendor: str, name: str) -> dict[str, Any]:
    """The policy a call of the tool is held to now, and whether a person set it."""
    return _tool_answer(account_id, vendor, name)


@admin_route("/v1/tools/{vendor}/{name}/approval-policy", "PUT")
def set_tool_policy(account_id: str, vendor: str, name: str) -> dict[str, Any]:
    """`{"policy": "first_call" | "every_call" | null}` (null: back to the default)."""
    policies.set_policy(account_id, vendor, name, _policy(body()), _person(), utcnow())
    return _tool_answer(account_id, vendor, name)


@admin_route("/v1/vendors/{vendor}/approval-policy", "PUT")
def set_vendor_policy(account_id: str, vendor: str) -> dict[str, Any]:
    """The account's default for the vendor's write tools: `{"policy": ... | null}`."""
    policy = policies.set_policy(account_id, vendor, None, _policy(body()), _person(), utcnow())
    return {"vendor": vendor, "policy": policy}


def setting(record: PolicySetting) -> dict[str, Any]:
    """A policy a person set."""
    return {"vendor": record.vendor, "name": record.name, "policy": record.policy, "set_by": record.set_by,
            "set_at": iso(record.set_at)}


def _change(record: HistoryEvent) -> dict[str, Any]:
    """A policy change; a vendor's default named as its setting is (`name` null)."""
    shape = shapes.event(record)
    if record.name == policies.VENDOR_DEFAULT:
        shape["name"] = None
    return shape


def _tool_answer(account_id: str, vendor: str, name: str) -> dict[str, Any]:
    tool = toolbox.resolve(account_id, vendor, name)
    found = policies.settings_for(account_id, [tool])
    own = found.get(tool.key)
    return {"vendor": vendor, "name": name, "policy": policies.effective(tool, found),
            "default": policies.default(tool), "set": setting(own) if own is not None else None}


def _policy(payload: Any) -> Any:
    if not isinstance(payload, dict) or set(payload) != {"policy"}:
        raise InvalidInput('send {"policy": "first_call" | "every_call" | null}, and nothing else', field="policy")
    return payload["policy"]


def _person() -> str:
    return accounts.admin_actor(bearer() or "")
