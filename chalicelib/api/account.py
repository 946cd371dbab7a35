"""Admin routes for the account itself: its allow list of keyless hosts, ending every console
session of the account, and what find_tool learned from the account's use (seen and reset)."""

from __future__ import annotations

from typing import Any

from chalicelib.api.common import admin_route, body, limit, query
from chalicelib.catalog import usage
from chalicelib.identity import accounts
from chalicelib.store.records import LearnedPair


@admin_route("/v1/account", "GET")
def get_account(account_id: str) -> dict[str, Any]:
    return {"allowed_hosts": list(accounts.allowed_hosts(account_id))}


@admin_route("/v1/account/allowed-hosts", "PUT")
def set_allowed_hosts(account_id: str) -> dict[str, Any]:
    return {"allowed_hosts": list(accounts.set_allowed_hosts(account_id, body()))}


@admin_route("/v1/console-sessions/revoke", "POST")
def revoke_console_sessions(account_id: str) -> dict[str, Any]:
    accounts.end_console_sessions(account_id)
    return {"revoked": True}


@admin_route("/v1/account/search-memory", "GET")
def get_search_memory(account_id: str) -> dict[str, Any]:
    page, count = usage.learned(account_id, limit=limit(), cursor=query("cursor"))
    return {"count": count, "limit": usage.MEMORY_PAIRS, "items": [_pair(p) for p in page.items], "next": page.next}


@admin_route("/v1/account/search-memory", "DELETE")
def reset_search_memory(account_id: str) -> dict[str, Any]:
    return {"deleted": usage.forget(account_id), "count": 0}


def _pair(pair: LearnedPair) -> dict[str, Any]:
    return {"query": pair.query, "vendor": pair.vendor, "name": pair.name, "count": pair.count,
            "first_seen": pair.first_seen.isoformat(), "last_seen": pair.last_seen.isoformat()}
