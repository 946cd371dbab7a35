"""What a tool call answers: the Outcome of a run (or of a meta-tool), the statuses a run moves
through, and how an Outcome becomes an MCP tool result (`isError: true` for a failed call, never
a JSON-RPC error). Runs, the vendor call and the MCP edge all answer through this module.

A leaf, like `errors`: it imports nothing of the domain or the store, so the store records a
run's status as the same `RunStatus` (a `StrEnum`: stored values and JSON are the plain strings).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from chalicelib.base import jsontext
from chalicelib.base.errors import WorksetError

RUN_ID_META = "io.workset/runId"  # every tool call is a run; get_run and the console know it by this id


class RunStatus(StrEnum):
    """Where a run is in its life (`runs`' docstring draws it)."""

    AWAITING = "awaiting_approval"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DENIED = "denied"
    EXPIRED = "expired"

    @classmethod
    def ended(cls, *, is_error: bool) -> RunStatus:
        """How a run that reached its end (the vendor called or previewed, or refused) ended."""
        return cls.FAILED if is_error else cls.SUCCEEDED


LIVE = (RunStatus.AWAITING, RunStatus.RUNNING)  # a run holding its agent's lease


@dataclass(frozen=True)
class Waiting:
    """A run that waits on a person, as the call that started it knows it (no read needed)."""

    run_id: str
    vendor: str
    name: str
    expires_at: datetime  # when the wait ends (the run's lease)


@dataclass(frozen=True)
class Outcome:
    """A call's answer: `structured` is the tool result's structuredContent; `status` is what
    the run records (`succeeded`, `failed`, `awaiting_approval`)."""

    structured: dict[str, Any]
    is_error: bool = False
    status: RunStatus = RunStatus.SUCCEEDED
    run_id: str | None = None
    list_changed: bool = False  # the call changed the caller's working set
    mcp: bool = False  # `structured` is an MCP server's own tool result (content, structuredContent), passed on
    waiting: Waiting | None = None  # the run, when the call waits on a person


def failure(error: WorksetError) -> Outcome:
    """An error Outcome carrying the error's code and message."""
    return Outcome(structured={"error": error.to_dict()}, is_error=True, status=RunStatus.FAILED)


def tool_result(outcome: Outcome) -> dict[str, Any]:
    """The MCP CallToolResult for an Outcome: an MCP server's own result passed on as it is,
    anything else as structured content that is also text (for clients that read only text; the
    text is always valid UTF-8 JSON, whatever a vendor answered); the run's id in `_meta`."""
    if outcome.mcp:
        result = {**outcome.structured, "isError": outcome.is_error}
    else:
        result = {
            "content": [{"type": "text", "text": jsontext.dumps(outcome.structured)}],
            "structuredContent": outcome.structured,
            "isError": outcome.is_error,
        }
    if outcome.run_id is not None:
        result["_meta"] = {RUN_ID_META: outcome.run_id}
    return result
