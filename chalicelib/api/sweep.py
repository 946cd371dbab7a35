"""Running the sweep now: for an operator, and (with a `now` of their choosing) for tests and the
local stack."""

from __future__ import annotations

from typing import Any

from chalicelib import sweep
from chalicelib.api.common import admin_route, optional_body
from chalicelib.clock import parse_iso, utcnow
from chalicelib.config import settings
from chalicelib.errors import InvalidInput


@admin_route("/v1/sweep", "POST")
def sweep_now(account_id: str) -> dict[str, Any]:
    return sweep.run(_now(optional_body()), account_id=account_id).to_dict()


def _now(body: dict[str, Any]) -> Any:
    if "now" not in body:
        return utcnow()
    if not settings().is_local:
        raise InvalidInput("now: this stage runs the sweep on the wall clock only", field="now")
    try:
        return parse_iso(body["now"])
    except (TypeError, ValueError):
        raise InvalidInput("now: must be an ISO 8601 time", field="now") from None
