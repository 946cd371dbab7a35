"""The toolbox: every tool with its hints, versions and the agents that have it promoted; search
with find_tool's ranking; one tool's versions, each viewable, and the Accept form for a newest
version's looser hints."""

from __future__ import annotations

from chalice import Response

from chalicelib.agents import workingset
from chalicelib.base.errors import InvalidInput, NotFound
from chalicelib.calls import policies
from chalicelib.catalog import toolbox
from chalicelib.console import activity, charts
from chalicelib.console.common import PAGE_SIZE, Ctx, action, agent_names, page, redirect, whole_toolbox
from chalicelib.store.records import ToolVersion

SEARCH_LIMIT = 50
POLICY_EVENTS = 50  # a tool's policy changes shown on its page; older ones a link away


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
    pictures = []
    if not query and not ctx.params.get("cursor"):  # the first page of the toolbox shows its use
        used = activity.toolbox_activity(ctx.account_id, whole_toolbox(ctx.account_id), ctx.now)
        pictures = [charts.toolbox_calls(used), charts.spared(used)]
    return ctx.render("tools.html", heads=heads, query=query, next_cursor=next_cursor, pictures=pictures,
                      promoted_for=_promoted_for(ctx.account_id, heads), names=agent_names(ctx.account_id))


@page("/console/tools/{vendor}/{name}")
def tool_page(ctx: Ctx, vendor: str, name: str) -> Response:
    versions = toolbox.versions(ctx.account_id, vendor, name)
    wanted = ctx.params.get("version", "")
    shown = next((v for v in versions if str(v.version) == wanted), None) if wanted else versions[-1]
    if shown is None:
        raise NotFound(f"{vendor}/{name} has no version {wanted}")
    head = toolbox.resolve(ctx.account_id, vendor, name)  # the newest, whether it is unavailable, its guard
    settings = policies.settings_for(ctx.account_id, [head])
    changes = policies.tool_history(ctx.account_id, vendor, name, limit=POLICY_EVENTS,
                                    cursor=ctx.params.get("changes") or None)
    return ctx.render("tool.html", vendor=vendor, name=name, versions=versions, shown=shown, head=head.version,
                      newest=head, promoted_for=_promoted_for(ctx.account_id, [shown]),
                      names=agent_names(ctx.account_id), done=ctx.params.get("done"),
                      policy=policies.effective(head, settings), policy_default=policies.default(head),
                      own_policy=settings.get(head.key), vendor_policy=settings.get((vendor, None)),
                      policy_changes=changes.items, older_changes=changes.next,
                      changes_cursor=ctx.params.get("changes"))


@action("/console/tools/{vendor}/{name}/approval-policy")
def set_policy(ctx: Ctx, vendor: str, name: str) -> Response:
    """A person sets the tool's approval policy, or the account's default for the vendor's tools
    (`scope` vendor); `default` clears it."""
    chosen = ctx.form.get("policy", "")
    policy = None if chosen == "default" else chosen
    scope = ctx.form.get("scope", "tool")
    if scope not in ("tool", "vendor"):
        raise InvalidInput("scope: tool or vendor", field="scope")
    policies.set_policy(ctx.account_id, vendor, name if scope == "tool" else None, policy, ctx.session.actor,
                        ctx.now)
    return redirect(f"/console/tools/{vendor}/{name}", done="policy-set")


@action("/console/tools/{vendor}/{name}/accept-annotations")
def accept_annotations(ctx: Ctx, vendor: str, name: str) -> Response:
    """The person accepts the hints of the version the page showed them (a newer one is a conflict)."""
    version = ctx.form.get("version", "")
    if not version.isascii() or not version.isdigit() or len(version) > 9:
        raise InvalidInput("version: the form did not say which version you reviewed", field="version")
    _, changed = toolbox.accept_annotations(ctx.account_id, vendor, name, int(version), ctx.session.actor, ctx.now)
    return redirect(f"/console/tools/{vendor}/{name}", done="accepted" if changed else "nothing-pending")


def _promoted_for(account_id: str, heads: list[ToolVersion]) -> dict[tuple[str, str], list[str]]:
    """(vendor, name) -> ids of the agents that have the tool promoted now."""
    return {(head.vendor, head.name): workingset.agents_with_tool(account_id, head.vendor, head.name)
            for head in heads}
