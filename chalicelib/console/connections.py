"""Connections: add one (the secret is typed once and never shown again), a connection's page
(its state, recent calls, a new secret in place, Connect for an OAuth authorization-code one),
the vendor's OAuth callback, and revoking after a confirmation that lists the agents' tools the
revocation will demote."""

from __future__ import annotations

import re
from typing import Any

from chalice import Response

from chalicelib.access import connections, credentials
from chalicelib.agents import sweep
from chalicelib.base import jsontext
from chalicelib.base.clock import utcnow
from chalicelib.base.errors import InvalidInput
from chalicelib.console.common import ALL_PAGE, Ctx, action, agent_names, bp, every, leave, page, redirect, render
from chalicelib.identity import sessions
from chalicelib.net import urls

# what a refused form shows again: never a secret
KEPT_FIELDS = ("vendor", "auth_type", "header_name", "username", "param_name", "token_url", "authorize_url",
               "client_id", "scope", "hosts")
RECENT_CALLS = 20
KINDS = (("bearer", "Bearer token"), ("header", "API key in a header"), ("basic", "HTTP Basic"),
         ("query", "API key in the query"), ("oauth2_client_credentials", "OAuth 2 client credentials"),
         ("oauth2_authorization_code", "OAuth 2 authorization code (a person connects)"))


@page("/console/connections")
def connections_page(ctx: Ctx) -> Response:
    return _page(ctx)


@action("/console/connections")
def add_connection(ctx: Ctx) -> Response:
    try:
        created = connections.create(ctx.account_id, _payload(ctx.form), ctx.now)
    except InvalidInput as error:
        return _page(ctx, 400, error=error.message, values={name: ctx.form.get(name, "") for name in KEPT_FIELDS})
    return redirect("/console/connections", done="added", connection=created.connection_id)


@bp.route(credentials.CALLBACK_PATH, methods=["GET"], content_types=["application/json"])
def oauth_callback() -> Response:
    """The vendor sends the person back here with `code` and `state` (a top-level navigation, so
    the SameSite=Lax console cookie comes along); the state is bound to the session that pressed
    Connect."""
    request = bp.current_request
    now = utcnow()
    query = dict(request.query_params or {})
    if any(jsontext.text_fault(value) is not None or len(value) > 4096 for value in query.values()):
        return render("error.html", 400, signed_in=False, csrf="", title="Not accepted",
                      message="The vendor's answer is not text; nothing was changed. Press Connect again.")
    session = sessions.read(request.headers.get("cookie"), now)
    if session is None:
        return render("error.html", 403, signed_in=False, csrf="", title="Sign in first", message=(
            "Connecting needs the console session that pressed Connect. Sign in, then press Connect again."))
    ctx = Ctx(session, now, params=query)
    try:
        connection = credentials.complete_authorization(
            ctx.account_id, session.session_id, query.get("state", ""), code=query.get("code"),
            error=query.get("error"), now=now)
    except InvalidInput as error:
        return ctx.render("error.html", 400, title="Not connected", message=error.message)
    return redirect(f"/console/connections/{connection.connection_id}", done="connected")


@page("/console/connections/{connection_id}")
def connection_page(ctx: Ctx, connection_id: str) -> Response:
    return _connection_page(ctx, connection_id)


@action("/console/connections/{connection_id}/connect")
def connect(ctx: Ctx, connection_id: str) -> Response:
    """Send the person to the vendor to grant access (303 to its authorize URL)."""
    target = credentials.authorization_url(ctx.account_id, connection_id, ctx.session.session_id, ctx.now)
    return leave(target)


@action("/console/connections/{connection_id}/auth")
def replace_auth(ctx: Ctx, connection_id: str) -> Response:
    connection = connections.get(ctx.account_id, connection_id)
    form = {**ctx.form, "auth_type": connection.auth_type, "header_name": connection.header_name,
            "param_name": connection.query_name}
    try:
        connections.replace_auth(ctx.account_id, connection_id, {"auth": _payload(form)["auth"]}, ctx.now)
    except InvalidInput as error:
        return _connection_page(ctx, connection_id, 400, error=error.message)
    return redirect(f"/console/connections/{connection_id}", done="replaced")


@page("/console/connections/{connection_id}/revoke")
def confirm_revoke(ctx: Ctx, connection_id: str) -> Response:
    connection = connections.get(ctx.account_id, connection_id)
    return ctx.render("revoke.html", connection=connection, affected=connections.users(ctx.account_id, connection_id),
                      names=agent_names(ctx.account_id))


@action("/console/connections/{connection_id}/revoke")
def revoke(ctx: Ctx, connection_id: str) -> Response:
    revocation = connections.revoke(ctx.account_id, connection_id, ctx.now)
    report = sweep.review_all(revocation.agents, ctx.now)  # demote now what the sweep would
    return ctx.render("revoked.html", connection=revocation.connection, report=report,
                      names=agent_names(ctx.account_id))


def _page(ctx: Ctx, status: int = 200, *, error: str | None = None, values: dict[str, str] | None = None) -> Response:
    listing = list(every(lambda cursor: connections.list_all(ctx.account_id, limit=ALL_PAGE, cursor=cursor)))
    shown = values or {name: "" for name in KEPT_FIELDS}
    if shown.get("auth_type") not in dict(KINDS):  # one kind is always checked: its fields show
        shown = {**shown, "auth_type": "bearer"}
    return ctx.render("connections.html", status, listing=listing, error=error, values=shown, kinds=KINDS,
                      done=ctx.params.get("done"), added=ctx.params.get("connection", ""))


def _connection_page(ctx: Ctx, connection_id: str, status: int = 200, *, error: str | None = None) -> Response:
    connection = connections.get(ctx.account_id, connection_id)
    calls = connections.recent_calls(ctx.account_id, connection_id, limit=RECENT_CALLS).items
    origin = _origin((connection.oauth or {}).get("authorize_url", ""))
    # Connect is a form whose answer redirects to the vendor: browsers hold that redirect to the
    # page's form-action, so the vendor's origin (and only it) is added
    return ctx.render("connection.html", status, form_targets=(origin,) if origin else (), connection=connection,
                      calls=calls, error=error, names=agent_names(ctx.account_id), done=ctx.params.get("done"),
                      callback=credentials.callback_url())


def _origin(authorize_url: str) -> str:
    """`scheme://host[:port]` of a stored authorize URL, or "" if it is not one a policy may name."""
    try:
        return urls.parse(authorize_url).origin
    except ValueError:
        return ""


def _payload(form: dict[str, str]) -> dict[str, Any]:
    """`{vendor, auth, hosts}` as the admin API takes it, from the form's flat fields."""
    secret = form.get("secret", "")
    kind = form.get("auth_type", "bearer")
    field = {name: form.get(name, "").strip() for name in KEPT_FIELDS}
    auth: dict[str, Any]
    if kind == "header":
        auth = {"type": "header", "name": field["header_name"], "value": secret}
    elif kind == "basic":
        auth = {"type": "basic", "username": field["username"], "password": secret}
    elif kind == "query":
        auth = {"type": "query", "name": field["param_name"], "value": secret}
    elif kind == "oauth2_client_credentials":
        auth = {"type": kind, "token_url": field["token_url"], "client_id": field["client_id"],
                "client_secret": secret, **({"scope": field["scope"]} if field["scope"] else {})}
    elif kind == "oauth2_authorization_code":
        auth = {"type": kind, "authorize_url": field["authorize_url"], "token_url": field["token_url"],
                "client_id": field["client_id"], "client_secret": secret, "scopes": field["scope"].split()}
    else:
        auth = {"type": "bearer", "token": secret}
    hosts = [host for host in re.split(r"[\s,]+", form.get("hosts", "").strip().lower()) if host]
    return {"vendor": field["vendor"], "auth": auth, "hosts": hosts}
