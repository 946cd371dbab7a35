"""The DynamoDB tables, as pynamodb models. Only the store imports this module.

Access patterns decide the keys (every figure is DynamoDB calls per operation):

- `agents`: one partition per agent holds the agent's settings, its key hashes, its promotions
  and its approvals. One Query answers "who is calling and what do they see": authenticate an
  MCP request and read the working set in a single call. A sparse index `by_account` (only the
  settings item carries `account_id`) lists an account's agents.
- `tools`: one partition per account. `T#vendor#name` is the head (newest version, a copy of
  its definition, so one GetItem resolves a tool); `V#vendor#name#0000000001` are the immutable
  versions. `account_id` + begins_with("T#") lists the toolbox. `U#vendor` is a registered MCP
  server whose tools are that vendor's; `D#vendor#2026-12-03` counts the new versions the vendor's
  imports and syncs published that UTC day (their daily cap). In the account's own change partition (`<account>#changes`),
  `C#0000000042` records which heads revision 42 of the toolbox changed: a warm search index reads
  the records since the revision it holds (one Query of a small partition) instead of the whole
  toolbox; the table's TTL drops them after CHANGE_RETENTION. In the account's memory partition
  (`<account>#memory#<generation>`), `M#<hash>` is one (request, tool) pair find_tool learned
  from (chalicelib/catalog/usage.py): one Query reads them all (at most MEMORY_PAIRS); a reset moves the
  account's `memory_generation` on, so the old partition is out of sight at once, then deleted.
- `history`: one partition per agent, sorted by event id (time first), append-only: promotions,
  demotions, pins and unpins.
- `runs`: one item per call, by run id; `by_agent` lists an agent's runs, the sparse
  `pending_by_account` lists what waits for a person.
- `connections`: one partition per account; the secret is KMS ciphertext. A connection's recent
  calls are the runs table's sparse `by_connection` index (written with the run, so a call costs
  no extra DynamoDB call for it).
- `accounts`: the tenant, with a toolbox revision that warm instances compare against to keep
  their search index fresh; `admin-tokens`: token hash -> account, one GetItem per admin call.
  The same table keeps what proves a person or an OAuth client before any agent is involved:
  console sessions, OAuth clients (`oauth-client#<id>`), authorization codes
  (`oauth-code#<hash>`) and the counters that bound open registration (`oauth-quota#<counter>`),
  each by a key no token hash can equal.
- An agent's OAuth grants live in its own partition (`G#<grant id>`, hashes of its current access
  and refresh tokens), so the one Query that authenticates a `wsk_` key authenticates an OAuth
  access token too.
"""

from __future__ import annotations

import zlib
from typing import Any

from pynamodb.attributes import (
    BinaryAttribute,
    BooleanAttribute,
    DiscriminatorAttribute,
    JSONAttribute,
    ListAttribute,
    MapAttribute,
    NumberAttribute,
    TTLAttribute,
    UnicodeAttribute,
    UTCDateTimeAttribute,
)
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex, IncludeProjection
from pynamodb.models import Model

from chalicelib.base.config import settings

AGENT_SK = "AGENT"
PROMOTION_PREFIX = "P#"
APPROVAL_PREFIX = "A#"
HEAD_PREFIX = "T#"
SESSION_PREFIX = "session#"
OAUTH_CLIENT_PREFIX = "oauth-client#"
OAUTH_CODE_PREFIX = "oauth-code#"
OAUTH_SPENT_PREFIX = "oauth-spent#"
OAUTH_QUOTA_PREFIX = "oauth-quota#"
LISTEN_SLOT_PREFIX = "listen#"
GRANT_PREFIX = "G#"
SHARDS = 4  # partitions of each index the sweep reads: a sweep with nothing due makes 3 x SHARDS queries
VERSION_PREFIX = "V#"
UPSTREAM_PREFIX = "U#"
DAY_COUNT_PREFIX = "D#"
CHANGE_PREFIX = "C#"
MEMORY_PREFIX = "M#"
SEARCHES_SK = "S#"


def _strings(**options: Any) -> ListAttribute[str]:
    """A list of strings. (pynamodb types a list `of=UnicodeAttribute` as a list of attributes; what
    reads and writes hold is str.)"""
    return ListAttribute(of=UnicodeAttribute, **options)  # type: ignore[arg-type]


def _meta(table: str) -> Any:
    """The Meta class of a model of `table` (pynamodb types `Model.Meta` as an instance of its
    protocol, where a model declares a class)."""
    config = settings()

    class Meta:
        table_name = f"{config.table_prefix}-{table}"
        region = config.aws_region
        billing_mode = "PAY_PER_REQUEST"

    return Meta


class AccountItem(Model):
    """A tenant, and the revision of its toolbox."""

    Meta = _meta("accounts")
    account_id = UnicodeAttribute(hash_key=True)
    name = UnicodeAttribute()
    created_at = UTCDateTimeAttribute()
    toolbox_revision = NumberAttribute(default=0)
    # keyless hosts a person allows agent-authored tools to call (`host` or `host:port`)
    allowed_hosts = _strings(null=True)
    # moves on when a person ends every console session of the account
    console_epoch = NumberAttribute(default=0)
    # find_tool's memory of the account's use (chalicelib/catalog/usage.py): the generation names the
    # partition its pairs live in (a reset moves it on); the revision moves on with every change,
    # so a warm instance rereads the pairs only then (read with the toolbox revision, one GetItem)
    memory_generation = NumberAttribute(null=True)
    memory_revision = NumberAttribute(null=True)


class AdminTokenItem(Model):
    """An admin token, by its hash: one GetItem tells whose it is."""

    Meta = _meta("admin-tokens")
    token_hash = UnicodeAttribute(hash_key=True)
    account_id = UnicodeAttribute()
    created_at = UTCDateTimeAttribute()


class ConsoleSessionItem(Model):
    """A signed-in console session, in the admin-tokens table (both are what proves a person):
    its key is `SESSION_PREFIX` + the SHA-256 of the session id, which no token hash can equal.
    Signing out deletes it; `epoch` must equal the account's `console_epoch`."""

    Meta = _meta("admin-tokens")
    token_hash = UnicodeAttribute(hash_key=True)
    account_id = UnicodeAttribute()
    created_at = UTCDateTimeAttribute()
    expires_at = UTCDateTimeAttribute()
    epoch = NumberAttribute(default=0)
    actor = UnicodeAttribute(null=True)  # which admin token signed in (accounts.admin_actor)
    # DynamoDB's TTL deletes abandoned sessions some time after they expire (reads check
    # `expires_at` themselves: TTL lags, and moto never expires anything)
    ttl = TTLAttribute(null=True)


class OAuthClientItem(Model):
    """An OAuth client, registered dynamically (RFC 7591), in the admin-tokens table under
    `OAUTH_CLIENT_PREFIX` + its id. A client no person ever consented to is dropped by TTL a day
    after it registered (registration is open to anyone); the first consent clears the TTL."""

    Meta = _meta("admin-tokens")
    token_hash = UnicodeAttribute(hash_key=True)
    client_name = UnicodeAttribute()
    redirect_uris = _strings()
    auth_method = UnicodeAttribute()  # none, client_secret_post or client_secret_basic
    secret_hash = UnicodeAttribute(null=True)
    client_uri = UnicodeAttribute(null=True)
    created_at = UTCDateTimeAttribute()
    ttl = TTLAttribute(null=True)


class OAuthQuotaItem(Model):
    """A counter of one window of an unauthenticated write (`OAUTH_QUOTA_PREFIX` + the counter:
    registrations from one source address in one UTC hour, or from all of them): its window is in
    its key, so a new window starts a new counter, and TTL drops the old ones."""

    Meta = _meta("admin-tokens")
    token_hash = UnicodeAttribute(hash_key=True)
    used = NumberAttribute(null=True)  # not `count`: that is pynamodb's Model.count
    ttl = TTLAttribute(null=True)


class ListenSlotItem(Model):
    """One of an account's slots for a held `subscriptions/listen` (`LISTEN_SLOT_PREFIX` + account
    + slot number): held by one request until `ttl`, which also lets DynamoDB drop it later."""

    Meta = _meta("admin-tokens")
    token_hash = UnicodeAttribute(hash_key=True)
    holder = UnicodeAttribute(null=True)
    ttl = TTLAttribute(null=True)


class OAuthCodeItem(Model):
    """An authorization code, by its hash, under `OAUTH_CODE_PREFIX`: what the person consented to
    and the PKCE challenge the redemption must answer. Redeemed at most once (`redeemed_at`); kept
    until TTL so that a second redemption is recognised and revokes the grant the first made."""

    Meta = _meta("admin-tokens")
    token_hash = UnicodeAttribute(hash_key=True)
    client_id = UnicodeAttribute()
    redirect_uri = UnicodeAttribute()
    code_challenge = UnicodeAttribute()
    resource = UnicodeAttribute()
    scope = UnicodeAttribute()
    account_id = UnicodeAttribute()
    agent_id = UnicodeAttribute()
    grant_id = UnicodeAttribute()
    consented_by = UnicodeAttribute()
    expires_at = UTCDateTimeAttribute()
    redeemed_at = UTCDateTimeAttribute(null=True)
    ttl = TTLAttribute(null=True)


class SpentRefreshItem(Model):
    """A refresh token rotated away, by its hash, under `OAUTH_SPENT_PREFIX`: whose grant it was.
    Written in the rotation's own transaction (so of two rotations with one token, one fails), and
    kept as long as the token could have lived, so that it coming back at any later time, however
    many rotations on, revokes the grant."""

    Meta = _meta("admin-tokens")
    token_hash = UnicodeAttribute(hash_key=True)
    agent_id = UnicodeAttribute()
    grant_id = UnicodeAttribute()
    ttl = TTLAttribute()


# Every index projects only what its queries read, so the writes a run or a sweep makes to an
# item (leases, flags, results) are not copied into indexes that never show them.
# pynamodb filters a subclass's queries on the `kind` discriminator: every index of the agents
# table projects it.
AGENT_LISTED = ["kind", "name", "cap", "idle_window_days", "size", "webhook_url", "connection_scope", "revoked_at",
                "archived_at"]
RUN_SUMMARY = ["account_id", "vendor", "name", "version", "status", "updated_at", "lease_expires_at", "dry_run",
               "decided_by"]


class AgentsByAccount(GlobalSecondaryIndex["AgentSettingsItem"]):
    """Sparse: only settings items carry `account_id`. Projects what the agents list shows."""

    class Meta:
        index_name = "by_account"
        projection = IncludeProjection(AGENT_LISTED)

    account_id = UnicodeAttribute(hash_key=True)
    created_at = UTCDateTimeAttribute(range_key=True)


class AgentPartitionItem(Model):
    """Every item of an agent's partition; `kind` tells settings, promotions and approvals apart."""

    Meta = _meta("agents")
    agent_id = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    kind = DiscriminatorAttribute()


class AgentsToReview(GlobalSecondaryIndex["AgentSettingsItem"]):
    """Sparse: agents the next sweep must look at as a whole (over their cap, settings changed,
    a connection revoked). Spread over a few shards so no partition runs hot."""

    class Meta:
        index_name = "to_review"
        projection = IncludeProjection(["kind", "account_id"])

    review_shard = UnicodeAttribute(hash_key=True)


class AgentsToAnnounce(GlobalSecondaryIndex["AgentSettingsItem"]):
    """Sparse outbox: agents whose working set changed and whose webhook has not been told yet.
    Written in the change's own transaction, drained right after it and by every sweep."""

    class Meta:
        index_name = "outbox"
        projection = IncludeProjection(["kind"])

    outbox_shard = UnicodeAttribute(hash_key=True)


class AgentSettingsItem(AgentPartitionItem, discriminator="agent"):
    """The agent: name, cap, idle window, key hashes and the working set's size."""

    account_id = UnicodeAttribute()
    created_at = UTCDateTimeAttribute()
    name = UnicodeAttribute()
    cap = NumberAttribute()
    idle_window_days = NumberAttribute()
    key_hashes = _strings(default=list)
    size = NumberAttribute(default=0)
    # The runs in flight: run id -> lease expiry (epoch seconds). `lease_rev` moves on with every
    # run that starts, so a demotion conditioned on the revision it read loses to any new run.
    leases: MapAttribute[str, Any] = MapAttribute(default=dict)
    lease_rev = NumberAttribute(default=0)
    # Set while the agent needs a whole review by the sweep; `review_token` lets the sweep clear
    # exactly the flag it saw (a newer flag set meanwhile survives).
    review_shard = UnicodeAttribute(null=True)
    review_token = UnicodeAttribute(null=True)
    # Every working-set change moves `change_seq` on (in its own transaction) and sets the outbox
    # flag; `mcp_seen_seq` is the last change delivered on an MCP response.
    change_seq = NumberAttribute(default=0)
    mcp_seen_seq = NumberAttribute(default=0)
    outbox_shard = UnicodeAttribute(null=True)
    webhook_url = UnicodeAttribute(null=True)
    webhook_secret = BinaryAttribute(null=True, legacy_encoding=False)
    # the connections the agent may call through; absent means all of the account's
    connection_scope = _strings(null=True)
    # how many promotions are pinned: moved by the pin, unpin and demote transactions, each
    # conditioned on it (absent on items from before pins: none pinned)
    pins = NumberAttribute(null=True)
    # tools and versions the agent published with acquire on `acquire_day` (UTC), for its quota
    acquire_day = UnicodeAttribute(null=True)
    acquire_count = NumberAttribute(null=True)
    # a revoked agent's keys and grants stop; an archived one (revoked first) leaves the list
    revoked_at = UTCDateTimeAttribute(null=True)
    archived_at = UTCDateTimeAttribute(null=True)
    by_account = AgentsByAccount()
    to_review = AgentsToReview()
    outbox = AgentsToAnnounce()


class PromotionsDue(GlobalSecondaryIndex["PromotionItem"]):
    """Every promotion by the moment the idle rule may demote it: the sweep reads only what is
    due (`due_at <= now`), whatever the size of the fleet."""

    class Meta:
        index_name = "due"
        projection = IncludeProjection(["kind", "tool_key"])

    due_shard = UnicodeAttribute(hash_key=True)
    due_at = UTCDateTimeAttribute(range_key=True)


class PromotionsByTool(GlobalSecondaryIndex["PromotionItem"]):
    """Which agents have a tool promoted (revoking a connection demotes them all)."""

    class Meta:
        index_name = "by_tool"
        projection = IncludeProjection(["kind"])

    tool_key = UnicodeAttribute(hash_key=True)


class PromotionItem(AgentPartitionItem, discriminator="promotion"):
    """One tool in the agent's working set."""

    vendor = UnicodeAttribute()
    name = UnicodeAttribute()
    promoted_at = UTCDateTimeAttribute()
    promoted_by = UnicodeAttribute()
    last_used_at = UTCDateTimeAttribute(null=True)
    # The idle rule's deadline: last use (or promotion) plus the idle window, kept current by every
    # write that moves either; a revocation makes it due at once with its own cause.
    due_at = UTCDateTimeAttribute(null=True)
    due_shard = UnicodeAttribute(null=True)
    due_cause = UnicodeAttribute(null=True)
    tool_key = UnicodeAttribute(null=True)
    # Set while pinned. A pinned promotion carries no `due_shard`/`due_at` (unless a revocation
    # made it due with its own cause), so it is out of the sparse `due` index and the sweep never
    # reads it; unpinning puts it back at its idle deadline.
    pinned_at = UTCDateTimeAttribute(null=True)
    pinned_by = UnicodeAttribute(null=True)
    due = PromotionsDue()
    by_tool = PromotionsByTool()


class ApprovalItem(AgentPartitionItem, discriminator="approval"):
    """A person's standing decision for this agent and this write tool: allow or deny, for the
    request shape of the version they decided (a version with another shape asks again)."""

    vendor = UnicodeAttribute()
    name = UnicodeAttribute()
    approved_by = UnicodeAttribute()
    approved_at = UTCDateTimeAttribute()
    decision = UnicodeAttribute(default="allow")
    version = NumberAttribute(null=True)
    shape = JSONAttribute(null=True)


class GrantItem(AgentPartitionItem, discriminator="grant"):
    """What a person's consent gave one OAuth client for this agent: the hashes of the current
    access token (short-lived) and refresh token (rotated on every use), and the one before the
    current refresh token, whose reuse proves a leak and revokes the grant. Carries no
    `account_id`, so it stays out of the `by_account` index."""

    client_id = UnicodeAttribute()
    client_name = UnicodeAttribute()
    scope = UnicodeAttribute()
    resource = UnicodeAttribute()
    created_at = UTCDateTimeAttribute()
    consented_by = UnicodeAttribute()
    access_hash = UnicodeAttribute(null=True)
    access_expires_at = UTCDateTimeAttribute(null=True)
    refresh_hash = UnicodeAttribute(null=True)
    previous_refresh_hash = UnicodeAttribute(null=True)
    refresh_expires_at = UTCDateTimeAttribute(null=True)
    refreshed_at = UTCDateTimeAttribute(null=True)
    revoked_at = UTCDateTimeAttribute(null=True)


class SearchesItem(AgentPartitionItem, discriminator="searches"):
    """What the agent's last few find_tool calls answered (`SEARCHES_SK`), so that a promote, a
    run_tool or a call that follows can credit the request that found the tool: one small item,
    overwritten by each search, read with the rest of the partition at no extra call."""

    searches = JSONAttribute(default=list)


class _UpstreamsIndex(GlobalSecondaryIndex["Model"]):
    """Every registered MCP server in the fleet, spread over SHARDS partitions: the hourly sync
    reads only these (sparse: only an upstream item carries `upstream_shard`)."""

    class Meta:
        index_name = "upstreams"
        projection = AllProjection()

    upstream_shard = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)


class _DeclaredUpstreams(_UpstreamsIndex):
    """The index as the table declares it (the table is created from ToolboxItem)."""


class UpstreamsByShard(_UpstreamsIndex):
    """The index as UpstreamItem queries it."""


class ToolboxItem(Model):
    """Every item of an account's toolbox partition."""

    Meta = _meta("tools")
    account_id = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    kind = DiscriminatorAttribute()
    vendor = UnicodeAttribute()
    name = UnicodeAttribute()
    version = NumberAttribute()
    definition = JSONAttribute()
    published_at = UTCDateTimeAttribute()
    published_by = UnicodeAttribute()
    # the search vector of this version (computed once at publish, or soon after by the work
    # queue for a large import) and the recipe that made it
    vector = BinaryAttribute(null=True, legacy_encoding=False)
    vector_version = UnicodeAttribute(null=True)
    # where an imported tool came from: {"kind": "openapi", "operation": "GET /pets/{id}", ...}
    # or {"kind": "mcp", "tool": "<the server's own name>"}; absent for a tool authored by hand
    origin = JSONAttribute(null=True)
    # the hints Workset enforces for the version (chalicelib/tools/guards.py), absent on versions stored
    # before guards were kept (guarded as declared); and the person who accepted a loosening of
    # them, when one did. A person's acceptance updates these, never the definition.
    guard = JSONAttribute(null=True)
    accepted_by = UnicodeAttribute(null=True)
    accepted_at = UTCDateTimeAttribute(null=True)
    upstream_shard = UnicodeAttribute(null=True)  # never set on a tool: see UpstreamItem
    upstreams = _DeclaredUpstreams()


class ToolHeadItem(ToolboxItem, discriminator="head"):
    """The newest version of a tool, copied so that one GetItem resolves it. `unavailable` says
    why it can no longer be called (its operation left the imported document, or its MCP server
    stopped listing it); a later import that brings it back clears it."""

    unavailable = UnicodeAttribute(null=True)


class ToolVersionItem(ToolboxItem, discriminator="version"):
    """One immutable version."""


class UpstreamItem(Model):
    """A registered MCP server, in its account's toolbox partition under `U#<vendor>`: its tools
    are the vendor's tools (one server per vendor)."""

    Meta = _meta("tools")
    account_id = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    kind = UnicodeAttribute(default="upstream")
    vendor = UnicodeAttribute()
    url = UnicodeAttribute()
    connection_id = UnicodeAttribute(null=True)
    created_at = UTCDateTimeAttribute()
    revision = UnicodeAttribute(null=True)  # the MCP revision it spoke at the last sync
    synced_at = UTCDateTimeAttribute(null=True)
    sync = JSONAttribute(null=True)  # the last sync's outcome: {"ok", "message"?, "counts"}
    upstream_shard = UnicodeAttribute()
    by_shard = UpstreamsByShard()


class DayCountItem(Model):
    """The new versions a vendor's tools got on one UTC day (its OpenAPI imports and its MCP
    server's syncs together), in the account's toolbox partition under `D#<vendor>#<day>`: the
    daily cap's count, added to before the versions are written. TTL drops it once the day is
    over (its key names the day, so a count never needs to start again)."""

    Meta = _meta("tools")
    account_id = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    kind = UnicodeAttribute(default="day_count")
    published = NumberAttribute(default=0)
    ttl = TTLAttribute(null=True)


class ToolChangeItem(Model):
    """Which tools' heads one revision of the toolbox changed, under `C#<revision>`: written in
    the transaction that moves the account's revision to it, so the records of an unbroken range
    of revisions name every head that changed in between."""

    Meta = _meta("tools")
    account_id = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    kind = UnicodeAttribute(default="change")
    tools = _strings(default=list)  # "vendor/name" of each head written
    ttl = TTLAttribute(null=True)


class MemoryItem(Model):
    """One (request, tool) pair find_tool learned from, in the account's memory partition
    (`memory_partition`) under `M#<hash of request and tool>`: how often, since when, and the
    request's MiniLM vector (computed once, here). TTL drops pairs unused for MEMORY_RETENTION,
    and any a reset's deletes left behind."""

    Meta = _meta("tools")
    account_id = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    kind = UnicodeAttribute(default="memory")
    request = UnicodeAttribute()  # not `query`: that is pynamodb's Model.query
    vendor = UnicodeAttribute()
    name = UnicodeAttribute()
    times = NumberAttribute()  # not `count`: that is pynamodb's Model.count
    first_seen = UTCDateTimeAttribute()
    last_seen = UTCDateTimeAttribute()
    vector = BinaryAttribute(legacy_encoding=False)
    ttl = TTLAttribute(null=True)


class PolicyItem(Model):
    """A person's approval policy for one tool (`name`), or the account's default for a vendor's
    tools (`name` is ANY_TOOL), in the account's policies partition (`policy_partition`): apart from
    its toolbox, so listing tools never meets them."""

    Meta = _meta("tools")
    account_id = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    kind = UnicodeAttribute(default="policy")
    vendor = UnicodeAttribute()
    name = UnicodeAttribute()
    policy = UnicodeAttribute()
    set_by = UnicodeAttribute()
    set_at = UTCDateTimeAttribute()


class HistoryItem(Model):
    """One promotion, demotion, pin or unpin, or a decision on a run; never edited; expires after the stage's retention."""

    Meta = _meta("history")
    agent_id = UnicodeAttribute(hash_key=True)
    event_id = UnicodeAttribute(range_key=True)
    vendor = UnicodeAttribute()
    name = UnicodeAttribute()
    action = UnicodeAttribute()
    cause = UnicodeAttribute()
    actor = UnicodeAttribute()
    at = UTCDateTimeAttribute()
    ttl = TTLAttribute(null=True)  # DynamoDB removes the event this long after it (HistoryRetentionDays)
    run_id = UnicodeAttribute(null=True)  # a person's decision on a run (or its expiry): which run


class RunsByAgent(GlobalSecondaryIndex["RunItem"]):
    """An agent's runs, newest last: summaries (no input, no result)."""

    class Meta:
        index_name = "by_agent"
        projection = IncludeProjection(RUN_SUMMARY)

    agent_id = UnicodeAttribute(hash_key=True)
    created_at = UTCDateTimeAttribute(range_key=True)


class PendingByAccount(GlobalSecondaryIndex["RunItem"]):
    """Sparse: only runs awaiting approval carry `pending_account_id`. A person decides on the
    input, so it is projected with the summary (a waiting run has no result yet)."""

    class Meta:
        index_name = "pending_by_account"
        projection = IncludeProjection([*RUN_SUMMARY, "agent_id", "input"])

    pending_account_id = UnicodeAttribute(hash_key=True)
    created_at = UTCDateTimeAttribute(range_key=True)


class RunsToSweep(GlobalSecondaryIndex["RunItem"]):
    """Sparse: the runs the sweep may have to act on, by when. A live run (running, or waiting for
    a person) is in it at its lease's end, so a run whose Lambda died is found wherever it is in
    the fleet; an ended run whose `run_finished` news is not yet with the webhook queue
    (`unannounced`) is in it at its end. Announced and quiet runs leave it, so the sweep reads
    O(abandoned + unannounced) runs, not the fleet's."""

    class Meta:
        index_name = "to_sweep"
        projection = IncludeProjection(["agent_id", "account_id", "status", "lease_expires_at", "unannounced",
                                         "decided_by"])

    sweep_shard = UnicodeAttribute(hash_key=True)
    sweep_at = UTCDateTimeAttribute(range_key=True)


class RunsByConnection(GlobalSecondaryIndex["RunItem"]):
    """Sparse: only runs of tools with a connection carry `connection_key` (`<account>#<connection>`):
    a connection's recent calls, newest first, in one Query. Summaries only: never the input or
    the result."""

    class Meta:
        index_name = "by_connection"
        projection = IncludeProjection([*RUN_SUMMARY, "agent_id", "error_code"])

    connection_key = UnicodeAttribute(hash_key=True)
    created_at = UTCDateTimeAttribute(range_key=True)


class RunItem(Model):
    """One call of a tool, from start (or wait for approval) to its result."""

    Meta = _meta("runs")
    run_id = UnicodeAttribute(hash_key=True)
    agent_id = UnicodeAttribute()
    account_id = UnicodeAttribute()
    vendor = UnicodeAttribute()
    name = UnicodeAttribute()
    version = NumberAttribute()
    input = JSONAttribute()
    dry_run = BooleanAttribute(default=False)
    status = UnicodeAttribute()
    created_at = UTCDateTimeAttribute()
    updated_at = UTCDateTimeAttribute()
    lease_expires_at = UTCDateTimeAttribute()
    # a small result or error is kept here; a large one in its RunResultItem (`result_apart`), so
    # the transaction that ends the run stays small
    result = JSONAttribute(null=True)
    error = JSONAttribute(null=True)
    result_apart = BooleanAttribute(null=True)
    decided_by = UnicodeAttribute(null=True)
    pending_account_id = UnicodeAttribute(null=True)
    sweep_shard = UnicodeAttribute(null=True)
    sweep_at = UTCDateTimeAttribute(null=True)
    unannounced = BooleanAttribute(null=True)  # ended after waiting on a person; the webhook not yet told
    connection_key = UnicodeAttribute(null=True)  # `<account>#<connection>` for `by_connection`
    error_code = UnicodeAttribute(null=True)  # a failed run's error code (what `by_connection` shows)
    approval_policy = UnicodeAttribute(null=True)  # the policy a wait was asked under; absent: first_call
    ttl = TTLAttribute(null=True)  # runs are kept for WORKSET_RUN_RETENTION_DAYS
    by_agent = RunsByAgent()
    pending_by_account = PendingByAccount()
    to_sweep = RunsToSweep()
    by_connection = RunsByConnection()


class RunResultItem(Model):
    """A large result (or error) of a run, in the runs table under `<run id>#result`, written on
    its own before the run ends (one plain write, not doubled by a transaction nor copied into an
    index: it carries none of their keys)."""

    Meta = _meta("runs")
    run_id = UnicodeAttribute(hash_key=True)
    result = JSONAttribute(null=True)
    error = JSONAttribute(null=True)
    ttl = TTLAttribute(null=True)


class ConnectionItem(Model):
    """Credentials for one vendor; every secret is stored encrypted (KMS), never returned. An
    authorization-code connection also holds its tokens (one ciphertext) and, while a person is
    between Connect and the vendor's callback, a hash of the pending `state`."""

    Meta = _meta("connections")
    account_id = UnicodeAttribute(hash_key=True)
    connection_id = UnicodeAttribute(range_key=True)
    vendor = UnicodeAttribute()
    auth_type = UnicodeAttribute()
    header_name = UnicodeAttribute(null=True)  # none for a query credential
    query_name = UnicodeAttribute(null=True)
    oauth = JSONAttribute(null=True)  # token_url, client_id, scope, authorize_url: no secret
    ciphertext = BinaryAttribute(legacy_encoding=False)
    hosts = _strings(default=list)
    status = UnicodeAttribute()
    status_reason = UnicodeAttribute(null=True)
    created_at = UTCDateTimeAttribute()
    revoked_at = UTCDateTimeAttribute(null=True)
    connected_at = UTCDateTimeAttribute(null=True)
    revision = NumberAttribute(null=True)
    token_ciphertext = BinaryAttribute(null=True, legacy_encoding=False)
    token_expires_at = UTCDateTimeAttribute(null=True)
    token_issued_at = UTCDateTimeAttribute(null=True)  # when the access token was asked for (its lifetime)
    token_version = NumberAttribute(null=True)
    auth_state = UnicodeAttribute(null=True)  # SHA-256 of the pending authorization's state
    auth_session = UnicodeAttribute(null=True)  # SHA-256 of the console session that started it
    auth_expires_at = UTCDateTimeAttribute(null=True)
    refresh_owner = UnicodeAttribute(null=True)  # the call refreshing the tokens now (`credentials` lease)
    refresh_until = UTCDateTimeAttribute(null=True)  # when that lease lapses (a crashed holder's included)


TABLES: tuple[type[Model], ...] = (
    AccountItem, AdminTokenItem, AgentPartitionItem, ToolboxItem, HistoryItem, RunItem, ConnectionItem,
)


def promotion_sk(vendor: str, name: str) -> str:
    """Range key of a promotion item."""
    return f"{PROMOTION_PREFIX}{vendor}#{name}"


def grant_sk(grant_id: str) -> str:
    """Range key of an OAuth grant in its agent's partition."""
    return f"{GRANT_PREFIX}{grant_id}"


def tool_key(account_id: str, vendor: str, name: str) -> str:
    """The `by_tool` index key of a tool."""
    return f"{account_id}#{vendor}#{name}"


def shard(key: str, shards: int) -> str:
    """A stable shard label for `key` (spreads a sparse index over a few partitions)."""
    return f"s{zlib.crc32(key.encode()) % shards}"


def approval_sk(vendor: str, name: str) -> str:
    """Range key of an approval item."""
    return f"{APPROVAL_PREFIX}{vendor}#{name}"


def head_sk(vendor: str, name: str) -> str:
    """Range key of a tool's head item."""
    return f"{HEAD_PREFIX}{vendor}#{name}"


def upstream_sk(vendor: str) -> str:
    """Range key of a registered MCP server."""
    return f"{UPSTREAM_PREFIX}{vendor}"


def day_count_sk(vendor: str, day: str) -> str:
    """Range key of a vendor's count of new versions on `day` (UTC, YYYY-MM-DD)."""
    return f"{DAY_COUNT_PREFIX}{vendor}#{day}"


def change_partition(account_id: str) -> str:
    """Hash key of an account's change records: apart from its toolbox, so that reading the records
    never walks the toolbox's items (an emulator's query does) and listing tools never meets them."""
    return f"{account_id}#changes"


def change_sk(revision: int) -> str:
    """Range key of a revision's change record; zero-padded so records sort numerically."""
    return f"{CHANGE_PREFIX}{revision:010d}"


def memory_partition(account_id: str, generation: int) -> str:
    """Hash key of an account's memory of its use, in one generation (a reset starts the next)."""
    return f"{account_id}#memory#{generation}"


ANY_TOOL = "*"  # a policy item's name for the account's default over a vendor's tools


def policy_partition(account_id: str) -> str:
    """Hash key of an account's approval policies (also of their history, in the history table)."""
    return f"{account_id}#policies"


def policy_sk(vendor: str, name: str) -> str:
    """Range key of a policy item: one tool's, or (name ANY_TOOL) a vendor's default."""
    return f"{vendor}#{name}"


def version_sk(vendor: str, name: str, version: int) -> str:
    """Range key of one version; zero-padded so versions sort numerically."""
    return f"{VERSION_PREFIX}{vendor}#{name}#{version:010d}"


def connection_key(account_id: str, connection_id: str) -> str:
    """The `by_connection` index key of a connection's runs."""
    return f"{account_id}#{connection_id}"
