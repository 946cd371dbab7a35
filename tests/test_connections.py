"""Connections: the secret is typed once, injected into runs, redacted in previews, never shown."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from chalicelib.store import connections as connection_store
from tests.conftest import Admin, Mcp, Vendor

SECRET = "sk_live_very_secret_value"


def _connect(admin: Admin, **overrides: Any) -> dict[str, Any]:
    body = {"vendor": "stripe", "auth": {"type": "bearer", "token": SECRET}}
    body.update(overrides)
    response = admin.call("POST", "/v1/connections", body)
    assert response.status_code == 201, response.body
    return response.json_body


def _publish(admin: Admin, vendor: Vendor, connection_id: str, method: str = "GET", **extra: Any) -> None:
    annotations = {"readOnlyHint": True} if method == "GET" else {"destructiveHint": False}
    admin.publish(vendor="stripe", name="charges", description="List or create Stripe charges.",
                  input_schema={"type": "object", "properties": {"amount": {"type": "integer"}}},
                  annotations=annotations, connection=connection_id,
                  request={"method": method, "url": f"{vendor.url}/charges"}, **extra)


def test_secret_is_never_returned_and_is_stored_encrypted(admin: Admin, vendor: Vendor) -> None:
    # WHEN a connection is created
    created = _connect(admin)
    # THEN no answer carries the secret, and the table holds ciphertext only
    listed = admin.call("GET", "/v1/connections").json_body
    fetched = admin.call("GET", f"/v1/connections/{created['id']}").json_body
    for answer in (created, listed, fetched):
        assert SECRET not in json.dumps(answer)
    assert created["auth"] == {"type": "bearer"}
    stored = connection_store.get(_account(admin), created["id"])
    assert stored is not None and SECRET.encode() not in stored.ciphertext


def test_runs_carry_the_credential_to_the_vendor(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    connection = _connect(admin)
    _publish(admin, vendor, connection["id"])
    result = mcp.call("run_tool", {"vendor": "stripe", "name": "charges", "input": {}})
    assert result["isError"] is False
    assert vendor.received[0]["headers"]["Authorization"] == f"Bearer {SECRET}"


def test_header_connection_sends_the_named_header(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    connection = _connect(admin, auth={"type": "header", "name": "X-Api-Key", "value": SECRET})
    _publish(admin, vendor, connection["id"])
    mcp.call("run_tool", {"vendor": "stripe", "name": "charges", "input": {}})
    assert vendor.received[0]["headers"]["X-Api-Key"] == SECRET


def test_dry_run_preview_redacts_the_secret_and_history_never_holds_it(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    connection = _connect(admin)
    _publish(admin, vendor, connection["id"], method="POST")
    mcp.call("promote", {"vendor": "stripe", "name": "charges"})
    result = mcp.call("run_tool", {"vendor": "stripe", "name": "charges", "input": {"amount": 5}, "dryRun": True})
    preview = result["structuredContent"]["preview"]
    assert preview["headers"]["Authorization"] == "[redacted]"
    assert SECRET not in json.dumps(result)
    agent_id = admin.call("GET", "/v1/agents").json_body["items"][0]["id"]
    for path in (f"/v1/agents/{agent_id}/runs", f"/v1/agents/{agent_id}/history"):
        assert SECRET not in admin.call("GET", path).body.decode()
    assert SECRET not in caplog.text
    assert vendor.received == []


def test_a_revoked_connection_fails_later_runs_clearly(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    connection = _connect(admin)
    _publish(admin, vendor, connection["id"])
    revoked = admin.call("POST", f"/v1/connections/{connection['id']}/revoke").json_body
    assert revoked["status"] == "revoked" and revoked["revoked_at"]
    result = mcp.call("run_tool", {"vendor": "stripe", "name": "charges", "input": {}})
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "connection_revoked"
    assert vendor.received == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"vendor": "stripe", "auth": {"type": "bearer"}}, "auth.bearer.token"),
        ({"vendor": "stripe", "auth": {"type": "digest", "token": "x"}}, "auth"),
        ({"vendor": "stripe", "auth": {"type": "basic", "token": "x"}}, "auth.basic.username"),
        ({"vendor": "stripe", "auth": {"type": "basic", "username": "a:b", "password": "x"}}, "auth.basic.username"),
        ({"vendor": "stripe", "auth": {"type": "bearer", "token": "x\ny"}}, "auth.bearer.token"),
        ({"vendor": "stripe", "auth": {"type": "header", "name": "X-Key", "value": "é"}}, "auth.header.value"),
        ({"vendor": "stripe", "auth": {"type": "query", "name": "api key", "value": "x"}}, "auth.query.name"),
        ({"vendor": "stripe", "auth": {"type": "query", "name": "key", "value": "x\u0000"}}, "auth.query.value"),
        ({"vendor": "stripe", "auth": {"type": "oauth2_client_credentials", "token_url": "ftp://t.example/token",
                                       "client_id": "c", "client_secret": "x"}},
         "auth.oauth2_client_credentials.token_url"),
        ({"vendor": "stripe", "auth": {"type": "oauth2_client_credentials", "token_url": "https://t.example/token",
                                       "client_id": "c"}}, "auth.oauth2_client_credentials.client_secret"),
        ({"vendor": "stripe", "auth": {"type": "oauth2_client_credentials", "token_url": "https://u@t.example/",
                                       "client_id": "c", "client_secret": "x"}},
         "auth.oauth2_client_credentials.token_url"),
        ({"vendor": "stripe", "auth": {"type": "oauth2_client_credentials", "token_url": "https://t.example/token",
                                       "client_id": "c", "client_secret": "x"}, "hosts": ["api.stripe.com"]},
         "auth.token_url"),
        ({"vendor": "stripe", "auth": {"type": "oauth2_authorization_code", "authorize_url": "https://a.example/",
                                       "token_url": "https://t.example/", "client_id": "c", "client_secret": "x",
                                       "scopes": ["read write"]}}, "auth.oauth2_authorization_code.scopes.0"),
        ({"vendor": "Stripe", "auth": {"type": "bearer", "token": "x"}}, "vendor"),
        ({"vendor": "stripe", "auth": {"type": "header", "name": "Host", "value": "x"}}, "auth.header.name"),
        ({"vendor": "stripe", "auth": {"type": "bearer", "token": "x"}, "hosts": ["bad host"]}, "hosts.0"),
    ],
)
def test_bad_connections_are_refused_and_nothing_is_stored(admin: Admin, body: dict, field: str) -> None:
    response = admin.call("POST", "/v1/connections", body)
    assert response.status_code == 400
    assert response.json_body["error"]["field"] == field
    assert "x" not in response.json_body["error"]["message"].split(":")[-1].split()  # the value is not echoed
    assert admin.call("GET", "/v1/connections").json_body["items"] == []


def test_a_tool_may_only_name_a_connection_of_its_account_and_vendor(admin: Admin, other_admin: Admin,
                                                                     vendor: Vendor) -> None:
    theirs = _connect(other_admin)
    mine = _connect(admin, vendor="notion")
    for connection_id in (theirs["id"], mine["id"], "cnnothing"):
        response = admin.call("POST", "/v1/tools", {
            "vendor": "stripe", "name": "charges", "description": "d", "input_schema": {"type": "object"},
            "annotations": {"readOnlyHint": True}, "connection": connection_id,
            "request": {"method": "GET", "url": f"{vendor.url}/charges"}})
        assert response.status_code == 400
        assert response.json_body["error"]["field"] == "connection"


def test_a_connection_limited_to_hosts_is_never_sent_elsewhere(admin: Admin, vendor: Vendor) -> None:
    connection = _connect(admin, hosts=["api.stripe.com"])
    response = admin.call("POST", "/v1/tools", {
        "vendor": "stripe", "name": "charges", "description": "d", "input_schema": {"type": "object"},
        "annotations": {"readOnlyHint": True}, "connection": connection["id"],
        "request": {"method": "GET", "url": f"{vendor.url}/charges"}})
    assert response.status_code == 400
    assert "api.stripe.com" in response.json_body["error"]["message"]


def test_another_accounts_connection_is_not_found(admin: Admin, other_admin: Admin, vendor: Vendor) -> None:
    theirs = _connect(other_admin)
    assert admin.call("GET", f"/v1/connections/{theirs['id']}").status_code == 404
    assert admin.call("POST", f"/v1/connections/{theirs['id']}/revoke").status_code == 404
    assert other_admin.call("GET", f"/v1/connections/{theirs['id']}").json_body["status"] == "active"


def _account(admin: Admin) -> str:
    from chalicelib.identity import accounts

    return accounts.authenticate_admin(admin.token)
