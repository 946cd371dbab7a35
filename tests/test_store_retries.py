"""Transactions DynamoDB cancels for transient reasons (throttling, a conflicting transaction) are
sent again, with one idempotency token for every attempt, within a bounded budget; then the
caller gets a clean `busy` error and nothing was written. Faults are injected below pynamodb, at
the botocore client, as DynamoDB answers them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import botocore.exceptions
import pytest

from chalicelib.store import base
from tests.conftest import Admin, Mcp, tool_spec


@dataclass
class Faults:
    """Cancel the next `times` TransactWriteItems calls with these per-item reasons."""

    reasons: list[str] = field(default_factory=list)
    times: int = 0
    tokens: list[str] = field(default_factory=list)
    attempts: int = 0


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Iterator[Faults]:
    state = Faults()
    client = base.connection().client
    original = client._make_api_call
    monkeypatch.setattr(base, "BACKOFF_BASE_SECONDS", 0.001)  # the budget's shape, without its wait

    def make_api_call(operation: str, params: dict[str, Any]) -> Any:
        if operation != "TransactWriteItems":
            return original(operation, params)
        state.attempts += 1
        state.tokens.append(params.get("ClientRequestToken"))
        if state.times > 0:
            state.times -= 1
            reasons = [{"Code": code, "Message": code} for code in state.reasons]
            reasons += [{"Code": "None"}] * (len(params["TransactItems"]) - len(reasons))
            raise botocore.exceptions.ClientError(
                {"Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
                 "CancellationReasons": reasons}, operation)
        return original(operation, params)

    monkeypatch.setattr(client, "_make_api_call", make_api_call)
    yield state


def _state(admin: Admin) -> tuple[int, int, int]:
    agent_id = admin.call("GET", "/v1/agents").json_body["items"][0]["id"]
    size = admin.call("GET", f"/v1/agents/{agent_id}").json_body["size"]
    promotions = len(admin.call("GET", f"/v1/agents/{agent_id}/working-set").json_body["items"])
    events = len(admin.call("GET", f"/v1/agents/{agent_id}/history").json_body["items"])
    return size, promotions, events


@pytest.mark.parametrize("reason", ["TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"])
def test_a_transient_cancellation_is_sent_again_under_the_same_token(admin: Admin, mcp: Mcp, faults: Faults,
                                                                    reason: str) -> None:
    # GIVEN a tool, and DynamoDB cancelling the next two transactions for a transient reason
    admin.publish()
    faults.reasons, faults.times, faults.attempts, faults.tokens = [reason], 2, 0, []
    # WHEN the agent promotes it
    answer = mcp.call("promote", {"vendor": "unleashed", "name": "list-sales-orders"})
    # THEN the third attempt commits, every attempt carried one token, and the books agree
    assert answer["structuredContent"]["size"] == 1
    assert faults.attempts == 3 and len(set(faults.tokens)) == 1 and faults.tokens[0]
    assert _state(admin) == (1, 1, 1)


def test_a_persistent_cancellation_is_a_clean_busy_error_and_writes_nothing(admin: Admin, mcp: Mcp,
                                                                           faults: Faults) -> None:
    admin.publish()
    faults.reasons, faults.times, faults.attempts = ["ThrottlingError"], 100, 0
    answer = mcp.call("promote", {"vendor": "unleashed", "name": "list-sales-orders"})
    assert answer["isError"] is True and answer["structuredContent"]["error"]["code"] == "busy"
    assert faults.attempts == base.ATTEMPTS
    faults.times = 0
    assert _state(admin) == (0, 0, 0)


def test_the_admin_api_answers_busy_with_503(admin: Admin, faults: Faults) -> None:
    faults.reasons, faults.times = ["TransactionConflict"], 100
    response = admin.call("POST", "/v1/tools", tool_spec())
    assert response.status_code == 503 and response.json_body["error"]["code"] == "busy"
    faults.times = 0
    assert admin.call("GET", "/v1/tools").json_body["items"] == []


def test_a_failed_condition_is_not_retried(admin: Admin, mcp: Mcp, faults: Faults) -> None:
    # GIVEN a promoted tool: promoting it again fails its condition (alongside a conflict)
    admin.publish()
    mcp.call("promote", {"vendor": "unleashed", "name": "list-sales-orders"})
    faults.reasons, faults.times, faults.attempts = ["ConditionalCheckFailed", "TransactionConflict"], 1, 0
    from chalicelib.agents import workingset
    from chalicelib.base.causes import PromotedBy
    from chalicelib.base.clock import utcnow
    from chalicelib.identity import accounts

    agent_id = admin.call("GET", "/v1/agents").json_body["items"][0]["id"]
    account_id = accounts.authenticate_admin(admin.token)
    state = accounts.get_state(account_id, agent_id)
    stale = type(state)(**{**state.__dict__, "promotions": ()})  # as read before the first promote
    change = workingset.promote(stale, "unleashed", "list-sales-orders", by=PromotedBy.AGENT, actor="x",
                                now=utcnow())
    # THEN one attempt, and the promote is the no-op it is
    assert faults.attempts == 1 and change.changed is False
    assert _state(admin) == (1, 1, 1)
