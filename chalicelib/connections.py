"""Connections: a vendor's credentials, typed once, stored encrypted, injected into runs, never
shown again (not in answers, previews, logs or history)."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, field_validator

from chalicelib import hosts as allowed_hosts
from chalicelib import outbound
from chalicelib.config import settings
from chalicelib.errors import CredentialUnavailable, InvalidInput, NotFound, WorksetError
from chalicelib.store import connections as connection_store
from chalicelib.store import vault
from chalicelib.store.records import Connection, Page
from chalicelib.validation import parse


class ConnectionRevoked(WorksetError):
    """The tool's connection was revoked; the call cannot carry its credentials."""

    code = "connection_revoked"
    status = 409


class BearerAuth(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    type: Literal["bearer"]
    token: SecretStr = Field(min_length=1, max_length=4096)


class HeaderAuth(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    type: Literal["header"]
    name: str = Field(pattern=r"^[A-Za-z0-9-]{1,64}$")
    value: SecretStr = Field(min_length=1, max_length=4096)

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if outbound.is_client_header(value) or value.lower() == "content-type":  # calls send JSON bodies
            raise ValueError(f"{value} is set by Workset and cannot carry a credential")
        return value


class NewConnection(BaseModel):
    """`{vendor, auth, hosts?}`: `hosts` (`host` or `host:port`) limits where the credential may
    ever be sent: that host and port, over https (http only where private networks are allowed)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    vendor: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,30}$")
    auth: Annotated[BearerAuth | HeaderAuth, Field(discriminator="type")]
    hosts: list[Annotated[str, AfterValidator(allowed_hosts.checked_entry)]] = Field(default_factory=list,
                                                                                     max_length=20)


@dataclass(frozen=True)
class Credential:
    """What a run carries: the header and its value; `secrets` are what answers must never show
    (the header value and the bare secret inside it)."""

    header: str
    value: str = field(repr=False)
    secrets: tuple[str, ...] = field(default=(), repr=False)


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
                 require_hosts: bool = False, headers: Iterable[str] = ()) -> None:
    """A tool may name a connection of its own account and vendor whose hosts admit its URL, and
    may not set the header the connection injects."""
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
    if not _admits(connection, url):
        raise InvalidInput(f"{field}: connection {connection_id} may only be sent to "
                           f"{allowed_hosts.describe(connection.hosts, allow_http=_allow_http())}", field=field)
    if connection.header_name.lower() in {header.lower() for header in headers}:
        raise InvalidInput(f"request.headers: {connection.header_name} is the header connection {connection_id} "
                           "injects; a tool may not set it", field="request.headers")


def credential(account_id: str, connection_id: str, url: str) -> Credential:
    """The header that carries a connection's secret into a request to `url`.

    Raises ConnectionRevoked for a revoked (or vanished) connection, and refuses a host the
    connection does not admit.
    """
    connection = connection_store.get(account_id, connection_id)
    if connection is None or connection.status != connection_store.ACTIVE:
        raise ConnectionRevoked(f"connection {connection_id} was revoked; the tool cannot run with it")
    if not _admits(connection, url):
        raise InvalidInput(f"connection {connection_id} may not be sent to {urlsplit(url).netloc}")
    try:
        secret = vault.decrypt(connection.ciphertext, account_id=account_id, connection_id=connection_id)
    except (BotoCoreError, ClientError) as error:
        reason = error.response["Error"].get("Code", "error") if isinstance(error, ClientError) else "unreachable"
        raise CredentialUnavailable(f"the secret of connection {connection_id} could not be decrypted now "
                                    f"(KMS: {reason}); the vendor was not called") from error
    value = f"Bearer {secret}" if connection.auth_type == "bearer" else secret
    if not re.fullmatch(r"[\x20-\x7e]+", value):
        raise InvalidInput(f"connection {connection_id} holds a value that cannot be sent as a header")
    return Credential(connection.header_name, value, secrets=tuple(dict.fromkeys((value, secret))))


def _admits(connection: Connection, url: str) -> bool:
    """A connection without hosts (only an admin may attach one) goes wherever its tools go."""
    return not connection.hosts or allowed_hosts.admits(connection.hosts, url, allow_http=_allow_http())


def _allow_http() -> bool:
    return settings().allow_private_network
