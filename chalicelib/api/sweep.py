"""Running the sweep now: for an operator, and (with a `now` of their choosing) for tests and the
local stack."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from chalicelib.agents import sweep
from chalicelib.api.common import admin_route, optional_body
from chalicelib.base.clock import parse_iso, utcnow
from chalicelib.base.config import settings
from chalicelib.base.errors import InvalidInput

# a century either way of the chosen `now` must still be a date
_EARLIEST = datetime.min.replace(tzinfo=UTC) + timedelta(days=36525)
_LATEST = datetime.max.replace(tzinfo=UTC) - timedelta(days=36525)


@admin_route("/v1/sweep", "POST")
def sweep_now(account_id: str) -> dict[str, Any]:
    return sweep.run(_now(optional_body()), account_id=account_id).to_dict()


def _now(body: dict[str, Any]) -> datetime:
    if "now" not in body:
        return utcnow()
    if not settings().is_local:
        raise InvalidInput("now: this stage runs the sweep on the wall clock only", field="now")
    bad = InvalidInput("now: must be an ISO 8601 time", field="now")
    if not isinstance(body["now"], str):  # parse_iso(5) would be an AttributeError
        raise bad
    try:
        moment = parse_iso(body["now"]).astimezone(UTC)
    except (ValueError, OverflowError):  # "9999-12-31T23:59:59-01:00" parses, then overflows
        raise bad from None
    if not _EARLIEST <= moment <= _LATEST:  # the rule subtracts idle spans from it
        raise bad
    return moment
