"""The account page: the keyless hosts agents may author tools for, ending every console
session of the account, and what find_tool learned from the account's use (with its reset)."""

from __future__ import annotations

import re

from chalice import Response

from chalicelib.base.errors import InvalidInput
from chalicelib.catalog import usage
from chalicelib.console.common import Ctx, action, page, redirect
from chalicelib.identity import accounts, sessions

SEPARATORS = re.compile(r"[\s,]+")  # one host per line, or comma (or space) separated
LEARNED_SHOWN = 10  # pairs listed on the page (GET /v1/account/search-memory pages through all)


@page("/console/account")
def account_page(ctx: Ctx) -> Response:
    return _page(ctx, typed="\n".join(accounts.allowed_hosts(ctx.account_id)))


@action("/console/account/allowed-hosts")
def save_allowed_hosts(ctx: Ctx) -> Response:
    typed = ctx.form.get("allowed_hosts", "")
    try:
        accounts.set_allowed_hosts(ctx.account_id, {"allowed_hosts": _entries(typed)})
    except InvalidInput as error:
        return _page(ctx, 400, typed=typed, error=error.message)
    return redirect("/console/account", done="saved")


@action("/console/account/search-memory/reset")
def reset_search_memory(ctx: Ctx) -> Response:
    usage.forget(ctx.account_id)
    return redirect("/console/account", done="forgotten")


@action("/console/account/sign-out-everywhere")
def sign_out_everywhere(ctx: Ctx) -> Response:
    return redirect("/console/sign-in", cookie=sessions.sign_out_everywhere(ctx.session))


def _page(ctx: Ctx, status: int = 200, *, typed: str, error: str | None = None) -> Response:
    learned, count = usage.learned(ctx.account_id, limit=LEARNED_SHOWN, cursor=None)
    return ctx.render("account.html", status, typed=typed, error=error, done=ctx.params.get("done"),
                      account_id=ctx.account_id, learned=learned.items, learned_count=count,
                      learned_limit=usage.MEMORY_PAIRS)


def _entries(typed: str) -> list[str]:
    """The entries of the textarea, in order, blanks dropped (the domain checks each one)."""
    return [entry for entry in SEPARATORS.split(typed) if entry]
