"""Time in one shape: aware UTC datetimes inside, ISO 8601 with `Z` at the edges."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

# Two Lambdas' clocks may disagree. A lease written by one is judged by another, so a lease counts
# as held until this long after its end: a run is never taken for abandoned (and its agent's
# tools demoted) because the judge's clock runs ahead by up to this much.
SKEW_ALLOWANCE = timedelta(seconds=90)


def utcnow() -> datetime:
    """The wall clock, in UTC."""
    return datetime.now(UTC)


def iso(moment: datetime | None) -> str | None:
    """`2026-11-30T07:00:00Z` (microseconds kept when present), or None."""
    if moment is None:
        return None
    text = moment.astimezone(UTC).isoformat()
    return text.replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    """Parse an ISO 8601 time; a naive time is taken as UTC."""
    moment = datetime.fromisoformat(text)  # 3.11 reads "Z" as UTC itself
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
