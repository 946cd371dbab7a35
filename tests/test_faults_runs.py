"""No run is lost to a fault of DynamoDB, SQS or KMS around a call (issue 11, item 1): not its
start, nor its end (recorded from the work queue, or expired by the sweep), nor an approval's, nor
a credential KMS cannot decrypt, nor a Lambda that died mid-run. Each test checks what the caller
sees, then the run, the agent's leases and the queues. Faults: tests/faults.py.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.agents import sweep
from chalicelib.base.clock import SKEW_ALLOWANCE, utcnow
from chalicelib.base.config import settings
from chalicelib.base.errors import Busy
from tests.books import (
    ANSWER,
    FIRST_CLASS,
    READ,
    agent_state,
    call_write,
    fast_backoff,  # noqa: F401 - fixture
    fetch_run,
    finished_runs,
    hooked_fixture,  # noqa: F401 - fixture `hooked`
    lease_ends_at,
    publish_read,
    publish_with_connection,
    run_statuses,
    sweep_at,
    take_bodies,
    work,
)
from tests.conftest import Admin, Mcp, Vendor, log_lines
from tests.faults import RUN_START, RUN_SUCCEEDS, Faults, sends_to
from tests.test_observability import metrics

RUN_ID_META = "io.workset/runId"
SECOND = timedelta(seconds=1)

# The end of a run, refused on every attempt three ways: a 500 (botocore retries it, then the app
# does), and two cancellations botocore never retries (the app does, then gives up).
END_FAILS = pytest.mark.parametrize("fault", ["InternalServerError", "TransactionConflict", "ThrottlingError"])


def _refuse(faults: Faults, fault: str, when: Callable[[dict[str, Any]], bool]) -> None:
    """The transaction `when` picks, refused on every attempt: a 500, or cancelled for `fault`."""
    if fault == "InternalServerError":
        faults.fail("TransactWriteItems", code=fault, when=when)
    else:
        faults.cancel("TransactWriteItems", [fault], when=when)


def _error(result: dict[str, Any]) -> dict[str, Any]:
    assert result["isError"] is True, result
    return result["structuredContent"]["error"]


@END_FAILS
@pytest.mark.parametrize("caller", ["promoted", "run_tool"])
def test_a_run_whose_end_the_store_refuses_is_recorded_from_the_work_queue(
    admin: Admin, mcp: Mcp, agent: dict[str, Any], vendor: Vendor, client: Client, faults: Faults,
    fault: str, caller: str,
) -> None:
    # GIVEN a promoted read tool, and the store refusing every attempt to record a run's end
    publish_read(admin, vendor)
    mcp.call("promote", READ)
    _refuse(faults, fault, RUN_SUCCEEDS)
    # WHEN the agent calls it (by its own name, or through run_tool)
    if caller == "promoted":
        result = mcp.call(FIRST_CLASS, {"customer": "acme"})
    else:
        result = mcp.call("run_tool", {**READ, "input": {"customer": "acme"}})
    # THEN it gets the vendor's answer, from one request
    assert faults.hits > 0
    assert result["isError"] is False and result["structuredContent"] == ANSWER
    assert len(vendor.received) == 1
    # AND the run is still running, holding its lease, and its end waits on the work queue
    run_id = result["_meta"][RUN_ID_META]
    assert fetch_run(admin, run_id)["status"] == "running"
    assert list(agent_state(agent["id"]).leases) == [run_id]
    [deferred] = take_bodies(settings().sweep_queue)
    assert (deferred["type"], deferred["run_id"], deferred["status"], deferred["outcome"]) == (
        "run_end", run_id, "succeeded", ANSWER)
    # WHEN the worker handles the message while the store still refuses
    with pytest.raises(Busy):
        work(client, [deferred])
    # THEN it raises (SQS will hand the message out again), and the run is still running
    assert fetch_run(admin, run_id)["status"] == "running"
    # WHEN the outage is over and SQS hands the message out again
    faults.clear()
    work(client, [deferred])
    # THEN the run succeeded with the vendor's answer, the lease is gone, and nothing was sent again
    ended = fetch_run(admin, run_id)
    assert (ended["status"], ended["result"], ended["error"]) == ("succeeded", ANSWER, None)
    assert agent_state(agent["id"]).leases == {}
    assert run_statuses(admin, agent["id"]) == ["succeeded"]
    assert len(vendor.received) == 1
    # AND a duplicate delivery of the message changes nothing
    work(client, [deferred])
    assert fetch_run(admin, run_id) == ended


def test_a_run_whose_end_nothing_will_record_tells_the_caller_the_vendor_acted_and_expires(
    admin: Admin, mcp: Mcp, agent: dict[str, Any], vendor: Vendor, faults: Faults,
) -> None:
    # GIVEN a promoted read tool, the store refusing every run's end, and SQS refusing every send
    publish_read(admin, vendor)
    mcp.call("promote", READ)
    _refuse(faults, "InternalServerError", RUN_SUCCEEDS)
    faults.fail("SendMessageBatch", service="sqs", code="InternalError")
    # WHEN the agent calls it
    result = mcp.call(FIRST_CLASS, {"customer": "acme"})
    # THEN it is told the outcome was not recorded, that the vendor acted, and what the vendor said
    error = _error(result)
    assert (error["code"], error["vendor_acted"]) == ("outcome_not_recorded", True)
    assert result["structuredContent"]["outcome"] == ANSWER
    assert len(vendor.received) == 1
    assert faults.seen[("sqs", "SendMessageBatch")] > 0
    # AND the run is running with its lease, and nothing waits on the work queue
    run_id = result["_meta"][RUN_ID_META]
    assert fetch_run(admin, run_id)["status"] == "running"
    assert list(agent_state(agent["id"]).leases) == [run_id]
    faults.clear()
    assert take_bodies(settings().sweep_queue) == []
    # WHEN the sweep runs once the lease has ended (but within the skew allowance), then after it
    lease_end = lease_ends_at(admin, run_id)
    early = sweep_at(admin, lease_end + SECOND)
    late = sweep_at(admin, lease_end + SKEW_ALLOWANCE + SECOND)
    # THEN only the later sweep expires the run, and that frees the lease
    assert early["runs"]["expired"] == 0
    assert late["runs"] == {"expired": 1, "announced": 0, "failed": 0}
    assert fetch_run(admin, run_id)["status"] == "expired"
    assert agent_state(agent["id"]).leases == {}
    assert sweep_at(admin, lease_end + 2 * SKEW_ALLOWANCE)["runs"]["expired"] == 0


def test_a_deferred_end_handled_after_the_sweep_expired_the_run_records_the_true_end(
    admin: Admin, mcp: Mcp, agent: dict[str, Any], vendor: Vendor, client: Client, faults: Faults,
) -> None:
    # GIVEN a call whose end the store refused, so it waits on the work queue
    publish_read(admin, vendor)
    _refuse(faults, "TransactionConflict", RUN_SUCCEEDS)
    result = mcp.call("run_tool", {**READ, "input": {"customer": "acme"}})
    run_id = result["_meta"][RUN_ID_META]
    [deferred] = take_bodies(settings().sweep_queue)
    faults.clear()
    # AND a sweep that expired the run before the worker got to the message
    assert sweep_at(admin, lease_ends_at(admin, run_id) + SKEW_ALLOWANCE + SECOND)["runs"]["expired"] == 1
    assert fetch_run(admin, run_id)["status"] == "expired"
    # WHEN the worker handles the message
    work(client, [deferred])
    # THEN the run shows how it really ended, and no lease is left
    ended = fetch_run(admin, run_id)
    assert (ended["status"], ended["result"]) == ("succeeded", ANSWER)
    assert agent_state(agent["id"]).leases == {}
    assert len(vendor.received) == 1


def test_a_call_whose_secret_kms_cannot_decrypt_fails_cleanly_before_the_vendor(
    admin: Admin, mcp: Mcp, agent: dict[str, Any], vendor: Vendor, faults: Faults,
) -> None:
    # GIVEN a promoted tool with a connection, and KMS failing every Decrypt
    publish_with_connection(admin, vendor)
    mcp.call("promote", READ)
    faults.fail("Decrypt", service="kms", code="KMSInternalException")
    # WHEN the agent calls it
    result = mcp.call(FIRST_CLASS, {"customer": "acme"})
    # THEN it is told the credential is unavailable and that the vendor did not act
    assert faults.hits > 0
    error = _error(result)
    assert (error["code"], error["vendor_acted"]) == ("credential_unavailable", False)
    assert vendor.received == []
    # AND the run ended failed with that error, and no lease is left
    run = fetch_run(admin, result["_meta"][RUN_ID_META])
    assert run["status"] == "failed" and run["error"]["error"]["code"] == "credential_unavailable"
    assert agent_state(agent["id"]).leases == {}


@pytest.mark.parametrize("fault", ["InternalServerError", "TransactionConflict"])
def test_a_call_whose_start_the_store_refuses_is_not_sent(admin: Admin, mcp: Mcp, agent: dict[str, Any],
                                                          vendor: Vendor, faults: Faults, fault: str) -> None:
    # GIVEN a promoted read tool, and the store refusing every attempt to record a run's start
    publish_read(admin, vendor)
    mcp.call("promote", READ)
    _refuse(faults, fault, RUN_START)
    # WHEN the agent calls it
    result = mcp.call(FIRST_CLASS, {"customer": "acme"})
    # THEN it is told the store is unavailable and that the vendor did not act, which it did not
    assert faults.hits > 0
    error = _error(result)
    assert (error["code"], error["vendor_acted"]) == ("store_unavailable", False)
    assert vendor.received == []
    # AND no run was recorded, no lease taken, and the use was not counted
    assert run_statuses(admin, agent["id"]) == []
    state = agent_state(agent["id"])
    assert (state.leases, state.lease_rev) == ({}, 0)
    promotion = state.promotion(*READ.values())
    assert promotion is not None and promotion.last_used_at is None
    # AND once the store is back, the same call runs
    faults.clear()
    assert mcp.call(FIRST_CLASS, {"customer": "acme"})["structuredContent"] == ANSWER
    assert run_statuses(admin, agent["id"]) == ["succeeded"]


@pytest.mark.parametrize("step", ["run start", "run end", "KMS decrypt"])
def test_one_fault_at_a_step_of_a_call_is_hidden_by_botocores_retries(admin: Admin, mcp: Mcp,
                                                                      agent: dict[str, Any], vendor: Vendor,
                                                                      faults: Faults, step: str) -> None:
    # GIVEN a promoted tool with a connection, and one 500 at one step of its call
    secret = publish_with_connection(admin, vendor)
    mcp.call("promote", READ)
    if step == "KMS decrypt":
        faults.fail("Decrypt", service="kms", code="KMSInternalException", times=1)
    else:
        when = RUN_START if step == "run start" else RUN_SUCCEEDS
        faults.fail("TransactWriteItems", times=1, when=when)
    # WHEN the agent calls it
    result = mcp.call(FIRST_CLASS, {"customer": "acme"})
    # THEN the fault hit once, and the call went as if it had not: one request with the credential,
    # a run that succeeded, no lease, nothing left to the work queue
    assert faults.hits == 1
    assert result["isError"] is False and result["structuredContent"] == ANSWER
    assert [request["headers"]["Authorization"] for request in vendor.received] == [f"Bearer {secret}"]
    assert run_statuses(admin, agent["id"]) == ["succeeded"]
    assert agent_state(agent["id"]).leases == {}
    assert take_bodies(settings().sweep_queue) == []


def test_an_approval_whose_run_end_the_store_refuses_answers_and_is_recorded_and_announced_later(
    admin: Admin, hooked: tuple[dict[str, Any], Mcp], vendor: Vendor, client: Client, faults: Faults,
) -> None:
    # GIVEN a write call of an agent with a webhook, waiting on a person, and the store refusing
    # every attempt to record a run's end
    agent, mcp = hooked
    run_id = call_write(admin, vendor, mcp)
    _refuse(faults, "InternalServerError", RUN_SUCCEEDS)
    # WHEN a person approves it
    approved = admin.call("POST", f"/v1/approvals/{run_id}/approve")
    # THEN the person gets the run (not a 500): approved, sent once, its end not yet recorded
    assert faults.hits > 0
    assert approved.status_code == 200, approved.body
    assert (approved.json_body["id"], approved.json_body["status"]) == (run_id, "running")
    assert len(vendor.received) == 1
    # AND a second approval is a conflict, and reaches nothing
    assert admin.call("POST", f"/v1/approvals/{run_id}/approve").status_code == 409
    assert len(vendor.received) == 1
    # AND the end waits on the work queue, and no run_finished was queued for an end not recorded
    [deferred] = take_bodies(settings().sweep_queue)
    assert (deferred["run_id"], deferred["status"], deferred["announce"]) == (run_id, "succeeded", True)
    assert finished_runs(take_bodies(settings().webhook_queue)) == []
    # WHEN the outage is over and the worker handles the message
    faults.clear()
    work(client, [deferred])
    # THEN the run succeeded with the vendor's answer, no lease is left, and run_finished was queued once
    ended = fetch_run(admin, run_id)
    assert (ended["status"], ended["result"]) == ("succeeded", ANSWER)
    assert agent_state(agent["id"]).leases == {}
    assert finished_runs(take_bodies(settings().webhook_queue)) == [(run_id, "succeeded")]
    # AND the sweep has nothing left to announce
    assert sweep_at(admin, utcnow())["runs"]["announced"] == 0
    assert take_bodies(settings().webhook_queue) == []


def test_an_approved_run_whose_end_is_lost_is_announced_when_the_sweep_expires_it(
    admin: Admin, hooked: tuple[dict[str, Any], Mcp], vendor: Vendor, faults: Faults,
) -> None:
    # GIVEN a write call of an agent with a webhook, waiting on a person, and both the store and the
    # work queue refusing the end of a run
    agent, mcp = hooked
    run_id = call_write(admin, vendor, mcp)
    _refuse(faults, "InternalServerError", RUN_SUCCEEDS)
    faults.fail("SendMessageBatch", service="sqs", code="InternalError", when=sends_to(settings().sweep_queue))
    # WHEN a person approves it, the outage ends, and the sweep runs after the lease and the skew
    assert admin.call("POST", f"/v1/approvals/{run_id}/approve").status_code == 200
    assert faults.hits > 0 and len(vendor.received) == 1
    faults.clear()
    report = sweep_at(admin, lease_ends_at(admin, run_id) + SKEW_ALLOWANCE + SECOND)
    # THEN the run expired, its lease is free, and the webhook queue has its run_finished, once
    assert report["runs"]["expired"] == 1
    assert (fetch_run(admin, run_id)["status"], agent_state(agent["id"]).leases) == ("expired", {})
    assert finished_runs(take_bodies(settings().webhook_queue)) == [(run_id, "expired")]


def _abandon_a_run(admin: Admin, vendor: Vendor, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A new agent of `admin`'s account calls a read tool (not promoted: nothing of it is ever due),
    and the Lambda dies mid-run. Answers (agent id, run id)."""
    publish_read(admin, vendor)
    created = admin.create_agent(f"agent-{secrets.token_hex(3)}")

    def dies(*args: Any, **kwargs: Any) -> None:
        raise SystemExit("the Lambda died mid-run")

    with monkeypatch.context() as patch:
        patch.setattr("chalicelib.calls.vendor.perform", dies)
        with pytest.raises(SystemExit):
            Mcp(admin.client, created["api_key"]).call("run_tool", {**READ, "input": {"customer": "acme"}})
    [run_id] = agent_state(created["id"]).leases
    return created["id"], run_id


def test_the_sweep_expires_runs_abandoned_anywhere_in_the_fleet_once_their_lease_and_the_skew_have_passed(
    admin: Admin, other_admin: Admin, vendor: Vendor, monkeypatch: pytest.MonkeyPatch, logged: Any,
) -> None:
    # GIVEN agents of two accounts, with nothing due, each with a run whose Lambda died
    abandoned = [(admin, *_abandon_a_run(admin, vendor, monkeypatch)),
                 (other_admin, *_abandon_a_run(other_admin, vendor, monkeypatch))]
    lease_ends = [lease_ends_at(owner, run_id) for owner, _, run_id in abandoned]
    # WHEN the fleet's sweep runs 30 s after the leases ended (within the skew allowance)
    early = sweep.run(min(lease_ends) + timedelta(seconds=30))
    # THEN it leaves both running, their leases held
    assert early.runs["expired"] == 0
    for owner, agent_id, run_id in abandoned:
        assert fetch_run(owner, run_id)["status"] == "running"
        assert list(agent_state(agent_id).leases) == [run_id]
    # WHEN it runs once the leases and the skew allowance have passed
    late = sweep.run(max(lease_ends) + SKEW_ALLOWANCE + SECOND)
    # THEN both runs expired and both leases are free, though no agent was due for review
    assert late.runs == {"expired": 2, "announced": 0, "failed": 0}
    for owner, agent_id, run_id in abandoned:
        assert fetch_run(owner, run_id)["status"] == "expired"
        assert agent_state(agent_id).leases == {}
    assert [line["agents"] for line in log_lines(logged, "sweep")] == [0, 0]
    assert metrics(log_lines(logged, "sweep")[-1])["RunsExpired"]["value"] == 2
