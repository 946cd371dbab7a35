"""Connections: a vendor's credentials, typed once, stored encrypted, injected into runs, never
shown again (not in answers, previews, logs or history)."""

from __future__ import annotations

import re
import secrets
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from chalicelib.errors import InvalidInput, NotFound, WorksetError
from chalicelib.store import connections as connection_store
from chalicelib.store import vault
from chalicelib.store.records import Connection, Page
from chalicelib.validation import parse

FORBIDDEN_HEADERS = frozenset({"host", "content-length", "content-type", "transfer-encoding", "connection"})
HOST_PATTERN = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$"


class ConnectionRevoked(WorksetError):
    """The tool's connection was revoked; the call cannot carry its credentials."""

    code = "connection_revoked"
    status = 409


class BearerAuth(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["bearer"]
    token: SecretStr = Field(min_length=1, max_length=4096)


class HeaderAuth(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["header"]
    name: str = Field(pattern=r"^[A-Za-z0-9-]{1,64}$")
    value: SecretStr = Field(min_length=1, max_length=4096)

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value.lower() in FORBIDDEN_HEADERS:
            raise ValueError(f"{value} is set by Workset and cannot carry a credential")
        return value


class NewConnection(BaseModel):
    """`{vendor, auth, hosts?}`: `hosts` limits where the credential may ever be sent."""

    model_config = ConfigDict(extra="forbid")
    vendor: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,30}$")
    auth: Annotated[BearerAuth | HeaderAuth, Field(discriminator="type")]
    hosts: list[Annotated[str, Field(pattern=HOST_PATTERN, max_length=253)]] = Field(default_factory=list,
                                                                                      max_length=20)


def create(account_id: str, payload: Any, now: datetime) -> Connection:
    """Store a new connection; the secret is encrypted before it is written."""
    request = parse(NewConnection, payload)
    connection_id = f"cn{secrets.token_hex(8)}"
    if isinstance(request.auth, BearerAuth):
        header, secret = "Authorization", request.auth.token.get_secret_value()
    else:
        header, secret = request.auth.name, request.auth.value.get_secret_value()
    connection = Connection(
        connection_id=connection_id, account_id=account_id, vendor=request.vendor, auth_type=request.auth.type,
        header_name=header, hosts=tuple(request.hosts), status=connection_store.ACTIVE, created_at=now,
        ciphertext=vault.encrypt(secret, account_id=account_id, connection_id=connection_id),
    )
    connection_store.put(connection)
    return connection


def get(account_id: str, connection_id: str) -> Connection:
    """A connection of this account; another account's is not found."""
    found = connection_store.get(account_id, connection_id)
    if found is None:
        raise NotFound(f"no connection {connection_id}")
    return found


def list_all(account_id: str, *, limit: int, cursor: str | None) -> Page:
    """The account's connections (never their secrets)."""
    return connection_store.list_all(account_id, limit=limit, cursor=cursor)


def revoke(account_id: str, connection_id: str, now: datetime) -> Connection:
    """Revoke a connection; later runs of tools using it fail with connection_revoked."""
    get(account_id, connection_id)
    connection_store.revoke(account_id, connection_id, now)
    return get(account_id, connection_id)


def check_usable(account_id: str, connection_id: str, vendor: str, url: str, *, field: str,
                 require_hosts: bool = False) -> None:
    """A tool may name a connection of its own account and vendor whose hosts admit its URL."""
    connection = connection_store.get(account_id, connection_id)
    if connection is None:
        raise InvalidInput(f"{field}: no connection {connection_id} in this account", field=field)
    if connection.vendor != vendor:
        raise InvalidInput(f"{field}: connection {connection_id} is for vendor {connection.vendor}", field=field)
    if connection.status != connection_store.ACTIVE:
        raise InvalidInput(f"{field}: connection {connection_id} is revoked", field=field)
    if require_hosts and not connection.hosts:
        raise InvalidInput(f"{field}: connection {connection_id} is not limited to hosts, so only an admin "
                           "may attach it to a tool", field=field)
    if connection.hosts and (urlsplit(url).hostname or "") not in connection.hosts:
        raise InvalidInput(f"{field}: connection {connection_id} may only be sent to {', '.join(connection.hosts)}",
                           field=field)


def credential(account_id: str, connection_id: str, url: str) -> tuple[str, str]:
    """The header that carries a connection's secret into a request to `url`.

    Raises ConnectionRevoked for a revoked (or vanished) connection, and refuses a host the
    connection does not admit.
    """
    connection = connection_store.get(account_id, connection_id)
    if connection is None or connection.status != connection_store.ACTIVE:
        raise ConnectionRevoked(f"connection {connection_id} was revoked; the tool cannot run with it")
    host = urlsplit(url).hostname or ""
    if connection.hosts and host not in connection.hosts:
        raise InvalidInput(f"connection {connection_id} may not be sent to {host}")
    secret = vault.decrypt(connection.ciphertext, account_id=account_id, connection_id=connection_id)
    value = f"Bearer {secret}" if connection.auth_type == "bearer" else secret
    if re.search(r"[\r\n]", value):
        raise InvalidInput(f"connection {connection_id} holds a value that cannot be sent as a header")
    return connection.header_name, value
