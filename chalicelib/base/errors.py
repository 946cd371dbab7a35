"""Domain errors. Each carries its machine-readable code and the HTTP status that fits it.

The edges map them in one place each: the admin API to `{"error": {...}}` bodies, the MCP
layer to tool results with `isError: true`.
"""

from __future__ import annotations


class WorksetError(Exception):
    """Base of every error a caller may see; `code` is stable, `message` is for people."""

    code = "error"
    status = 500
    vendor_acted: bool | None = None  # said on errors of a call where the caller must know

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def to_dict(self) -> dict[str, str | bool]:
        """The `{"code", "message", "field"?, "vendor_acted"?}` body shared by the API and tool
        results."""
        body: dict[str, str | bool] = {"code": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        if self.vendor_acted is not None:
            body["vendor_acted"] = self.vendor_acted
        return body


class InvalidInput(WorksetError):
    """The caller sent something malformed or out of range; nothing was changed."""

    code = "invalid_input"
    status = 400


class TooLarge(InvalidInput):
    """The body is larger than this deployment accepts."""

    code = "too_large"
    status = 413


class Unauthorized(WorksetError):
    """No token, or a token that is not valid."""

    code = "unauthorized"
    status = 401


class NotFound(WorksetError):
    """An unknown id, or one that belongs to another account."""

    code = "not_found"
    status = 404


class ToolNotFound(NotFound):
    """No tool with that vendor and name in the account's toolbox."""

    code = "tool_not_found"

    def __init__(self, vendor: str, name: str) -> None:
        super().__init__(f"no tool {vendor}/{name} in this toolbox; find_tool lists what exists")


class ToolUnavailable(WorksetError):
    """The tool is still in the toolbox, but its source no longer offers it (an imported
    operation left the document, or an MCP server stopped listing the tool)."""

    code = "tool_unavailable"
    status = 410

    def __init__(self, vendor: str, name: str, reason: str) -> None:
        super().__init__(f"{vendor}/{name} cannot be called: {reason}; find_tool lists what can")


class Conflict(WorksetError):
    """The write lost a race or contradicts the current state."""

    code = "conflict"
    status = 409


class NotPromoted(Conflict):
    """The tool is in the toolbox but not in the agent's working set (pinning needs a promoted
    tool: promote it first, or promote it with `pinned: true`)."""

    code = "not_promoted"

    def __init__(self, vendor: str, name: str) -> None:
        super().__init__(f"{vendor}/{name} is not in this agent's working set; promote it first "
                         "(promote with pinned: true does both)")


class PinLimit(Conflict):
    """The agent already has as many pinned tools as its cap allows (`workingset.pin_limit`)."""

    code = "pin_limit"

    def __init__(self, limit: int) -> None:
        super().__init__(f"this agent may pin at most {limit} tool{'' if limit == 1 else 's'} (half its cap, at "
                         "least one) and has that many pinned; unpin one first")
        self.limit = limit


class VendorError(WorksetError):
    """The vendor answered with a failure, or did not answer in time."""

    code = "vendor_error"
    status = 502


class VendorTimeout(VendorError):
    """The vendor did not answer within the timeout."""

    code = "vendor_timeout"


class ForbiddenDestination(WorksetError):
    """A URL that resolves to an address Workset refuses to call (private, loopback, metadata)."""

    code = "forbidden_destination"
    status = 400


class Forbidden(WorksetError):
    """The caller may not do this (the refusal names who may)."""

    code = "forbidden"
    status = 403


class ConnectionNotInScope(Forbidden):
    """The agent's connection scope does not include the tool's connection."""

    code = "connection_not_in_scope"


class AgentRevoked(Forbidden):
    """A person revoked the agent: nothing it asked for runs any more, even a call that was
    waiting on a person when it was revoked."""

    code = "agent_revoked"


class HostNotAllowed(Forbidden):
    """An agent-authored tool targets a host no person allowed (a connection's hosts, or the
    account's keyless allow list)."""

    code = "host_not_allowed"


class ToolDenied(Forbidden):
    """A person denied this agent's calls of this tool (as it requests now); the denial stands
    until a person withdraws it."""

    code = "tool_denied"


class ConnectionNeedsReconnect(WorksetError):
    """The vendor no longer takes the connection's credential (or a person never connected it):
    a person must reconnect it in the console; the message names the page. The vendor was not
    called."""

    code = "connection_needs_reconnect"
    status = 409
    vendor_acted = False


class QuotaExceeded(WorksetError):
    """The agent used up a quota (for example its daily acquire allowance)."""

    code = "quota_exceeded"
    status = 429


class ListenLimit(WorksetError):
    """The account already holds as many subscriptions/listen requests as it may at once
    (WORKSET_MAX_LISTENS_PER_ACCOUNT): listen again later."""

    code = "listen_limit"
    status = 429


class Busy(WorksetError):
    """The store kept refusing a write for transient reasons (throttling, a conflicting
    transaction) past the retry budget; nothing was written, unless `maybe_written`: an attempt's
    answer left its outcome unknown (a transaction still in progress, an internal error), and the
    write may yet have been made. Try again shortly."""

    code = "busy"
    status = 503

    def __init__(self, message: str, *, field: str | None = None, maybe_written: bool = False) -> None:
        super().__init__(message, field=field)
        self.maybe_written = maybe_written


class StoreUnavailable(Busy):
    """A call could not be recorded as a run (DynamoDB failing past every retry), so the vendor
    was not called. Try again shortly."""

    code = "store_unavailable"
    vendor_acted = False


class CredentialUnavailable(Busy):
    """The connection's secret could not be decrypted now (KMS failing), so the vendor was not
    called. Try again shortly."""

    code = "credential_unavailable"
    vendor_acted = False


class OutcomeNotRecorded(WorksetError):
    """The vendor was called, but neither the store nor the queue would take the run's end. The
    answer carries what the vendor said; calling again may act twice."""

    code = "outcome_not_recorded"
    status = 503
    vendor_acted = True


class InternalError(WorksetError):
    """Something failed inside Workset; the request and run ids are logged with the cause."""

    code = "internal_error"
    status = 500
