"""What the store hands the domain: plain frozen records, no pynamodb objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from chalicelib.base.clock import SKEW_ALLOWANCE


@dataclass(frozen=True)
class Account:
    """A tenant."""

    account_id: str
    name: str
    toolbox_revision: int = 0


@dataclass(frozen=True)
class Agent:
    """An agent's settings and the size of its working set."""

    agent_id: str
    account_id: str
    name: str
    cap: int
    idle_window_days: int
    created_at: datetime
    size: int = 0
    webhook_url: str | None = None
    connection_scope: tuple[str, ...] | None = None  # None: every connection of the account
    revoked_at: datetime | None = None  # its keys and grants stopped then
    archived_at: datetime | None = None  # out of the agents list (revoked first)

    @property
    def revoked(self) -> bool:
        """True once the agent was revoked: no key or grant of it authenticates."""
        return self.revoked_at is not None


@dataclass(frozen=True)
class Grant:
    """An OAuth client's standing access to one agent, from a person's consent. The token hashes
    stay in the store's records for authentication and never reach an answer."""

    grant_id: str
    client_id: str
    client_name: str
    scope: str
    resource: str
    created_at: datetime
    consented_by: str
    access_hash: str | None = field(default=None, repr=False)
    access_expires_at: datetime | None = None
    refresh_hash: str | None = field(default=None, repr=False)
    previous_refresh_hash: str | None = field(default=None, repr=False)
    refresh_expires_at: datetime | None = None
    refreshed_at: datetime | None = None
    revoked_at: datetime | None = None

    @property
    def active(self) -> bool:
        """True until the grant is revoked."""
        return self.revoked_at is None


@dataclass(frozen=True)
class OAuthClient:
    """A registered OAuth client (RFC 7591): what the consent page shows and the token endpoint
    checks."""

    client_id: str
    client_name: str
    redirect_uris: tuple[str, ...]
    auth_method: str  # none, client_secret_post or client_secret_basic
    created_at: datetime
    secret_hash: str | None = field(default=None, repr=False)
    client_uri: str | None = None
    dynamic: bool = True  # registered by the client itself, so unverified


@dataclass(frozen=True)
class AuthorizationCode:
    """A consent waiting to be redeemed at the token endpoint."""

    client_id: str
    redirect_uri: str
    code_challenge: str
    resource: str
    scope: str
    account_id: str
    agent_id: str
    grant_id: str
    consented_by: str
    expires_at: datetime
    redeemed_at: datetime | None = None


@dataclass(frozen=True)
class Promotion:
    """A tool in an agent's working set."""

    vendor: str
    name: str
    promoted_at: datetime
    promoted_by: str
    last_used_at: datetime | None = None
    due_at: datetime | None = None
    due_cause: str | None = None
    pinned_at: datetime | None = None  # set while pinned: the rule never demotes it for idle or cap
    pinned_by: str | None = None  # who pinned it (the agent's id, or `admin`)

    @property
    def pinned(self) -> bool:
        """True while the tool is pinned."""
        return self.pinned_at is not None


ALLOW = "allow"
DENY = "deny"


@dataclass(frozen=True)
class Approval:
    """A person's standing decision (`allow` or `deny`) for one agent and one write tool, for the
    request shape of the version they decided."""

    vendor: str
    name: str
    approved_by: str
    approved_at: datetime
    decision: str = ALLOW
    version: int | None = None
    shape: dict[str, Any] | None = None


@dataclass(frozen=True)
class PolicySetting:
    """A person's approval policy for one tool, or (`name` None) the account's default for a
    vendor's tools: who set it and when."""

    vendor: str
    name: str | None
    policy: str
    set_by: str
    set_at: datetime


@dataclass(frozen=True)
class SeenSearch:
    """One find_tool answer an agent had (chalicelib/catalog/usage.py): the request, the hits it listed
    ("vendor/name"), when, the account's memory generation then, and the hits already credited."""

    query: str
    hits: tuple[str, ...]
    at: datetime
    generation: int
    credited: tuple[str, ...] = ()


@dataclass(frozen=True)
class LearnedPair:
    """A (request, tool) pair find_tool learned from: how often and when (`vector`: the
    request's MiniLM vector, empty where a listing does not read it)."""

    query: str
    vendor: str
    name: str
    count: int
    first_seen: datetime
    last_seen: datetime
    vector: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class AgentState:
    """Everything one Query of the agent's partition tells: settings, keys, set, approvals,
    and the leases of its runs in flight."""

    agent: Agent
    key_hashes: tuple[str, ...]
    promotions: tuple[Promotion, ...]  # in promotion order, oldest first
    approvals: tuple[Approval, ...] = ()
    leases: dict[str, float] = field(default_factory=dict)  # run id -> lease expiry, epoch seconds
    lease_rev: int = 0
    review_token: str | None = None  # set while the agent is flagged for the sweep
    change_seq: int = 0  # moves on with every change of the working set
    mcp_seen_seq: int = 0  # the last change an MCP response carried
    webhook_url: str | None = None
    webhook_secret: bytes | None = field(default=None, repr=False)
    grants: tuple[Grant, ...] = ()  # OAuth grants, revoked ones included, oldest first
    searches: tuple[SeenSearch, ...] = ()  # the last few find_tool answers, newest first

    def in_flight(self, now: datetime) -> bool:
        """True while any run of the agent holds a lease, judged with the clock skew allowance
        (a lease written by a Lambda whose clock runs behind this one's is still held)."""
        cutoff = (now - SKEW_ALLOWANCE).timestamp()
        return any(expiry > cutoff for expiry in self.leases.values())

    @property
    def pins(self) -> int:
        """How many of the promoted tools are pinned."""
        return sum(1 for p in self.promotions if p.pinned)

    def promotion(self, vendor: str, name: str) -> Promotion | None:
        """The promotion of (vendor, name), if it is in the working set."""
        return next((p for p in self.promotions if (p.vendor, p.name) == (vendor, name)), None)

    def decision(self, vendor: str, name: str) -> Approval | None:
        """A person's standing decision on this agent's calls of (vendor, name), if any."""
        return next((a for a in self.approvals if (a.vendor, a.name) == (vendor, name)), None)

    def may_use(self, connection_id: str) -> bool:
        """True when the agent's connection scope admits this connection."""
        scope = self.agent.connection_scope
        return scope is None or connection_id in scope


@dataclass(frozen=True)
class ToolVersion:
    """One published version of a tool; `definition` is the validated spec as JSON."""

    vendor: str
    name: str
    version: int
    definition: dict[str, Any]
    published_at: datetime
    published_by: str
    vector: bytes | None = field(default=None, repr=False)
    vector_version: str | None = None
    origin: dict[str, Any] | None = None  # where an imported tool came from
    unavailable: str | None = None  # why the newest version can no longer be called
    guard: dict[str, Any] | None = None  # the hints Workset enforces (`chalicelib.tools.guards`); None: as declared
    accepted_by: str | None = None  # the person who accepted this version's looser hints, if one did
    accepted_at: datetime | None = None


@dataclass(frozen=True)
class Upstream:
    """A registered MCP server whose tools are its vendor's tools."""

    account_id: str
    vendor: str
    url: str
    created_at: datetime
    connection_id: str | None = None
    revision: str | None = None
    synced_at: datetime | None = None
    sync: dict[str, Any] | None = None


@dataclass(frozen=True)
class HistoryEvent:
    """A promotion, a demotion, a pin or an unpin, with its cause; or a decision on a run waiting
    for a person (`approved` / `denied` by `actor`, or `expired` undecided), its cause the policy
    the run was asked under (`first_call`: a standing decision; `every_call`: this call only)."""

    vendor: str
    name: str
    action: str
    cause: str
    actor: str
    at: datetime
    run_id: str | None = None


@dataclass(frozen=True)
class Page:
    """One page of a list and the opaque cursor of the next, if any."""

    items: list[Any] = field(default_factory=list)
    next: str | None = None


@dataclass(frozen=True)
class Run:
    """One call of a tool and where it stands."""

    run_id: str
    agent_id: str
    account_id: str
    vendor: str
    name: str
    version: int
    input: dict[str, Any]
    status: str
    created_at: datetime
    updated_at: datetime
    lease_expires_at: datetime
    dry_run: bool = False
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    decided_by: str | None = None
    connection_id: str | None = None  # the connection whose credential the call carries
    approval_policy: str | None = None  # the policy a wait was asked under (None: first_call)


@dataclass(frozen=True)
class RunToSweep:
    """What the sweep's index says of a run it may have to act on."""

    run_id: str
    agent_id: str
    account_id: str
    status: str
    lease_expires_at: datetime
    unannounced: bool
    decided_by: str | None = None  # a person approved it: its end is news


# a connection's status
ACTIVE = "active"
REVOKED = "revoked"
NEEDS_RECONNECT = "needs_reconnect"
NOT_CONNECTED = "not_connected"


@dataclass(frozen=True)
class Connection:
    """A vendor credential's public face (the secret stays ciphertext in the store)."""

    connection_id: str
    account_id: str
    vendor: str
    auth_type: str
    header_name: str
    hosts: tuple[str, ...]
    status: str
    created_at: datetime
    revoked_at: datetime | None = None
    ciphertext: bytes = field(default=b"", repr=False)
    query_name: str = ""  # a `query` credential: the query parameter that carries it
    oauth: dict[str, str] | None = None  # OAuth 2 settings: token_url, client_id, scope, authorize_url (no secret)
    revision: int = 0  # moves on whenever the secret is replaced (a cached token of an older one is stale)
    token_ciphertext: bytes = field(default=b"", repr=False)  # authorization code: access + refresh token
    token_expires_at: datetime | None = None
    token_issued_at: datetime | None = None  # when the access token was asked for: its lifetime is from then
    token_version: int = 0  # moves on with every token change; a refresh writes only over the version it read
    status_reason: str | None = None  # why it needs a reconnect (Workset's words, never the vendor's)
    connected_at: datetime | None = None
    refresh_until: datetime | None = None  # a call holds the refresh lease until then (`token_refresh`)


@dataclass(frozen=True)
class Call:
    """One call through a connection, as its recent calls show it (never the input or result)."""

    run_id: str
    agent_id: str
    vendor: str
    name: str
    version: int
    status: str
    error_code: str | None
    dry_run: bool
    created_at: datetime
    updated_at: datetime
