"""The meta-tools every agent sees, and the MCP definition of a promoted tool."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from chalicelib import jsontext, runs, toolbox, workingset
from chalicelib.causes import Cause, PromotedBy
from chalicelib.definitions import Tool, ToolSpec, first_line, parse_spec
from chalicelib.errors import ConnectionNotInScope, ToolUnavailable
from chalicelib.outcomes import Outcome, RunStatus
from chalicelib.store.records import AgentState
from chalicelib.validation import NAME_PATTERN, SEPARATOR, VENDOR_PATTERN, check_tool_name, parse

ALWAYS_LOAD = "anthropic/alwaysLoad"
SEARCH_HINT = "anthropic/searchHint"
SEARCH_HINT_CHARS = 120
ALWAYS_LOAD_BYTES = 40_000  # ~10k tokens at 4 bytes a token: half of Claude Code's deferral threshold
DESCRIPTION_LINE = 200
FIND_LIMIT_DEFAULT = 10
FIND_LIMIT_MAX = 50

INSTRUCTIONS = (
    "Your tool list is a working set drawn from a larger toolbox. To do something you have no "
    "tool for, call find_tool first: a tool it finds is one promote away (promote answers its "
    "definition; run_tool calls it once without promoting). Only when find_tool finds nothing, "
    "author a new tool with acquire. Demote tools you are done with; unused tools are demoted "
    "for you after the agent's idle window. A write tool asks a person on its first call."
)


class FindToolArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    query: str = Field(min_length=1, max_length=500, description="What you want to do, in plain words.")
    limit: int = Field(default=FIND_LIMIT_DEFAULT, ge=1, le=FIND_LIMIT_MAX, description="Most hits to answer.")


class ToolRef(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    vendor: str = Field(pattern=VENDOR_PATTERN, description="The tool's vendor, as find_tool answers it.")
    name: str = Field(pattern=NAME_PATTERN, description="The tool's name, as find_tool answers it.")

    @model_validator(mode="after")
    def _mcp_name(self) -> ToolRef:
        check_tool_name(self.vendor, self.name)
        return self


class PromoteArgs(ToolRef):
    pinned: bool = Field(default=False, description="Also pin it: the idle and cap rules never demote it.")


class RunToolArgs(ToolRef):
    input: dict[str, Any] = Field(default_factory=dict, description="The tool's input, as its schema asks.")
    dryRun: bool = Field(
        default=False, description="Reads reach the vendor; anything else answers a preview and sends nothing."
    )


class GetRunArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    run_id: str = Field(min_length=1, max_length=64, description="The run_id a call answered.")


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
    hint: str = ""  # anthropic/searchHint: what a host's own tool search matches

    @cached_property
    def definition(self) -> dict[str, Any]:
        """The MCP tool definition (built once: schema generation is not free)."""
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        return {"name": self.name, "description": self.description, "inputSchema": schema,
                "annotations": self.annotations, "_meta": host_meta(self.hint)}


def tool_definition(tool: Tool) -> dict[str, Any]:
    """The MCP definition of a promoted tool: `vendor__name` and the newest version's spec with the
    hints Workset enforces (its guard, never looser claims a person has not accepted), marked for
    hosts to load up front (`host_meta`)."""
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
    return definition


def listed(promoted: list[Tool]) -> list[dict[str, Any]]:
    """An agent's tools/list: the meta-tools, then its promoted tools. Every one loads up front in
    hosts that defer MCP tools, until the list reaches ALWAYS_LOAD_BYTES (half of what makes
    Claude Code defer: 10% of a 200k-token context); tools past that carry only their search hint,
    so a host may defer them behind its own search (they stay callable). At the default cap of 20
    a list of real tools is about 6k tokens: all of it loads (bench/host_footprint.py)."""
    definitions = [meta.definition for meta in META_TOOLS.values()]
    size = sum(map(_size, definitions))
    for tool in promoted:
        definition = tool_definition(tool)
        size += _size(definition)
        if size > ALWAYS_LOAD_BYTES:
            definition["_meta"] = {SEARCH_HINT: definition["_meta"][SEARCH_HINT]}
        definitions.append(definition)
    return definitions


def _size(definition: dict[str, Any]) -> int:
    return len(jsontext.dumps(definition))


def host_meta(hint: str) -> dict[str, Any]:
    """What hosts that defer MCP tools behind their own tool search read from a tool's `_meta`.
    Claude Code loads a tool up front only when `anthropic/alwaysLoad` is true, and matches a
    deferred one by its `anthropic/searchHint` (its MCP client maps `_meta["anthropic/alwaysLoad"]
    === true` to alwaysLoad and a string `_meta["anthropic/searchHint"]` to searchHint). A working
    set is the agent's chosen few: every tool in it, and every meta-tool, is first-class."""
    return {ALWAYS_LOAD: True, SEARCH_HINT: hint}


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
    found, more = toolbox.search(call.state.agent.account_id, args.query, args.limit)
    hits = [_hit(call.state, tool) for tool in found]
    if not hits:
        return Outcome(structured={
            "hits": [], "more": 0,
            "message": f"No tool in the toolbox matches {args.query!r}. If none exists, author one with acquire.",
        })
    return Outcome(structured={"hits": hits, "more": more})


def _hit(state: AgentState, tool: Tool) -> dict[str, Any]:
    spec, guard = tool.spec, tool.guard
    promotion = state.promotion(spec.vendor, spec.name)
    hit: dict[str, Any] = {
        "vendor": spec.vendor,
        "name": spec.name,
        "promoted": promotion is not None,
        "readOnlyHint": guard.read_only,  # as Workset enforces them
        "destructiveHint": guard.destructive,
        "description": first_line(spec.description, DESCRIPTION_LINE),
        "input_schema": spec.input_schema,  # enough to run_tool it at once, without a promote
        "searchHint": search_hint(tool),
        "available": True,
    }
    if promotion is not None and promotion.pinned:
        hit["pinned"] = True  # only on pinned hits: a pinned tool is an ordinary promoted one otherwise
    if tool.version.unavailable:
        hit.update(available=False, reason=ToolUnavailable.code, unavailable=tool.version.unavailable)
    elif spec.connection and not state.may_use(spec.connection):
        hit.update(available=False, reason=ConnectionNotInScope.code)
    return hit


def _promote(call: Call, raw: Any) -> Outcome:
    args = parse(PromoteArgs, raw)
    change = workingset.promote(call.state, args.vendor, args.name, by=PromotedBy.AGENT,
                                actor=call.state.agent.agent_id, now=call.now, pinned=args.pinned)
    assert change.tool is not None
    answer: dict[str, Any] = {"size": change.size, "tool": tool_definition(change.tool)}
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
    return runs.call(call.state, args.vendor, args.name, args.input, dry_run=args.dryRun, now=call.now)


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


_WORKING_SET = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}

META_TOOLS: dict[str, MetaTool] = {
    tool.name: tool
    for tool in (
        MetaTool(
            "find_tool",
            "Search the whole toolbox (promoted and demoted tools) by vendor, name and description. "
            "Answers ranked hits with vendor, name, whether each is promoted for you, its hints and its "
            "input schema (enough to call it with run_tool at once), and how many more matched. Pass the "
            "user's whole request when it needs several tools. Call this before acquire.",
            FindToolArgs,
            {"readOnlyHint": True, "openWorldHint": False},
            _find_tool,
            hint="search find discover tools toolbox capability",
        ),
        MetaTool(
            "promote",
            "Add a toolbox tool to your tool list as vendor__name. Answers the list's new size and the "
            "tool's definition, so you can call it through run_tool even before your list refreshes. "
            "pinned: true also pins it (see pin).",
            PromoteArgs,
            _WORKING_SET,
            _promote,
            hint="add tool to my list working set",
        ),
        MetaTool(
            "demote",
            "Take a tool out of your tool list (it stays in the toolbox; find_tool still finds it). "
            "Answers the list's new size.",
            ToolRef,
            _WORKING_SET,
            _demote,
            hint="remove tool from my list working set",
        ),
        MetaTool(
            "run_tool",
            "Call a toolbox tool by vendor and name without adding it to your list: the same input "
            "validation, approval rule and answer as calling it directly. dryRun previews writes.",
            RunToolArgs,
            {"readOnlyHint": False, "openWorldHint": True},
            _run_tool,
            hint="call run use a toolbox tool once",
        ),
        MetaTool(
            "acquire",
            "Author a new tool when find_tool finds nothing: give its vendor, name, description, "
            "input_schema (a JSON Schema object), annotations and the HTTP request it makes. It is "
            "published to the toolbox (or as the next version of your own tool) and promoted for you. "
            "Answers vendor, name, version and your list's new size.",
            ToolSpec,
            {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False, "openWorldHint": False},
            _acquire,
            hint="author create publish new tool http request",
        ),
        MetaTool(
            "get_run",
            "Check a call that waited for a person's approval (or any earlier call) by its run_id: "
            "answers its status and, once finished, its result.",
            GetRunArgs,
            {"readOnlyHint": True, "openWorldHint": False},
            _get_run,
            hint="check run status result approval",
        ),
        # last, so the list a client cached before pins existed is still its prefix
        MetaTool(
            "pin",
            "Pin a tool in your list so it is never demoted for you (unused or over your cap); for the "
            "few tools you always need. At most half your cap may be pinned. Answers pins and pin_limit.",
            ToolRef,
            _WORKING_SET,
            _pin,
            hint="pin keep tool always in my list",
        ),
        MetaTool(
            "unpin",
            "Unpin a tool: it stays in your list, and is demoted for you again when unused. Answers pins "
            "and pin_limit.",
            ToolRef,
            _WORKING_SET,
            _unpin,
            hint="unpin tool let it be demoted",
        ),
    )
}
