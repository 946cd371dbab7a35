"""Admin routes for the account itself: its allow list of keyless hosts, and ending every console
session of the account."""

from __future__ import annotations

from typing import Any

from chalicelib import accounts
from chalicelib.api.common import admin_route, body


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
