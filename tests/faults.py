"""Faults of AWS, injected where the wire would carry them: between botocore and moto, so they
meet botocore's own retries (a fault for fewer calls than botocore's attempts is hidden by it;
one that lasts longer reaches the app) and the app's handling above them.

    def test_x(faults: Faults) -> None:
        faults.lose_answer("TransactWriteItems")             # applied, but the answer never comes
        faults.fail("TransactWriteItems", times=ALWAYS)      # 500 on every attempt, nothing applied
        faults.cancel("TransactWriteItems", ["ThrottlingError"], times=3)
        faults.fail("Decrypt", service="kms", code="KMSInternalException")
        bodies = faults.watch("TransactWriteItems")          # every body sent from now on

A fault hits the next `times` calls of its operation that `when` accepts (given the request's
JSON body; the predicates below name the app's requests); `faults.seen` counts every call by
(service, operation), faults included.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from moto.core.botocore_stubber import BotocoreStubber, MockRawResponse

ALWAYS = 10**9
PREFIX = {"dynamodb": "com.amazonaws.dynamodb.v20120810#", "kms": "TrentService#", "sqs": "com.amazonaws.sqs#"}
STATUS = {"InternalServerError": 500, "ServiceUnavailable": 503, "KMSInternalException": 500,
          "InternalError": 500}  # everything else answers 400


@dataclass
class Fault:
    service: str
    operation: str
    kind: str  # "lose_answer", "fail" or "cancel"
    times: int
    code: str = "InternalServerError"
    reasons: list[str] = field(default_factory=list)
    when: Callable[[dict[str, Any]], bool] | None = None


@dataclass
class Faults:
    """The faults armed for this test, and what was called."""

    armed: list[Fault] = field(default_factory=list)
    seen: Counter[tuple[str, str]] = field(default_factory=Counter)
    hits: int = 0

    def lose_answer(self, operation: str, *, times: int = 1, service: str = "dynamodb",
                    when: Callable[[dict[str, Any]], bool] | None = None) -> None:
        """The request reaches the service and is applied; its answer is lost (a 500 instead)."""
        self.armed.append(Fault(service, operation, "lose_answer", times, when=when))

    def fail(self, operation: str, *, code: str = "InternalServerError", times: int = ALWAYS,
             service: str = "dynamodb", when: Callable[[dict[str, Any]], bool] | None = None) -> None:
        """The service refuses the request with `code`; nothing is applied."""
        self.armed.append(Fault(service, operation, "fail", times, code=code, when=when))

    def cancel(self, operation: str, reasons: list[str], *, times: int = ALWAYS,
               when: Callable[[dict[str, Any]], bool] | None = None) -> None:
        """DynamoDB cancels the transaction with these per-item reasons (the rest `None`)."""
        self.armed.append(Fault("dynamodb", operation, "cancel", times, code="TransactionCanceledException",
                                reasons=reasons, when=when))

    def clear(self) -> None:
        """Disarm every fault (the outage is over)."""
        self.armed.clear()

    def watch(self, operation: str, *, service: str = "dynamodb") -> list[dict[str, Any]]:
        """Every body of `operation` from now on, as the service receives it (armed first, never
        matching, so it sees the calls the faults armed after it hit too)."""
        bodies: list[dict[str, Any]] = []

        def record(body: dict[str, Any]) -> bool:
            bodies.append(body)
            return False

        self.armed.insert(0, Fault(service, operation, "fail", ALWAYS, when=record))
        return bodies

    def _match(self, service: str, operation: str, body: dict[str, Any]) -> Fault | None:
        for fault in self.armed:
            if (fault.service, fault.operation) == (service, operation) and fault.times > 0 \
                    and (fault.when is None or fault.when(body)):
                fault.times -= 1
                self.hits += 1
                return fault
        return None


def _answer(request: Any, fault: Fault, body: dict[str, Any]) -> AWSResponse:
    error: dict[str, Any] = {"__type": PREFIX[fault.service] + fault.code, "message": f"injected {fault.code}"}
    if fault.kind == "cancel":
        reasons = [{"Code": code, "Message": code} for code in fault.reasons]
        reasons += [{"Code": "None"}] * (len(body.get("TransactItems", [])) - len(reasons))
        error["CancellationReasons"] = reasons
    status = STATUS.get(fault.code, 400) if fault.kind != "lose_answer" else 500
    headers = {"Content-Type": "application/x-amz-json-1.0", "x-amzn-RequestId": "injected"}
    return AWSResponse(request.url, status, headers, MockRawResponse(json.dumps(error)))


def json_body(request: Any) -> dict[str, Any]:
    """The request's JSON body (DynamoDB, KMS and SQS speak JSON), or {}."""
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Iterator[Faults]:
    """Faults between botocore and moto for this test (none armed at first)."""
    state = Faults()
    original = BotocoreStubber.__call__

    def call(self: BotocoreStubber, event_name: str, request: Any, **kwargs: Any) -> AWSResponse | None:
        _, service, operation = (event_name.split(".") + ["", ""])[:3]
        state.seen[(service, operation)] += 1
        body = json_body(request)
        fault = state._match(service, operation, body)
        if fault is None:
            return original(self, event_name, request, **kwargs)
        if fault.kind == "lose_answer":
            original(self, event_name, request, **kwargs)  # applied; the answer goes nowhere
        return _answer(request, fault, body)

    monkeypatch.setattr(BotocoreStubber, "__call__", call)
    yield state


def touches(table_suffix: str) -> Callable[[dict[str, Any]], bool]:
    """`when`: a transaction with an item in the table whose name ends with `table_suffix`."""
    def check(body: dict[str, Any]) -> bool:
        return any(next(iter(item.values())).get("TableName", "").endswith(table_suffix)
                   for item in body.get("TransactItems", []))
    return check


def sets_status(status: str) -> Callable[[dict[str, Any]], bool]:
    """`when`: a transaction that writes `status` into a run (its end)."""
    def check(body: dict[str, Any]) -> bool:
        return f'"{status}"' in json.dumps(body.get("TransactItems", []))
    return check


def puts_into(table_suffix: str) -> Callable[[dict[str, Any]], bool]:
    """`when`: a transaction that puts a new item into the table ending with `table_suffix` (a
    run's start puts the run; its end only updates it)."""
    def check(body: dict[str, Any]) -> bool:
        return any("Put" in item and item["Put"]["TableName"].endswith(table_suffix)
                   for item in body.get("TransactItems", []))
    return check


def demotes_for(agent_id: str) -> Callable[[dict[str, Any]], bool]:
    """`when`: a transaction that deletes one of this agent's promotions (a demotion)."""
    def check(body: dict[str, Any]) -> bool:
        return any("Delete" in item and item["Delete"]["Key"]["agent_id"]["S"] == agent_id
                   and item["Delete"]["Key"]["sk"]["S"].startswith("P#")
                   for item in body.get("TransactItems", []))
    return check


def counts_quota(body: dict[str, Any]) -> bool:
    """`when`: the one-item transaction that adds a publish to the agent's daily quota count."""
    return any(item.get("Update", {}).get("UpdateExpression", "").startswith("ADD")
               and "acquire_count" in item["Update"].get("ExpressionAttributeNames", {}).values()
               for item in body.get("TransactItems", []))


def marks_seen(body: dict[str, Any]) -> bool:
    """`when`: the UpdateItem that records which change an MCP response carried."""
    return "mcp_seen_seq" in body.get("ExpressionAttributeNames", {}).values()


def queries_index(name: str) -> Callable[[dict[str, Any]], bool]:
    """`when`: a Query of the index `name`."""
    return lambda body: body.get("IndexName") == name


def sends_to(queue: str) -> Callable[[dict[str, Any]], bool]:
    """`when`: an SQS send to this queue."""
    return lambda body: body.get("QueueUrl", "").endswith(f"/{queue}")


RUN_START = puts_into("-runs")  # `when`: the transaction that records a run's start
RUN_SUCCEEDS = sets_status("succeeded")  # `when`: the transaction that records a run's success
