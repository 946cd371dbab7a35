"""The authorization request a person answers on the console's consent page, and the code their
approval mints: single-use, five minutes, bound to the client, the redirect URI (exact, or a
loopback one on any port), the PKCE S256 challenge and the `/mcp` resource (RFC 8707). The answer
goes back to the client with the issuer as `iss` (RFC 9207)."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NoReturn
from urllib.parse import urlencode

from chalicelib.base.config import settings
from chalicelib.identity import accounts
from chalicelib.identity.accounts import hash_token
from chalicelib.net import urls
from chalicelib.oauth import documents
from chalicelib.oauth.clients import redirect_uri
from chalicelib.oauth.discovery import SCOPE, issuer
from chalicelib.store import oauth as oauth_store
from chalicelib.store.records import AuthorizationCode, OAuthClient

CODE_PREFIX = "wsc_"
CODE_LIFETIME = timedelta(minutes=5)
CODE_KEPT = timedelta(days=1)  # a redeemed code is remembered this long, so its replay revokes the grant
ACCEPTED_SCOPES = frozenset({SCOPE, "offline_access"})  # offline_access is implied (refresh tokens always)
PKCE = re.compile(r"[A-Za-z0-9._~-]{43,128}")  # RFC 7636 4.1 (verifier) and an S256 challenge's alphabet
_STATE = re.compile(r"[\x20-\x7e]{1,500}")


class UnsafeRequest(Exception):
    """An authorization request whose client or redirect URI cannot be trusted: the person is told,
    and nothing is sent to the redirect URI (RFC 6749 4.1.2.1)."""


class Redirected(Exception):
    """An authorization request refused in a way the client must hear: at its redirect URI."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


@dataclass(frozen=True)
class Pending:
    """A checked authorization request, waiting for a person's answer. `url` is the redirect URI
    as `clients.redirect_uri` reads it; `exact` says it is one the client registered, string for
    string (not a loopback one on another port): only then may a fault go back to it unasked."""

    client: OAuthClient
    url: urls.URL
    exact: bool
    code_challenge: str
    scope: str
    resource: str
    state: str | None

    @property
    def redirect_uri(self) -> str:
        """The redirect URI, as asked (and registered)."""
        return self.url.text

    @property
    def identified_by(self) -> str | None:
        """The host a metadata-document client is identified by (None for a registered client)."""
        return documents.identified_by(self.client.client_id)

    @property
    def loopback_only(self) -> bool:
        """Every redirect URI the client declared is on this machine (any local program could
        receive the answer: the consent page warns)."""
        return all(_loopback(uri) for uri in self.client.redirect_uris)

    @property
    def redirect_host(self) -> str:
        """Where the answer goes, as the consent page shows it (the host a browser goes to)."""
        return self.url.netloc

    @property
    def redirect_origin(self) -> str:
        """The redirect URI's origin (the consent form may send the browser there)."""
        return self.url.origin

    def answer(self, **params: str) -> str:
        """The redirect URI carrying `params`, the state and the issuer."""
        extra = {**params, **({"state": self.state} if self.state is not None else {}), "iss": issuer()}
        separator = "" if self.url.text.endswith("?") else "&" if self.url.query else "?"
        return f"{self.url.text}{separator}{urlencode(extra)}"

    def refuse(self, error: str, description: str) -> NoReturn:
        """Refuse the request: at the redirect URI when it is a registered one exactly (RFC 9700
        4.11: no open redirect), else to the person."""
        if self.exact:
            raise Redirected(self.answer(error=error, error_description=description))
        raise UnsafeRequest(f"{self.client.client_name} sent a request Workset cannot answer ({description}). "
                            "Nothing was sent to the application.")


def check_request(params: dict[str, str], now: datetime) -> Pending:
    """The authorization request in `params` (the query of `/console/oauth/authorize`), checked.

    Raises UnsafeRequest for an unknown client or a redirect URI it did not register (the person
    is told; nothing goes to the URI), and Redirected for every other fault (the client is told,
    at a redirect URI it registered exactly; at any other, the person is told instead).
    """
    client = _client(params.get("client_id", ""), now)
    if client is None:
        raise UnsafeRequest("This application is not registered with Workset (or its registration expired). "
                            "Connect it again from the application.")
    asked = params.get("redirect_uri") or (client.redirect_uris[0] if len(client.redirect_uris) == 1 else "")
    match = _registered(client, asked)
    if match is None:
        raise UnsafeRequest(f"{client.client_name} asked to send the answer to an address it did not register. "
                            "Nothing was sent there.")
    state = params.get("state")
    pending = Pending(client, *match, params.get("code_challenge", ""), granted_scope(params.get("scope")),
                      params.get("resource") or settings().mcp_url, state if state and _STATE.fullmatch(state) else None)
    if state and pending.state is None:
        pending.refuse("invalid_request", "state is not printable ASCII")
    faults = _faults(params, pending)
    if faults:
        pending.refuse(*faults[0])
    return pending


def _client(client_id: str, now: datetime) -> OAuthClient | None:
    """The client a request names: a registered one, or the one a metadata document describes
    (UnsafeRequest when that document cannot be used: the person is told why)."""
    if not documents.is_document_id(client_id):
        return oauth_store.get_client(client_id, now)
    try:
        return documents.resolve(client_id, now)
    except documents.DocumentRefused as refused:
        raise UnsafeRequest(f"This application identifies itself by a web address, but {refused}. "
                            "Nothing was sent to the application.") from None


def _faults(params: dict[str, str], pending: Pending) -> list[tuple[str, str]]:
    faults = []
    if params.get("response_type") != "code":
        faults.append(("unsupported_response_type", "response_type must be code"))
    if params.get("code_challenge_method") != "S256" or not PKCE.fullmatch(pending.code_challenge):
        faults.append(("invalid_request", "PKCE is required: code_challenge with code_challenge_method S256"))
    if not pending.scope:
        faults.append(("invalid_scope", f"the scope this server grants is {SCOPE!r}"))
    if pending.resource != settings().mcp_url:
        faults.append(("invalid_target", f"the resource this server grants is {settings().mcp_url}"))
    return faults


def granted_scope(requested: str | None) -> str:
    """The scope granted: `mcp`, whatever subset of the accepted scopes was asked; "" for any other."""
    asked = set((requested or SCOPE).split())
    return SCOPE if asked and asked <= ACCEPTED_SCOPES else ""


def _registered(client: OAuthClient, asked: str) -> tuple[urls.URL, bool] | None:
    """The asked redirect URI, read, and whether it is a registered one exactly; a loopback one
    matches a registered loopback one on any port (RFC 8252 7.3), comparing what both read as,
    never raw text. None when it matches none (or is not one a browser and Workset read alike)."""
    try:
        url = redirect_uri(asked)
    except ValueError:
        return None
    if asked in client.redirect_uris:
        return url, True
    if documents.is_document_id(client.client_id):  # a metadata document's redirect URIs: exactly
        return None
    for known in client.redirect_uris:
        try:
            registered = redirect_uri(known)
        except ValueError:  # registered before today's checks: it matches nothing
            continue
        if url.scheme == "http" and url.is_loopback and _without_port(url) == _without_port(registered):
            return url, False
    return None


def _loopback(uri: str) -> bool:
    try:
        return redirect_uri(uri).is_loopback
    except ValueError:
        return False


def _without_port(url: urls.URL) -> tuple[str, str, str, str]:
    return url.scheme, url.host, url.path, url.query


def consent(pending: Pending, account_id: str, agent_id: str, *, actor: str, now: datetime) -> str:
    """The person's approval, for one of their account's agents: answer the redirect carrying a
    new code."""
    state = accounts.get_state(account_id, agent_id)
    if state.agent.revoked:
        raise UnsafeRequest(f"Agent {state.agent.name} is revoked; choose another agent or create one.")
    code = f"{CODE_PREFIX}{secrets.token_urlsafe(32)}"
    oauth_store.put_code(hash_token(code), AuthorizationCode(
        client_id=pending.client.client_id, redirect_uri=pending.redirect_uri, code_challenge=pending.code_challenge,
        resource=pending.resource, scope=pending.scope, account_id=account_id, agent_id=agent_id,
        grant_id=secrets.token_hex(8), consented_by=actor, expires_at=now + CODE_LIFETIME), forget_at=now + CODE_KEPT)
    if pending.identified_by is None:  # a metadata-document client is stored nowhere
        oauth_store.keep_client(pending.client.client_id)
    return pending.answer(code=code)


def refusal(pending: Pending) -> str:
    """The redirect that tells the client the person said no."""
    return pending.answer(error="access_denied", error_description="the person declined")
