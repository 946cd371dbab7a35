"""The OAuth consent page: where a chat product sends the person to connect (the authorization
endpoint of `chalicelib/oauth/`). The person, signed in, sees which application asks and where
the answer goes, picks one of their agents or creates one, and approves or declines; the browser
then goes back to the application with a code, or with `access_denied`."""

from __future__ import annotations

from collections.abc import Callable

from chalice import Response

from chalicelib.base.errors import InvalidInput
from chalicelib.console.agents import RANGES, settings_payload
from chalicelib.console.common import ALL_PAGE, Ctx, action, every, leave, page
from chalicelib.identity import accounts
from chalicelib.oauth import authorization

# the authorization request's parameters, carried from the page to its form
REQUEST_FIELDS = ("response_type", "client_id", "redirect_uri", "state", "code_challenge", "code_challenge_method",
                  "scope", "resource")
NEW_AGENT = "new"


@page("/console/oauth/authorize")
def consent_page(ctx: Ctx) -> Response:
    return _checked(ctx, ctx.params, lambda pending: _page(ctx, pending))


@action("/console/oauth/authorize")
def consent(ctx: Ctx) -> Response:
    request = {name: ctx.form[name] for name in REQUEST_FIELDS if name in ctx.form}
    return _checked(ctx, request, lambda pending: _decide(ctx, pending))


def _checked(ctx: Ctx, request: dict[str, str], then: Callable[[authorization.Pending], Response]) -> Response:
    """The request checked again on every step (the form's hidden fields are the browser's to edit)."""
    try:
        pending = authorization.check_request(request, ctx.now)
    except authorization.UnsafeRequest as unsafe:
        return ctx.render("error.html", 400, title="Cannot connect this application", message=str(unsafe))
    except authorization.Redirected as refused:
        return leave(refused.location)
    return then(pending)


def _decide(ctx: Ctx, pending: authorization.Pending) -> Response:
    if ctx.form.get("decision") != "approve":
        return leave(authorization.refusal(pending))
    chosen = ctx.form.get("agent", "")
    try:
        if chosen == NEW_AGENT:
            chosen = accounts.create_agent(ctx.account_id, settings_payload(ctx.form), ctx.now).agent.agent_id
        location = authorization.consent(pending, ctx.account_id, chosen, actor=accounts.ADMIN, now=ctx.now)
    except (InvalidInput, authorization.UnsafeRequest) as error:
        return _page(ctx, pending, 400, error=str(getattr(error, "message", error)))
    return leave(location)


def _page(ctx: Ctx, pending: authorization.Pending, status: int = 200, *, error: str | None = None) -> Response:
    agents = [agent for agent in every(lambda cursor: accounts.list_agents(ctx.account_id, limit=ALL_PAGE,
                                                                           cursor=cursor))
              if not agent.revoked]
    request = {name: value for name, value in {
        "response_type": "code", "client_id": pending.client.client_id, "redirect_uri": pending.redirect_uri,
        "state": pending.state, "code_challenge": pending.code_challenge, "code_challenge_method": "S256",
        "scope": pending.scope, "resource": pending.resource}.items() if value is not None}
    values = {"name": ctx.form.get("name", pending.client.client_name),
              "cap": ctx.form.get("cap", str(accounts.DEFAULT_CAP)),
              "idle_window_days": ctx.form.get("idle_window_days", str(accounts.DEFAULT_IDLE_WINDOW_DAYS))}
    return ctx.render("consent.html", status, form_targets=(pending.redirect_origin,), pending=pending,
                      agents=agents, request=request, values=values, ranges=RANGES, error=error,
                      chosen=ctx.form.get("agent", agents[0].agent_id if agents else NEW_AGENT), new_agent=NEW_AGENT)
