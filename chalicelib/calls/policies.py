"""Approval policies: how often a person is asked before a tool's write reaches its vendor.

    none        a read (guarded read-only): never asks
    first_call  the default for a write: asks on the agent's first call of each request shape;
                the person's decision stands for later calls (`runs`)
    every_call  the default for a destructive write: asks on every call; an approval lets that
                one call through and is never reused, while a denial still stands

A person sets a tool's policy, or the account's default for a vendor's tools, through the admin
API or the console; each change is recorded with who made it (`history`). A person's setting for
the tool itself is final. A vendor's default applies to the tools people published or imported;
to a version an agent published it can only add asking, never remove it: an agent, which chooses
its tool's vendor and hints, can never lower a policy (its hints cannot either: the guard that
decides read-only and destructive is never loosened without a person, see `guards`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from chalicelib.base.errors import InvalidInput
from chalicelib.base.validation import VENDOR_PATTERN
from chalicelib.catalog import toolbox
from chalicelib.identity import accounts
from chalicelib.store import policies as policy_store
from chalicelib.store.models import ANY_TOOL
from chalicelib.store.records import Page
from chalicelib.tools.definitions import Tool

NONE, FIRST_CALL, EVERY_CALL = "none", "first_call", "every_call"
ORDER = (NONE, FIRST_CALL, EVERY_CALL)  # least asking first
SETTABLE = (FIRST_CALL, EVERY_CALL)  # a write asks a person at least on its first call
VENDOR_DEFAULT = ANY_TOOL  # a history event's name for a change of a vendor's default

Settings = toolbox.Policies  # read with the tools they apply to (toolbox.resolve_with_policies)


def default(tool: Tool) -> str:
    """The policy a tool has when nobody set one: from the hints Workset enforces (its guard)."""
    if not tool.writes:
        return NONE
    return EVERY_CALL if tool.guard.destructive else FIRST_CALL


def effective(tool: Tool, settings: Settings) -> str:
    """The policy a call of `tool` is held to, given the account's settings: read with the tool on
    hot paths (`toolbox.resolve_with_policies` and its kin: no read of their own), else `settings_for`."""
    if not tool.writes:
        return NONE
    own = settings.get(tool.key)
    if own is not None:
        return own.policy
    fallback = default(tool)
    vendor = settings.get((tool.spec.vendor, None))
    if vendor is None:
        return fallback
    if accounts.is_agent(tool.version.published_by):  # an agent's tool: the default only adds asking
        return max(vendor.policy, fallback, key=ORDER.index)
    return vendor.policy


def settings_for(account_id: str, tools: Iterable[Tool]) -> Settings:
    """The settings that can apply to tools read apart (the admin API's, the console's): one batch
    read, none when no tool writes."""
    writes = [tool for tool in tools if tool.writes]
    keys: list[tuple[str, str | None]] = [key for tool in writes for key in (tool.key, (tool.spec.vendor, None))]
    return policy_store.get_many(account_id, keys) if keys else {}


def set_policy(account_id: str, vendor: str, name: str | None, policy: Any, person: str, now: datetime) -> str | None:
    """A person sets a tool's policy (`name`) or the account's default for a vendor's tools; `policy`
    None clears it (back to the default). Answers the setting. Recorded in the policy history."""
    if policy is not None and policy not in SETTABLE:
        raise InvalidInput(f"policy: one of {', '.join(SETTABLE)}, or null for the default (a read never asks; "
                           "a write asks at least on its first call)", field="policy")
    if name is None:
        if not isinstance(vendor, str) or not _vendor_ok(vendor):
            raise InvalidInput("vendor: not a vendor name", field="vendor")
    else:
        tool = toolbox.resolve(account_id, vendor, name)
        if policy is not None and not tool.writes:
            raise InvalidInput(f"{vendor}/{name} is guarded read-only: a read never asks a person", field="policy")
    policy_store.put(account_id, vendor, name, policy, person, now)
    return policy


def listing(account_id: str, *, limit: int, cursor: str | None) -> Page:
    """The account's settings, by vendor and name."""
    return policy_store.list_all(account_id, limit=limit, cursor=cursor)


def history(account_id: str, *, limit: int, cursor: str | None) -> Page:
    """Every change of the account's policies, newest first: what, who, when."""
    return policy_store.history(account_id, limit=limit, cursor=cursor)


def tool_history(account_id: str, vendor: str, name: str, *, limit: int, cursor: str | None) -> Page:
    """The changes of one tool's policy and of its vendor's default, newest first; `next` pages on."""
    return policy_store.tool_history(account_id, vendor, name, limit=limit, cursor=cursor)


def _vendor_ok(vendor: str) -> bool:
    return re.fullmatch(VENDOR_PATTERN, vendor) is not None
