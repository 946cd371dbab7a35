"""Connections: a vendor's credentials, typed once, stored encrypted, injected into runs, never
shown again (not in answers, previews, logs or history). Here: creating one, a new secret in
place, revoking, what a tool may name, and reading one that a call may use. The kinds are
`connection_auth`; what a call carries (and OAuth tokens, and the console's Connect) is
`credentials`.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import urlsplit

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from chalicelib.access.connection_auth import (
    AUTHORIZATION_CODE,
    AnyAuth,
    stored,
)
from chalicelib.base.causes import Cause
from chalicelib.base.config import settings
from chalicelib.base.errors import (
    ConnectionNeedsReconnect,
    CredentialUnavailable,
    InvalidInput,
    NotFound,
    WorksetError,
)
from chalicelib.base.validation import VENDOR_PATTERN, parse
from chalicelib.net import hosts as allowed_hosts
from chalicelib.store import agents as agent_store
from chalicelib.store import connections as connection_store
from chalicelib.store import sweep as sweep_store
from chalicelib.store import tools as tool_store
from chalicelib.store import vault
from chalicelib.store.records import ACTIVE, NOT_CONNECTED, REVOKED, Connection, Page, ToolVersion


class ConnectionRevoked(WorksetError):
    """The tool's connection was revoked; the call cannot carry its credentials."""

    code = "connection_revoked"
    status = 409


class NewConnection(BaseModel):
    """`{vendor, auth, hosts?}`: `hosts` (`host` or `host:port`) limits where the credential may
    ever be sent: that host and port, over https (http only where private networks are allowed);
    an OAuth token_url must be one of them too."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    vendor: str = Field(pattern=VENDOR_PATTERN)
    auth: AnyAuth
    hosts: list[Annotated[str, AfterValidator(allowed_hosts.checked_entry)]] = Field(default_factory=list,
                                                                                     max_length=20)


class NewAuth(BaseModel):
    """`{auth}`: a new secret for a connection, of the kind it has."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    auth: AnyAuth


def create(account_id: str, payload: Any, now: datetime) -> Connection:
    """Store a new connection; the secret is encrypted before it is written. An
    authorization-code connection is `not_connected` until a person connects it in the console."""
    request = parse(NewConnection, payload)
    _check_token_url(request.auth, request.hosts)
    kept = stored(request.auth)
    connection_id = f"cn{secrets.token_hex(8)}"
    connection = Connection(
        connection_id=connection_id, account_id=account_id, vendor=request.vendor, auth_type=request.auth.type,
        header_name=kept.header, query_name=kept.query, oauth=kept.oauth, hosts=tuple(request.hosts),
        status=NOT_CONNECTED if request.auth.type == AUTHORIZATION_CODE else ACTIVE,
        created_at=now, ciphertext=vault.encrypt(kept.secret, account_id=account_id, connection_id=connection_id),
    )
    connection_store.put(connection)
    return connection


def replace_auth(account_id: str, connection_id: str, payload: Any, now: datetime) -> Connection:
    """Give a connection a new secret of the same kind, in place (a revoked or broken one too): it
    is active again (an authorization-code one once a person connects it), keeps its id, so
    tools and approvals that name it stand, and no tool is promoted again by it."""
    connection = get(account_id, connection_id)
    request = parse(NewAuth, payload)
    if request.auth.type != connection.auth_type:
        raise InvalidInput(f"auth.type: connection {connection_id} holds a {connection.auth_type} credential; "
                           "add a new connection for another kind", field="auth.type")
    kept = stored(request.auth)
    if (kept.header, kept.query) != (connection.header_name, connection.query_name):
        raise InvalidInput(f"auth.name: connection {connection_id} sends its credential as "
                           f"{connection.header_name or connection.query_name}; add a new connection for another name",
                           field="auth.name")
    _check_token_url(request.auth, list(connection.hosts))
    status = NOT_CONNECTED if connection.auth_type == AUTHORIZATION_CODE else ACTIVE
    ciphertext = vault.encrypt(kept.secret, account_id=account_id, connection_id=connection_id)
    if not connection_store.replace_secret(account_id, connection_id, auth_type=connection.auth_type,
                                           ciphertext=ciphertext, oauth=kept.oauth, status=status, now=now):
        raise NotFound(f"no connection {connection_id}")
    return get(account_id, connection_id)


def get(account_id: str, connection_id: str) -> Connection:
    """A connection of this account; another account's is not found."""
    found = connection_store.get(account_id, connection_id)
    if found is None:
        raise NotFound(f"no connection {connection_id}")
    return found


def list_all(account_id: str, *, limit: int, cursor: str | None) -> Page:
    """The account's connections (never their secrets)."""
    return connection_store.list_all(account_id, limit=limit, cursor=cursor)


def recent_calls(account_id: str, connection_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """The calls of tools through this connection, newest first (tool, agent, outcome, when)."""
    get(account_id, connection_id)
    return connection_store.recent_calls(account_id, connection_id, limit=limit, cursor=cursor)


@dataclass(frozen=True)
class Revocation:
    """A revoked connection and the agents whose promotions of its tools are now due."""

    connection: Connection
    agents: list[str]


def revoke(account_id: str, connection_id: str, now: datetime) -> Revocation:
    """Revoke a connection: later runs of tools using it fail with connection_revoked, and every
    agent's promotions of those tools are due at once with that cause, pinned or not. The sweep
    demotes them; `sweep.review_all(revocation.agents)` does it now (an agent with a run in flight
    keeps them until a later sweep). Revoking again marks anything a fault left unmarked."""
    get(account_id, connection_id)
    connection_store.revoke(account_id, connection_id, now)
    flagged = {agent_id for tool, agent_ids in users(account_id, connection_id) for agent_id in agent_ids
               if sweep_store.make_due(agent_id, tool.vendor, tool.name, now, Cause.CONNECTION_REVOKED.value)}
    return Revocation(get(account_id, connection_id), sorted(flagged))


def users(account_id: str, connection_id: str) -> list[tuple[ToolVersion, list[str]]]:
    """The tools whose newest version names this connection, each with the agents that have it
    promoted (what revoking it would demote)."""
    return [(tool, agent_store.agents_with_tool(account_id, tool.vendor, tool.name))
            for tool in tool_store.iter_heads(account_id) if tool.definition.get("connection") == connection_id]


def console_page(connection_id: str) -> str:
    """Where a person reconnects a connection."""
    return f"{settings().public_url}/console/connections/{connection_id}"


def check_usable(account_id: str, connection_id: str, vendor: str, url: str, *, field: str,
                 require_hosts: bool = False, headers: Iterable[str] = (), query: Iterable[str] = ()) -> None:
    """A tool may name a connection of its own account and vendor whose hosts admit its URL, and
    may set neither the header nor the query parameter the connection injects."""
    connection = connection_store.get(account_id, connection_id)
    if connection is None:
        raise InvalidInput(f"{field}: no connection {connection_id} in this account", field=field)
    if connection.vendor != vendor:
        raise InvalidInput(f"{field}: connection {connection_id} is for vendor {connection.vendor}", field=field)
    if connection.status == REVOKED:
        raise InvalidInput(f"{field}: connection {connection_id} is revoked", field=field)
    if require_hosts and not connection.hosts:
        raise InvalidInput(f"{field}: connection {connection_id} is not limited to hosts, so only an admin "
                           "may attach it to a tool", field=field)
    if not _admits(connection, url):
        raise InvalidInput(f"{field}: connection {connection_id} may only be sent to "
                           f"{allowed_hosts.describe(connection.hosts, allow_http=_allow_http())}", field=field)
    if connection.header_name and connection.header_name.lower() in {header.lower() for header in headers}:
        raise InvalidInput(f"request.headers: {connection.header_name} is the header connection {connection_id} "
                           "injects; a tool may not set it", field="request.headers")
    if connection.query_name and connection.query_name in set(query):
        raise InvalidInput(f"request: {connection.query_name} is the query parameter connection {connection_id} "
                           "injects; a tool may not set it (nor take an input field of that name into the query)",
                           field="request")


def usable(account_id: str, connection_id: str, url: str | None, *, consistent: bool = False) -> Connection:
    """The connection, if a call may use it now (and send it to `url`): ConnectionRevoked for a
    revoked or vanished one, ConnectionNeedsReconnect for one a person must (re)connect."""
    connection = connection_store.get(account_id, connection_id, consistent=consistent)
    if connection is None or connection.status == REVOKED:
        raise ConnectionRevoked(f"connection {connection_id} was revoked; the tool cannot run with it")
    if connection.status == NOT_CONNECTED:
        raise needs_reconnect(connection_id, "no person has connected it yet")
    if connection.status != ACTIVE:
        raise needs_reconnect(connection_id, connection.status_reason or "the vendor no longer takes its credential")
    if url is not None and not _admits(connection, url):
        raise InvalidInput(f"connection {connection_id} may not be sent to {urlsplit(url).netloc}")
    return connection


def check_not_revoked(account_id: str, connection_id: str) -> None:
    """Refuse (ConnectionRevoked) a connection a person revoked: a tool that uses it is neither
    promoted nor pinned, so the revocation's demotion is not undone by the next promote. One that
    needs reconnecting passes (a person mends it where it is), and so does a revoked one once a
    person gives it a new secret."""
    connection = connection_store.get(account_id, connection_id)
    if connection is None or connection.status == REVOKED:
        raise ConnectionRevoked(f"connection {connection_id} was revoked, so a tool that uses it is not promoted "
                                "or pinned until a person gives the connection a new secret")


def needs_reconnect(connection_id: str, reason: str) -> ConnectionNeedsReconnect:
    """The error of a connection a person must reconnect, naming where."""
    return ConnectionNeedsReconnect(f"connection {connection_id} needs a person to reconnect it ({reason}); "
                                    f"reconnect it at {console_page(connection_id)}")


def secret(connection: Connection) -> str:
    """The connection's secret, decrypted."""
    return decrypt(connection, connection.ciphertext)


def decrypt(connection: Connection, ciphertext: bytes, *, purpose: str = "") -> str:
    """One of the connection's ciphertexts, decrypted; KMS failing is CredentialUnavailable."""
    try:
        return vault.decrypt(ciphertext, account_id=connection.account_id, connection_id=connection.connection_id,
                             purpose=purpose)
    except (BotoCoreError, ClientError) as error:
        reason = error.response["Error"].get("Code", "error") if isinstance(error, ClientError) else "unreachable"
        raise CredentialUnavailable(f"the secret of connection {connection.connection_id} could not be decrypted "
                                    f"now (KMS: {reason}); the vendor was not called") from error


def _check_token_url(auth: Any, hosts: list[str]) -> None:
    """An OAuth token_url goes where the connection's credential may go: one of its hosts, if it
    has hosts."""
    token_url = getattr(auth, "token_url", None)
    if token_url and hosts and not allowed_hosts.admits(hosts, token_url, allow_http=_allow_http()):
        raise InvalidInput(f"auth.token_url: the token endpoint must be one of the connection's hosts "
                           f"({allowed_hosts.describe(hosts, allow_http=_allow_http())})", field="auth.token_url")


def _admits(connection: Connection, url: str) -> bool:
    """A connection without hosts (only an admin may attach one) goes wherever its tools go."""
    return not connection.hosts or allowed_hosts.admits(connection.hosts, url, allow_http=_allow_http())


def _allow_http() -> bool:
    return settings().allow_private_network
