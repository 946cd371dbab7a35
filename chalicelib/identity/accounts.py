"""Accounts, admin tokens, agents and their keys: who is calling, and with what settings.

Only a SHA-256 of each token is stored. An admin token is looked up by its hash; an agent key
carries its agent's id (`wsk_<agent>_<secret>`), so authenticating an MCP request is the same
single Query that reads the agent's working set.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from chalicelib.base import jsontext, log
from chalicelib.base.clock import utcnow
from chalicelib.base.config import settings
from chalicelib.base.errors import Conflict, InvalidInput, NotFound, Unauthorized, WorksetError
from chalicelib.base.validation import parse
from chalicelib.net import hosts, notify, outbound, urls
from chalicelib.store import accounts as account_store
from chalicelib.store import agents as agent_store
from chalicelib.store import connections as connection_store
from chalicelib.store import sessions as session_store
from chalicelib.store.base import ConditionFailed
from chalicelib.store.records import Account, Agent, AgentState, Page

CAP_RANGE = (1, 500)
IDLE_WINDOW_RANGE = (1, 3650)
DEFAULT_CAP = 20
DEFAULT_IDLE_WINDOW_DAYS = 21
ADMIN_TOKEN_PREFIX = "wsa_"
MIN_TOKEN_LENGTH = 16
AGENT_KEY_PREFIX = "wsk_"
ACCESS_TOKEN_PREFIX = "wst_"  # an OAuth access token: `wst_<agent>_<secret>`, checked against the agent's grants
AGENT_ID_PREFIX = "ag"
ADMIN = "admin"  # the actor of what an admin token or the console does
MAX_ALLOWED_HOSTS = 50


def _webhook_url(value: str) -> str:
    """A webhook URL as every URL is read (`urls.parse`); where it resolves is checked apart."""
    urls.parse(value)
    return value


class AgentSettings(BaseModel):
    """The settings a person may change; every field optional so PATCH can send any subset
    (`webhook_url: null` removes the webhook)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    name: str | None = Field(default=None, min_length=1, max_length=100)
    cap: int | None = Field(default=None, ge=CAP_RANGE[0], le=CAP_RANGE[1], strict=True)
    idle_window_days: int | None = Field(
        default=None, ge=IDLE_WINDOW_RANGE[0], le=IDLE_WINDOW_RANGE[1], strict=True
    )
    webhook_url: Annotated[str, AfterValidator(_webhook_url)] | None = Field(default=None, max_length=2000)
    # "all" (every connection of the account, the default) or the ids of the connections allowed
    connections: Literal["all"] | list[Annotated[str, Field(pattern=r"^cn[0-9a-f]{1,32}$")]] | None = Field(
        default=None, max_length=100)


class NewAgent(AgentSettings):
    """Creating an agent: a name is required."""

    name: str = Field(min_length=1, max_length=100)


S = TypeVar("S", bound=AgentSettings)


def hash_token(token: str) -> str:
    """The stored form of a token (tokens are long and random, so a plain SHA-256 suffices)."""
    return hashlib.sha256(token.encode()).hexdigest()


def s256(verifier: str) -> str:
    """A PKCE verifier's S256 challenge (RFC 7636 4.2): base64url of its SHA-256, unpadded. Workset
    checks its clients' verifiers with it, and makes its own challenges to vendors with it."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")


def create_account(name: str, now: datetime, *, token: str | None = None) -> tuple[Account, str]:
    """A new account and its first admin token (generated unless given; shown only here)."""
    account_id = f"ac{secrets.token_hex(8)}"
    token = token or f"{ADMIN_TOKEN_PREFIX}{secrets.token_urlsafe(32)}"
    if len(token) < MIN_TOKEN_LENGTH:
        raise InvalidInput(f"an admin token needs at least {MIN_TOKEN_LENGTH} characters", field="token")
    return account_store.create_account(account_id, name, hash_token(token), now), token


def account_of_admin_token(token: str) -> str | None:
    """The account an existing admin token belongs to (the local stack reuses its account)."""
    return account_store.account_of_token(hash_token(token))


def bearer(authorization: str | None) -> str | None:
    """The token an `Authorization: Bearer <token>` header carries; None for no header, another
    scheme, or a token that is not text."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token and jsontext.text_fault(token) is None else None


def admin_actor(token: str) -> str:
    """Who a person acting with an admin token is, where it is recorded for people to read (who
    decided an approval): `admin:` and the first 12 hex digits of the token's hash. It tells an
    account's tokens apart without holding anything that could be used as one."""
    return f"{ADMIN}:{hash_token(token)[:12]}"


def authenticate_admin(token: str | None) -> str:
    """The id of the account an admin token belongs to; anything else is Unauthorized."""
    account_id = account_store.account_of_token(hash_token(token)) if token else None
    if account_id is None:
        raise Unauthorized("a valid admin bearer token is required")
    log.note(account_id=account_id)  # who the request's log line is for
    return account_id


def authenticate_agent(key: str | None) -> AgentState:
    """The calling agent's whole state (one Query): an agent key, or an OAuth access token of one of
    its grants (unexpired, unrevoked, issued for this MCP endpoint). A missing or wrong key, or
    any key of a revoked agent, is Unauthorized."""
    agent_id = _owner(key, AGENT_KEY_PREFIX) or _owner(key, ACCESS_TOKEN_PREFIX)
    state = agent_store.load_state(agent_id) if agent_id else None
    if state is None or state.agent.revoked or not (_matches(key, state.key_hashes) or _granted(key, state)):
        raise Unauthorized("a valid agent key or access token is required")
    log.note(account_id=state.agent.account_id, agent_id=state.agent.agent_id)  # who the request's log line is for
    return state


@dataclass(frozen=True)
class Created:
    """A new agent with the secrets shown only once: its API key and its webhook signing secret."""

    agent: Agent
    api_key: str
    webhook_secret: str | None = None


def create_agent(account_id: str, payload: Any, now: datetime) -> Created:
    """A new agent with the given settings (defaults filled), its API key and, with a webhook,
    the webhook's signing secret (both shown only here)."""
    request = _settings(NewAgent, payload)
    agent_id = f"{AGENT_ID_PREFIX}{secrets.token_hex(8)}"
    agent = Agent(
        agent_id=agent_id,
        account_id=account_id,
        name=request.name,
        cap=request.cap or DEFAULT_CAP,
        idle_window_days=request.idle_window_days or DEFAULT_IDLE_WINDOW_DAYS,
        created_at=now,
        webhook_url=request.webhook_url,
    )
    key = _new_token(AGENT_KEY_PREFIX, agent_id)
    secret = notify.new_secret() if request.webhook_url else None
    sealed = notify.seal_secret(secret, account_id=account_id, agent_id=agent_id) if secret else None
    agent_store.create_agent(agent, hash_token(key), webhook_secret=sealed)
    return Created(agent, key, secret)


def get_state(account_id: str, agent_id: str) -> AgentState:
    """An agent of this account; another account's agent is not found."""
    state = agent_store.load_state(agent_id)
    if state is None or state.agent.account_id != account_id:
        raise NotFound(f"no agent {agent_id}")
    return state


def list_agents(account_id: str, *, limit: int, cursor: str | None, archived: bool = False) -> Page:
    """The account's agents, oldest first: those not archived, or (`archived`) only those archived.
    A page may hold fewer than `limit` agents and still have a next one."""
    return agent_store.list_agents(account_id, limit=limit, cursor=cursor, archived=archived)


def rotate_key(account_id: str, agent_id: str) -> Created:
    """A new API key for the agent (shown only here); every key it had stops at once."""
    state = get_state(account_id, agent_id)
    if state.agent.revoked:
        raise Conflict(f"agent {agent_id} is revoked; a revoked agent gets no new key")
    key = _new_token(AGENT_KEY_PREFIX, agent_id)
    if not agent_store.replace_key(agent_id, hash_token(key)):
        raise Conflict(f"agent {agent_id} was revoked meanwhile; no key was made")
    return Created(state.agent, key)


def revoke_agent(account_id: str, agent_id: str, now: datetime) -> Agent:
    """Stop the agent for good: every key and OAuth grant of it stops at once; its working set,
    history and runs stay readable."""
    get_state(account_id, agent_id)
    agent_store.revoke_agent(agent_id, now)
    return get_state(account_id, agent_id).agent


def archive_agent(account_id: str, agent_id: str, now: datetime) -> Agent:
    """Take a revoked agent out of the agents list (it stays readable by its id)."""
    get_state(account_id, agent_id)
    if not agent_store.archive_agent(agent_id, now):
        raise Conflict(f"agent {agent_id} is not revoked; revoke it before archiving it")
    return get_state(account_id, agent_id).agent


def update_agent(account_id: str, agent_id: str, payload: Any) -> Created:
    """Change name, cap, idle window or webhook; the sweep applies new limits on its next run.
    The first webhook an agent gets comes with a new signing secret (shown only here)."""
    request = _settings(AgentSettings, payload)
    changes = request.model_dump(exclude_none=True, exclude={"connections"})
    state = get_state(account_id, agent_id)
    if request.connections is not None:
        changes["connection_scope"] = _connection_scope(account_id, request.connections)
    secret = None
    if "webhook_url" in request.model_fields_set and request.webhook_url is None:
        changes.update(webhook_url=None, webhook_secret=None)
    elif request.webhook_url and not state.webhook_secret:
        secret = notify.new_secret()
        changes["webhook_secret"] = notify.seal_secret(secret, account_id=account_id, agent_id=agent_id)
    if not changes:
        return Created(state.agent, "", None)
    try:
        return Created(agent_store.update_settings(agent_id, changes), "", secret)
    except ConditionFailed as error:
        raise NotFound(f"no agent {agent_id}") from error


def is_agent(actor: str) -> bool:
    """True when `actor` (who published a version, who decided) is an agent, not a person."""
    return actor.startswith(AGENT_ID_PREFIX)


class AllowedHosts(BaseModel):
    """`{allowed_hosts: [...]}`: keyless hosts (`host` or `host:port`) agent-authored tools may call."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    allowed_hosts: list[Annotated[str, AfterValidator(hosts.checked_entry)]] = Field(max_length=MAX_ALLOWED_HOSTS)


def allowed_hosts(account_id: str) -> tuple[str, ...]:
    """The keyless hosts a person lets the account's agents author tools for (https only, or http
    where the deployment allows private networks)."""
    return account_store.get_allowed_hosts(account_id)


def set_allowed_hosts(account_id: str, payload: Any) -> tuple[str, ...]:
    """Replace the allow list; answer it as saved."""
    request = parse(AllowedHosts, payload)
    entries = list(dict.fromkeys(request.allowed_hosts))
    account_store.set_allowed_hosts(account_id, entries)
    return tuple(entries)


def end_console_sessions(account_id: str) -> None:
    """End every console session of the account (every browser signs in again)."""
    session_store.end_all_sessions(account_id)


def _settings(model: type[S], payload: Any) -> S:
    """Agent settings read from `payload`; a webhook URL must be one Workset may call (checked
    here, apart from the model: it resolves the host, within the time a delivery has)."""
    request = parse(model, payload)
    if request.webhook_url is not None:
        config = settings()
        try:
            outbound.check_destination(request.webhook_url, allow_private=config.allow_private_network,
                                       timeout=config.webhook_timeout_seconds)
        except WorksetError as error:
            raise InvalidInput(f"webhook_url: {error.message}", field="webhook_url") from None
    return request


def _connection_scope(account_id: str, scope: str | list[str]) -> list[str] | None:
    """The stored scope: None for all connections, else the listed ids, each of this account."""
    if scope == "all":
        return None
    for connection_id in scope:
        if connection_store.get(account_id, connection_id) is None:
            raise InvalidInput(f"connections: no connection {connection_id} in this account", field="connections")
    return list(dict.fromkeys(scope))


def _new_token(prefix: str, owner_id: str) -> str:
    return f"{prefix}{owner_id}_{secrets.token_urlsafe(32)}"


def _owner(token: str | None, prefix: str) -> str | None:
    if not token or not token.startswith(prefix):
        return None
    owner, separator, secret = token[len(prefix):].partition("_")
    return owner if separator and secret and owner.isalnum() else None


def _granted(token: str | None, state: AgentState) -> bool:
    """True when `token` is the current access token of one of the agent's live grants."""
    now = utcnow()
    return any(grant.active and grant.access_hash and grant.access_expires_at and grant.access_expires_at > now
               and grant.resource == settings().mcp_url and _matches(token, (grant.access_hash,))
               for grant in state.grants)


def _matches(token: str | None, hashes: tuple[str, ...]) -> bool:
    digest = hash_token(token or "")
    return any(hmac.compare_digest(digest, known) for known in hashes)
