"""Importing an OpenAPI document: the form (the document pasted, uploaded or at a URL), a check
that shows what publishing would do to every operation (and whether the vendor's day has room
for its new versions), and publishing what was checked.

Publishing re-sends the form with a digest of the checked inputs: inputs changed after the check
are checked again, not published, so a person only ever publishes what they have seen."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from chalice import Response

from chalicelib.base.errors import WorksetError
from chalicelib.catalog import imports
from chalicelib.catalog.imports import Report
from chalicelib.console.common import Ctx, action, active_connections, page
from chalicelib.identity import accounts

FIELDS = ("vendor", "document", "url", "server", "connection", "include", "exclude")
ENTRIES = re.compile(r"[,\r\n]+")  # include/exclude: comma or line separated (a tag may hold spaces)


@page("/console/import")
def import_page(ctx: Ctx) -> Response:
    return _page(ctx, values=dict.fromkeys(FIELDS, ""))


@action("/console/import")
def import_document(ctx: Ctx) -> Response:
    values = {name: ctx.form.get(name, "") for name in FIELDS}
    payload = _payload(values)
    checked = _digest(payload)
    publish = ctx.form.get("step") == "publish" and ctx.form.get("checked") == checked
    try:
        report = imports.import_openapi(ctx.account_id, {**payload, "dry_run": not publish}, accounts.ADMIN, ctx.now)
    except WorksetError as error:  # the form again, as typed, with the reason: nothing was stored
        return _page(ctx, error.status, values=values, error=error.message)
    changed = ctx.form.get("step") == "publish" and not publish
    return _page(ctx, values=values, report=report, checked=checked, changed=changed)


def _page(ctx: Ctx, status: int = 200, *, values: dict[str, str], report: Report | None = None,
          checked: str = "", changed: bool = False, error: str | None = None) -> Response:
    return ctx.render("import.html", status, values=values, report=report, checked=checked, changed=changed,
                      error=error, connections=active_connections(ctx.account_id),
                      day_cap=imports.MAX_VERSIONS_PER_DAY)


def _payload(values: dict[str, str]) -> dict[str, Any]:
    """The admin API's body from the form: blank fields left out (so the domain says which of
    document and url is missing), the document as typed."""
    payload: dict[str, Any] = {"vendor": values["vendor"].strip(), "include": _entries(values["include"]),
                               "exclude": _entries(values["exclude"])}
    if values["document"].strip():
        payload["document"] = values["document"]
    for name in ("url", "server", "connection"):
        if values[name].strip():
            payload[name] = values[name].strip()
    return payload


def _entries(typed: str) -> list[str]:
    return [entry.strip() for entry in ENTRIES.split(typed) if entry.strip()]


def _digest(payload: dict[str, Any]) -> str:
    """What the check saw, in a hidden field: Publish publishes only the same inputs."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
