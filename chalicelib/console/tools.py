"""The toolbox: every tool with its hints, versions and the agents that have it promoted; search
with find_tool's ranking; one tool's versions, each viewable."""

from __future__ import annotations

from chalice import Response

from chalicelib import toolbox, workingset
from chalicelib.console.common import PAGE_SIZE, Ctx, agent_names, page
from chalicelib.errors import NotFound
from chalicelib.store.records import ToolVersion

SEARCH_LIMIT = 50


@page("/console/tools")
def tools(ctx: Ctx) -> Response:
    query = ctx.params.get("q", "").strip()
    next_cursor = None
    if query:
        found, _ = toolbox.search(ctx.account_id, query, SEARCH_LIMIT)
        heads = [tool.version for tool in found]
    else:
        listing = toolbox.page(ctx.account_id, limit=PAGE_SIZE, cursor=ctx.params.get("cursor"))
        heads, next_cursor = listing.items, listing.next
    return ctx.render("tools.html", heads=heads, query=query, next_cursor=next_cursor,
                      promoted_for=_promoted_for(ctx.account_id, heads), names=agent_names(ctx.account_id))


@page("/console/tools/{vendor}/{name}")
def tool_page(ctx: Ctx, vendor: str, name: str) -> Response:
    versions = toolbox.versions(ctx.account_id, vendor, name)
    wanted = ctx.params.get("version", "")
    shown = next((v for v in versions if str(v.version) == wanted), None) if wanted else versions[-1]
    if shown is None:
        raise NotFound(f"{vendor}/{name} has no version {wanted}")
    head = toolbox.resolve(ctx.account_id, vendor, name).version  # the newest, and whether it is unavailable
    return ctx.render("tool.html", vendor=vendor, name=name, versions=versions, shown=shown, head=head,
                      promoted_for=_promoted_for(ctx.account_id, [shown]), names=agent_names(ctx.account_id))


def _promoted_for(account_id: str, heads: list[ToolVersion]) -> dict[tuple[str, str], list[str]]:
    """(vendor, name) -> ids of the agents that have the tool promoted now."""
    return {(head.vendor, head.name): workingset.agents_with_tool(account_id, head.vendor, head.name)
            for head in heads}
