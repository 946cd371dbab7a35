"""The meta-tools every agent sees, and the MCP definition of a promoted tool."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from chalicelib.agents import workingset
from chalicelib.base import jsontext
from chalicelib.base.causes import Cause, PromotedBy
from chalicelib.base.outcomes import Outcome, RunStatus
from chalicelib.base.validation import NAME_PATTERN, SEPARATOR, VENDOR_PATTERN, check_tool_name, parse
from chalicelib.calls import policies, runs
from chalicelib.catalog import toolbox, usage
from chalicelib.mcp import compact
from chalicelib.store.records import AgentState
from chalicelib.tools.definitions import Tool, ToolSpec, parse_spec

ALWAYS_LOAD = "anthropic/alwaysLoad"
SEARCH_HINT = "anthropic/searchHint"
APPROVAL_META = "workset/approvalPolicy"  # a write's approval policy, as a hint in its definition
SEARCH_HINT_CHARS = 120
ALWAYS_LOAD_BYTES = 40_000  # ~10k tokens at 4 bytes a token: half of Claude Code's deferral threshold
FIND_LIMIT_DEFAULT = 10
FIND_LIMIT_MAX = 50

INSTRUCTIONS = (
    "Your tool list is a working set drawn from a larger toolbox. For anything you have no tool for, "
    "call find_tool first, then call a hit with run_tool, or promote it into your list (promote answers "
    "its full definition). Only when find_tool finds nothing, author a tool with acquire. Demote tools "
    "you are done with; unused ones are demoted for you. A write tool asks a person on its first call."
)


class FindToolArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    query: str = Field(min_length=1, max_length=toolbox.QUERY_MAX_CHARS, description="What to do, in plain words")
    limit: int = Field(default=FIND_LIMIT_DEFAULT, ge=1, le=FIND_LIMIT_MAX)


class ToolRef(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    vendor: str = Field(pattern=VENDOR_PATTERN)  # both as find_tool answers them
    name: str = Field(pattern=NAME_PATTERN)

    @model_validator(mode="after")
    def _mcp_name(self) -> ToolRef:
        check_tool_name(self.vendor, self.name)
        return self


class PromoteArgs(ToolRef):
    pinned: bool = Field(default=False, description="Also pin it")


class RunToolArgs(ToolRef):
    input: dict[str, Any] = Field(default_factory=dict)
    dryRun: bool = Field(default=False, description="Preview a write; send nothing")


class GetRunArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    run_id: str = Field(min_length=1, max_length=64)


@dataclass(frozen=True)
class Call:
    """What a meta-tool handler gets."""

    state: AgentState
    now: datetime


@dataclass
class MetaTool:
    """A meta-tool: its MCP definition and its handler."""

    name: str
    description: str
    args: type[BaseModel]
    annotations: dict[str, Any]
    handler: Callable[[Call, Any], Outcome]
    hint: str = ""  # anthropic/searchHint: what a host's own tool search matches, should it defer this one
    schema: dict[str, Any] | None = None  # the listed input schema, when not the args' own

    @cached_property
    def definition(self) -> dict[str, Any]:
        """The MCP tool definition (built once: schema generation is not free). Its schema is for
        the agent to read: what only validation needs (patterns, lengths, titles) is left to the
        server, which parses every call with `args` whatever a client sent."""
        schema = self.schema or _listed_schema(self.args.model_json_schema())
        return {"name": self.name, "description": self.description, "inputSchema": schema,
                "annotations": self.annotations, "_meta": host_meta(self.hint)}


_VALIDATION_ONLY = frozenset({"title", "pattern", "minLength", "maxLength", "additionalProperties"})


def _listed_schema(node: Any, named: bool = False) -> Any:
    """A pydantic JSON schema without what only validation needs (`named`: a `properties` map,
    whose keys are field names, not keywords)."""
    if isinstance(node, list):
        return [_listed_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {key: _listed_schema(value, named=key == "properties" and not named)
            for key, value in node.items() if named or key not in _VALIDATION_ONLY}


# acquire's listed schema: ToolSpec's fields but output_schema (tests/test_footprint.py holds them
# together), described for an author rather than generated (pydantic's is 3.3 KB of validation detail)
ACQUIRE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string"},
        "name": {"type": "string"},
        "description": {"type": "string"},
        "input_schema": {"type": "object"},
        "annotations": {"type": "object", "description": "MCP hints"},
        "request": {
            "type": "object",
            "description": "{field} in url is filled from the input; other fields form a JSON body for "
                           "POST/PUT/PATCH, else the query",
            "properties": {
                "method": {"enum": ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]},
                "url": {"type": "string"},
                "headers": {"type": "object"},
                "params": {"type": "array", "description": "[{field, name, in: query|header}]"},
                "body": {"type": "string", "description": "The field sent as the whole body"},
                "body_format": {"enum": ["form", "multipart", "binary"]},
            },
            "required": ["method", "url"],
        },
        "connection": {"type": "string", "description": "Whose credentials it sends"},
    },
    "required": ["vendor", "name", "description", "input_schema", "request"],
}


def tool_definition(tool: Tool, policy: str | None = None) -> dict[str, Any]:
    """The MCP definition of a promoted tool: `vendor__name` and the newest version's spec with the
    hints Workset enforces (its guard, never looser claims a person has not accepted), marked for
    hosts to load up front (`host_meta`); a write's approval `policy` rides in `_meta`."""
    spec = tool.spec
    definition: dict[str, Any] = {
        "name": f"{spec.vendor}{SEPARATOR}{spec.name}",
        "description": spec.description,
        "inputSchema": spec.input_schema,
        "annotations": tool.guard.shown(spec.annotations.model_dump(exclude_none=True)),
        "_meta": host_meta(search_hint(tool)),
    }
    if spec.output_schema is not None:
        definition["outputSchema"] = spec.output_schema
    if policy is not None and tool.writes:
        definition["_meta"][APPROVAL_META] = policy
    return definition


def listed(promoted: list[Tool], settings: policies.Settings | None = None) -> list[dict[str, Any]]:
    """An agent's tools/list: the meta-tools, then its promoted tools. Every one loads up front in
    hosts that defer MCP tools, until the list reaches ALWAYS_LOAD_BYTES (half of what makes
    Claude Code defer: 10% of a 200k-token context); tools past that lose their always-load mark
    (keeping their search hint and approval policy), so a host may defer them behind its own search (they stay callable). At the default cap of 20
    a list of real tools is about 6k tokens: all of it loads (bench/host_footprint.py)."""
    definitions = [meta.definition for meta in META_TOOLS.values()]
    size = sum(map(_size, definitions))
    for tool in promoted:
        definition = tool_definition(tool, policies.effective(tool, settings or {}))
        size += _size(definition)
        if size > ALWAYS_LOAD_BYTES:
            definition["_meta"].pop(ALWAYS_LOAD)
        definitions.append(definition)
    return definitions


def _size(definition: dict[str, Any]) -> int:
    return len(jsontext.dumps(definition))


def host_meta(hint: str) -> dict[str, Any]:
    """What hosts that defer MCP tools behind their own tool search read from a tool's `_meta`.
    Claude Code loads a tool up front only when `anthropic/alwaysLoad` is true, and matches a
    deferred one by its `anthropic/searchHint` (its MCP client maps `_meta["anthropic/alwaysLoad"]
    === true` to alwaysLoad and a string `_meta["anthropic/searchHint"]` to searchHint). A working
    set is the agent's chosen few: every tool in it, and every meta-tool, is first-class. A meta-tool
    but find_tool has no hint: loaded up front, it is never searched for, and every byte of the
    meta-tools is in every context."""
    return {ALWAYS_LOAD: True, SEARCH_HINT: hint} if hint else {ALWAYS_LOAD: True}


def search_hint(tool: Tool) -> str:
    """A short phrase a host's tool search can match: the vendor, the name's words, the title."""
    words = [tool.spec.vendor, tool.spec.name.replace("-", " ")]
    if tool.spec.annotations.title:
        words.append(tool.spec.annotations.title)
    return " ".join(words)[:SEARCH_HINT_CHARS]


def split_name(tool_name: str) -> tuple[str, str] | None:
    """`vendor__name` to (vendor, name), or None for a name that is not of that shape."""
    vendor, separator, name = tool_name.partition(SEPARATOR)
    return (vendor, name) if separator and vendor and name else None


def _find_tool(call: Call, raw: Any) -> Outcome:
    args = parse(FindToolArgs, raw)
    found, more, settings = toolbox.search_with_policies(call.state.agent.account_id, args.query, args.limit)
    hits = [compact.hit(call.state, tool, first=index == 0, approval=policies.effective(tool, settings))
            for index, tool in enumerate(found)]
    usage.observe_search(call.state, args.query, [(tool.spec.vendor, tool.spec.name) for tool in found], call.now)
    if not hits:
        return Outcome(structured={
            "hits": [], "more": 0,
            "message": f"No tool in the toolbox matches {args.query!r}. If none exists, author one with acquire.",
        })
    return Outcome(structured={"hits": hits, "more": more})


def _promote(call: Call, raw: Any) -> Outcome:
    args = parse(PromoteArgs, raw)
    # the tool and the policies that can apply to it: one read
    tool, settings = toolbox.resolve_with_policies(call.state.agent.account_id, args.vendor, args.name)
    change = workingset.promote(call.state, args.vendor, args.name, by=PromotedBy.AGENT,
                                actor=call.state.agent.agent_id, now=call.now, tool=tool, pinned=args.pinned)
    assert change.tool is not None
    usage.credit(call.state, args.vendor, args.name, call.now)
    answer: dict[str, Any] = {"size": change.size, "tool": tool_definition(change.tool,
                                                                           policies.effective(change.tool, settings))}
    if args.pinned:
        answer["pinned"] = change.pinned
    return Outcome(structured=answer, list_changed=change.changed)


def _pin(call: Call, raw: Any) -> Outcome:
    ref = parse(ToolRef, raw)
    change = workingset.pin(call.state, ref.vendor, ref.name, cause=Cause.AGENT_ASKED,
                            actor=call.state.agent.agent_id, now=call.now)
    return Outcome(structured={"pinned": True, "pins": change.pins, "pin_limit": change.limit})


def _unpin(call: Call, raw: Any) -> Outcome:
    ref = parse(ToolRef, raw)
    change = workingset.unpin(call.state, ref.vendor, ref.name, cause=Cause.AGENT_ASKED,
                              actor=call.state.agent.agent_id, now=call.now)
    return Outcome(structured={"pinned": False, "pins": change.pins, "pin_limit": change.limit})


def _demote(call: Call, raw: Any) -> Outcome:
    ref = parse(ToolRef, raw)
    change = workingset.demote(call.state, ref.vendor, ref.name, cause=Cause.AGENT_ASKED,
                               actor=call.state.agent.agent_id, now=call.now)
    return Outcome(structured={"size": change.size}, list_changed=change.changed)


def _run_tool(call: Call, raw: Any) -> Outcome:
    args = parse(RunToolArgs, raw)
    outcome = runs.call(call.state, args.vendor, args.name, args.input, dry_run=args.dryRun, now=call.now)
    usage.credit(call.state, args.vendor, args.name, call.now)
    return outcome


def _acquire(call: Call, raw: Any) -> Outcome:
    spec = parse_spec(raw)
    agent_id = call.state.agent.agent_id
    tool = toolbox.acquire(call.state, spec, call.now)
    change = workingset.promote(call.state, spec.vendor, spec.name, by=PromotedBy.PUBLISH, actor=agent_id,
                                now=call.now, tool=tool)
    return Outcome(structured={"vendor": spec.vendor, "name": spec.name, "version": tool.version.version,
                               "size": change.size}, list_changed=change.changed)


def _get_run(call: Call, raw: Any) -> Outcome:
    args = parse(GetRunArgs, raw)
    run = runs.get_for_agent(call.state, args.run_id, call.now)
    answer: dict[str, Any] = {"run_id": run.run_id, "status": run.status}
    if run.status == RunStatus.AWAITING:
        answer["approval_url"] = runs.approval_url(run.run_id)
    if run.result is not None:
        answer["result"] = run.result
    if run.error is not None:
        answer["error"] = run.error.get("error", run.error)
    return Outcome(structured=answer)


_WORKING_SET = {"destructiveHint": False, "idempotentHint": True, "openWorldHint": False}

# What an agent reads in every tools/list: when to call each, and what comes back (bench/host_footprint.py
# holds the eight under 4 KB).
META_TOOLS: dict[str, MetaTool] = {
    tool.name: tool
    for tool in (
        MetaTool(
            "find_tool",
            "Search the whole toolbox; call before acquire. Each hit: vendor, name, promoted, hints, "
            "description, input (* required); the first also its input_schema. Call one with run_tool "
            "or promote it. For a request needing several tools, pass it whole.",
            FindToolArgs,
            {"readOnlyHint": True, "openWorldHint": False},
            _find_tool,
            hint="find search tools",
        ),
        MetaTool(
            "promote",
            "Add a tool to your list as vendor__name. Answers its definition and the list's size.",
            PromoteArgs,
            _WORKING_SET,
            _promote,
        ),
        MetaTool(
            "demote",
            "Remove a tool from your list (find_tool still finds it).",
            ToolRef,
            _WORKING_SET,
            _demote,
        ),
        MetaTool(
            "run_tool",
            "Call a toolbox tool once without promoting it; same validation, approval and answer.",
            RunToolArgs,
            {"openWorldHint": True},
            _run_tool,
        ),
        MetaTool(
            "acquire",
            "Author a tool only when find_tool finds none. It is published and promoted; answers its "
            "version.",
            ToolSpec,
            {"destructiveHint": False, "openWorldHint": False},
            _acquire,
            schema=ACQUIRE_SCHEMA,
        ),
        MetaTool(
            "get_run",
            "A call's status by run_id (say, awaiting a person's approval); its result once done.",
            GetRunArgs,
            {"readOnlyHint": True, "openWorldHint": False},
            _get_run,
        ),
        # last, so the list a client cached before pins existed is still its prefix
        MetaTool(
            "pin",
            "Keep a tool in your list: never demoted for you. At most half your cap.",
            ToolRef,
            _WORKING_SET,
            _pin,
        ),
        MetaTool(
            "unpin",
            "Unpin a tool: it may be demoted again when unused.",
            ToolRef,
            _WORKING_SET,
            _unpin,
        ),
    )
}
