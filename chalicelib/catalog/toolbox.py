"""The account's toolbox: publishing versions (what a definition must be is `definitions`, the hints
each version is held to is `guards`), a person accepting a version's looser hints, finding tools."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from chalicelib.access import connections
from chalicelib.base import log, sensitive
from chalicelib.base.config import settings
from chalicelib.base.errors import (
    Busy,
    Conflict,
    ConnectionNotInScope,
    Forbidden,
    HostNotAllowed,
    InvalidInput,
    NotFound,
    QuotaExceeded,
    ToolNotFound,
)
from chalicelib.catalog import indexes, usage
from chalicelib.identity import accounts
from chalicelib.net import hosts, urls
from chalicelib.store import agents as agent_store
from chalicelib.store import tools as tool_store
from chalicelib.store.base import ConditionFailed
from chalicelib.store.base import unavailable as store_unavailable
from chalicelib.store.records import AgentState, Page, PolicySetting, ToolVersion
from chalicelib.store.tools import NewVersion
from chalicelib.tools import guards
from chalicelib.tools.definitions import Tool, ToolSpec
from chalicelib.tools.guards import IMPLIED_SHAPE, Guard

MCP_METHOD = "tools/call"  # the request shape's method for an MCP server's tool
PUBLISH_ATTEMPTS = 3
MORE_COUNTED = 500  # a search counts this many hits past its limit, at most
# the longest search request, on every entrance (find_tool, the console's searches): the model
# reads 256 tokens of it, and each of its words costs a lookup, a megabyte of them seconds of CPU
QUERY_MAX_CHARS = 500


def publish(account_id: str, spec: ToolSpec, published_by: str, now: datetime, *, person: str | None = None) -> Tool:
    """Publish `spec` as a new tool or the next version of an existing one (an admin may publish
    a version of any tool). A named connection must belong to the account and vendor and admit
    the URL's host. `person`, who publishes this very definition, accepts its hints even where
    they are looser than the previous version's guard (recorded); without one, they are held."""
    if spec.connection:
        connections.check_usable(account_id, spec.connection, spec.vendor, spec.url, field="connection",
                                 headers=spec.header_names, query=spec.query_names)
    return _publish(account_id, spec, published_by, now, person=person)


def acquire(state: AgentState, spec: ToolSpec, now: datetime) -> Tool:
    """An agent publishes a tool: a new one, or a new version of one it authored itself; only
    through a connection in its scope that is limited to hosts, or else to a keyless host the
    account allows (so an agent can neither send a credential nor reach a host no person
    allowed); within its daily quota."""
    agent_id, account_id = state.agent.agent_id, state.agent.account_id
    _check_owner(tool_store.get_head(account_id, spec.vendor, spec.name), agent_id)
    if spec.connection:
        if not state.may_use(spec.connection):
            raise ConnectionNotInScope(f"connection {spec.connection} is not in this agent's scope", field="connection")
        connections.check_usable(account_id, spec.connection, spec.vendor, spec.url, field="connection",
                                 require_hosts=True, headers=spec.header_names, query=spec.query_names)
    else:
        _check_keyless_host(account_id, spec.url)
    if not agent_store.count_acquire(agent_id, now.date().isoformat(), settings().acquire_per_day):
        raise QuotaExceeded(f"this agent has published {settings().acquire_per_day} tools or versions today, "
                            "its daily quota; a person can publish through the console or the admin API")
    return _publish(account_id, spec, agent_id, now, owner=agent_id)


def check_reach(account_id: str, tool: Tool) -> None:
    """A version an agent published may only call a host a person allows now (its connection's
    hosts are checked when the credential is attached; a keyless host must be on the account's
    allow list); admin-published tools are not limited."""
    if accounts.is_agent(tool.version.published_by) and not tool.spec.connection:
        _check_keyless_host(account_id, tool.spec.url)


def request_shape(tool: Tool) -> dict[str, Any]:
    """What an approval covers: the method, where the request goes (scheme, host, port, path and
    query template), the headers it sets, the parameters and body its input fills, the connection
    whose credential it carries, and the read-only and destructive hints Workset enforces (its
    guard); for an MCP server's tool, the server and the tool's own name. A version that changes
    only the description, schemas or the hints it claims (not its guard) keeps the shape."""
    spec = tool.spec
    parts = urlsplit(spec.url)
    shape: dict[str, Any] = {
        "method": MCP_METHOD if spec.upstream else spec.request.method,  # type: ignore[union-attr]
        "scheme": parts.scheme, "host": parts.hostname,
        "port": parts.port or hosts.DEFAULT_PORTS[parts.scheme], "path": parts.path, "query": parts.query,
        "headers": {}, "connection": spec.connection, **tool.guard.shape(),
    }
    if spec.upstream is not None:
        return {**shape, "tool": spec.upstream.tool}
    request = spec.request
    assert request is not None
    shape["headers"] = {name.lower(): value for name, value in sorted(request.headers.items())}
    if request.params:  # only when used, so that earlier decisions keep matching the tools they were made for
        shape["params"] = [f"{param.in_}:{param.name}" for param in request.params]
    if request.body:
        shape["body"] = request.body
    if request.body_format:
        shape["body_format"] = request.body_format
    return shape


def shape_changes(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Field -> {from, to} for each part of the request shape that differs (every part when the
    earlier decision predates request shapes); a guard hint a shape leaves out is MCP's default."""
    before = before or {}
    fields = [*after, *(field for field in before if field not in after)]
    shown_before, shown_after = shown_shape(before), shown_shape(after)  # once, not once a changed field
    changes = {}
    for field in fields:
        was, now = (shape.get(field, IMPLIED_SHAPE.get(field)) for shape in (before, after))
        if was != now:
            changes[field] = {"from": shown_before.get(field, was), "to": shown_after.get(field, now)}
    return changes


def shown_shape(shape: dict[str, Any] | None) -> dict[str, Any]:
    """A request shape as a person is shown it: its query's values hidden (`urls.redacted_query`),
    its names and an HTTP tool's `{field}` placeholders kept, as a key may be one of the values (an
    MCP server's `?api_key=`, a tool's `?api_key=abc123&q={query}`); the value of each header whose
    name or value says it is a credential hidden (`sensitive.shown_header`: `x-api-key: …`), the
    others kept (`x-http-method-override: DELETE`). The stored shape keeps them all, so that a
    changed key still asks a person again."""
    if not shape:
        return shape or {}
    shown = dict(shape)
    if isinstance(shape.get("query"), str):
        shown["query"] = urls.redacted_query(shape["query"])
    if isinstance(shape.get("headers"), dict):
        shown["headers"] = {name: sensitive.shown_header(str(name), str(value)) for name, value in shape["headers"].items()}
    return shown


def accept_annotations(account_id: str, vendor: str, name: str, version: int, person: str,
                       now: datetime) -> tuple[Tool, bool]:
    """A person accepts the hints the newest version declares, where they are looser than its
    guard: from then on they are what Workset enforces (recorded with who and when). Answers the
    tool and whether anything changed (nothing does when nothing is pending). Accepting any other
    version than the newest, or one a newer version replaced meanwhile, is a Conflict: a person
    accepts only what they saw."""
    head = tool_store.get_head(account_id, vendor, name)
    if head is None:
        raise ToolNotFound(vendor, name)
    if version != head.version:
        if version > head.version or version < 1:
            raise NotFound(f"{vendor}/{name} has no version {version}", field="version")
        raise Conflict(f"version {version} of {vendor}/{name} is not the newest (version {head.version} is): "
                       "review the newest version and accept its hints", field="version")
    tool = _tool(head)
    if not tool.pending:
        return tool, False
    accepted = replace(tool.declared, accepted_in=head.version)
    try:
        tool_store.accept_guard(account_id, head, accepted.stored(), person, now)
    except ConditionFailed:
        raise Conflict(f"a newer version of {vendor}/{name} was published meanwhile: review it and accept "
                       "its hints", field="version") from None
    log.event("tool.annotations_accepted", account_id=account_id, vendor=vendor, tool=name, version=version,
              accepted_by=person, read_only=accepted.read_only, destructive=accepted.destructive)
    return Tool(replace(head, guard=accepted.stored(), accepted_by=person, accepted_at=now), tool.spec), True


def _publish(account_id: str, spec: ToolSpec, published_by: str, now: datetime, *, owner: str | None = None,
             person: str | None = None) -> Tool:
    # Imported here, not at the top: search loads numpy and the models, which only publishing
    # and find_tool need; every other request's cold start skips them.
    from chalicelib.search.documents import VECTOR_VERSION, document_vector

    definition = spec.model_dump(mode="json", exclude_none=True)
    vector = document_vector(spec.vendor, spec.name, spec.description)  # once per version, not per search
    for _ in range(PUBLISH_ATTEMPTS):
        head = tool_store.get_head(account_id, spec.vendor, spec.name)
        if owner is not None:
            _check_owner(head, owner)  # again: the head may have moved since the first look
        previous = head.version if head else 0
        # the guard from the head this version follows (the put is conditional on that head)
        guard, accepted = guards.for_new_version(Guard.declared(definition.get("annotations")), head, previous + 1,
                                                 by_person=person is not None)
        new = NewVersion(spec.vendor, spec.name, definition, previous, vector, VECTOR_VERSION, guard=guard.stored(),
                         accepted_by=person if accepted else None)
        try:
            version = tool_store.put_version(account_id, new, published_by, now)
        except ConditionFailed:
            continue  # another publish of this tool won; publish on top of it
        return Tool(version, spec)
    raise Conflict(f"{spec.vendor}/{spec.name} is being published concurrently; try again")


def _check_owner(head: ToolVersion | None, agent_id: str) -> None:
    if head is not None and head.published_by != agent_id:
        owner = f"agent {head.published_by}" if accounts.is_agent(head.published_by) else "a person (admin)"
        raise Forbidden(f"{head.vendor}/{head.name} was published by {owner}; an agent may publish new "
                        "versions only of tools it authored (choose another name)", field="name")


def _check_keyless_host(account_id: str, url: str) -> None:
    allowed = accounts.allowed_hosts(account_id)
    allow_http = settings().allow_private_network
    if not hosts.admits(allowed, url, allow_http=allow_http):
        raise HostNotAllowed(
            f"request.url: agents may author tools only for hosts a person allowed: a connection's hosts, or the "
            f"account's keyless hosts ({hosts.describe(allowed, allow_http=allow_http)}); ask a person to add "
            f"{urlsplit(url).netloc} in the console's Account page", field="request.url")


def resolve(account_id: str, vendor: str, name: str) -> Tool:
    """The newest version of a tool; unknown tools raise ToolNotFound."""
    head = tool_store.get_head(account_id, vendor, name)
    if head is None:
        raise ToolNotFound(vendor, name)
    return _tool(head)


def resolve_version(account_id: str, vendor: str, name: str, version: int) -> Tool:
    """One published version of a tool (versions never change once published)."""
    found = tool_store.get_version(account_id, vendor, name, version)
    if found is None:
        raise ToolNotFound(vendor, name)
    return _tool(found)


def resolve_many(account_id: str, keys: list[tuple[str, str]]) -> list[Tool]:
    """The newest versions of several tools, in the order asked (unknown ones left out)."""
    heads = tool_store.get_heads(account_id, keys)
    return [_tool(heads[key]) for key in keys if key in heads]


# the approval policies a person set that can apply to some tools, by (vendor, name), a name of
# None being the vendor's default (chalicelib/calls/policies.py decides what they mean)
Policies = dict[tuple[str, str | None], PolicySetting]


def resolve_with_policies(account_id: str, vendor: str, name: str) -> tuple[Tool, Policies]:
    """`resolve`, and the policies that can apply to the tool, in one read (a BatchGetItem)."""
    found = tool_store.get_with_policies(account_id, heads=[(vendor, name)])
    head = found.heads.get((vendor, name))
    if head is None:
        raise ToolNotFound(vendor, name)
    return _tool(head), found.policies


def resolve_many_with_policies(account_id: str, keys: list[tuple[str, str]]) -> tuple[list[Tool], Policies]:
    """`resolve_many`, and the policies that can apply to those tools, in the same batch reads."""
    found = tool_store.get_with_policies(account_id, heads=keys)
    return [_tool(found.heads[key]) for key in keys if key in found.heads], found.policies


def page(account_id: str, *, limit: int, cursor: str | None) -> Page:
    """One page of the toolbox (newest versions), ordered by vendor and name."""
    return tool_store.page_heads(account_id, limit=limit, cursor=cursor)


def versions(account_id: str, vendor: str, name: str, *, consistent: bool = False) -> list[ToolVersion]:
    """Every version of a tool, oldest first (`consistent`: with every write so far, such as an
    acceptance just made); unknown tools raise ToolNotFound."""
    found = tool_store.list_versions(account_id, vendor, name, consistent=consistent)
    if not found:
        raise ToolNotFound(vendor, name)
    return found


def search(account_id: str, query: str, limit: int) -> tuple[list[Tool], int]:
    """The best `limit` tools for a query, and how many more matched (`search_with_policies`)."""
    found, more, _ = search_with_policies(account_id, query, limit, policies=False)
    return found, more


def search_with_policies(account_id: str, query: str, limit: int, *,
                         policies: bool = True) -> tuple[list[Tool], int, Policies]:
    """The best `limit` tools for a query, and how many more matched (counted up to
    MORE_COUNTED). The index is the warm instance's, kept current with the toolbox
    (chalicelib/catalog/indexes.py), and so is what the account's use taught it (chalicelib/catalog/usage.py); a
    request for several things is split into its intents (chalicelib/search/queries.py); the hits
    are read fresh (one BatchGetItem), with the approval policies that can apply to them unless
    `policies` is False (same BatchGetItem)."""
    from chalicelib.search import queries  # the search package: loaded by the first search, as in _publish

    if len(query) > QUERY_MAX_CHARS:
        raise InvalidInput(f"query: a search is at most {QUERY_MAX_CHARS} characters; this one has {len(query)}",
                           field="query")
    try:
        index, learned = indexes.current_with_memory(account_id)
        hits = queries.search(index, query, limit + MORE_COUNTED, memory=usage.memory(account_id, learned))
        keys = [indexes.tool_of(key) for key, _ in hits[:limit]]
        more = max(len(hits) - limit, 0)
        if not policies:
            return resolve_many(account_id, keys), more, {}
        found, settings = resolve_many_with_policies(account_id, keys)
        return found, more, settings
    except Exception as error:
        if not store_unavailable(error):
            raise
        log.failure("search.store_unavailable", error, account_id=account_id)
        raise Busy("the toolbox could not be read just now (the store is throttled or slow); "
                   "try again shortly") from error


def _tool(head: ToolVersion) -> Tool:
    return Tool(head, ToolSpec.model_validate(head.definition, context={"stored": True}))
