"""One fault does not stop the sweep's rule for everyone, and a fast clock does not end a live run
(issue 11, items 5 and 6): a failed step (the outbox's query, SQS) or one agent's failing demotion
is reported and the rest goes on, the next sweep finishing it; a sweep whose clock runs ahead
holds a demotion while a run is in flight. Faults: tests/faults.py.
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from chalice.test import Client

from chalicelib.base.clock import utcnow
from chalicelib.base.config import settings
from chalicelib.identity import accounts
from chalicelib.store import outbox
from chalicelib.store import runs as run_store
from chalicelib.store.records import Run
from tests.books import (
    ANSWER,
    READ,
    agent_state,
    books,
    fast_backoff,  # noqa: F401 - fixture
    fetch_run,
    hooked_fixture,  # noqa: F401 - fixture `hooked`
    publish_read,
    sweep_at,
    take_bodies,
)
from tests.conftest import Admin, Mcp, Vendor, log_lines
from tests.faults import Faults, demotes_for, queries_index
from tests.test_observability import metrics

DAY = timedelta(days=1)


# --- item 5: one fault does not stop the rule for everyone ----------------------------------------

def test_a_sweep_whose_outbox_query_fails_still_demotes_and_logs_the_failed_step(
    admin: Admin, mcp: Mcp, agent: dict[str, Any], vendor: Vendor, faults: Faults, logged: Any,
) -> None:
    # GIVEN an idle promoted tool, and every query of the outbox index failing
    publish_read(admin, vendor)
    mcp.call("promote", READ)
    faults.fail("Query", when=queries_index("outbox"))
    # WHEN the sweep runs past the window
    report = sweep_at(admin, utcnow() + 22 * DAY)
    # THEN it still demoted the tool, and the books agree
    assert faults.hits > 0
    assert [(d["name"], d["cause"]) for d in report["demoted"]] == [("list-sales-orders", "idle")]
    assert report["failed"] == [{"step": "drain", "error": "QueryError"}]
    assert books(admin, agent["id"]) == (0, 0, 0)
    # AND the failed step is logged and counted (SweepFailures), and the sweep's own line says it went on
    [step] = log_lines(logged, "sweep.step_failed")
    assert (step["step"], step["left_to"]) == ("drain", "next sweep")
    [line] = log_lines(logged, "sweep")
    assert (line["outcome"], line["demoted"], line["drained"], line["SweepFailures"]) == ("ok", 1, 0, 1)


def test_a_sweep_while_sqs_fails_still_demotes_and_the_next_sweep_announces_it(
    admin: Admin, hooked: tuple[dict[str, Any], Mcp], vendor: Vendor, faults: Faults,
) -> None:
    # GIVEN an agent with a webhook and an idle promoted tool (its promotion already announced),
    # and SQS refusing every send
    agent, mcp = hooked
    publish_read(admin, vendor)
    mcp.call("promote", READ)
    assert [body["size"] for body in take_bodies(settings().webhook_queue)] == [1]
    faults.fail("SendMessageBatch", service="sqs", code="InternalError")
    # WHEN the sweep runs past the window
    report = sweep_at(admin, utcnow() + 22 * DAY)
    # THEN it still demoted the tool, and the news stays in the outbox
    assert faults.hits > 0
    assert [d["name"] for d in report["demoted"]] == ["list-sales-orders"]
    assert books(admin, agent["id"]) == (0, 0, 0)
    assert outbox.pending() == [agent["id"]]
    assert take_bodies(settings().webhook_queue) == []
    # WHEN SQS is back and the next sweep runs
    faults.clear()
    sweep_at(admin, utcnow() + 22 * DAY)
    # THEN its drain queued the news once (size 0), and the outbox is empty
    assert [(body["agent_id"], body["size"]) for body in take_bodies(settings().webhook_queue)] == [(agent["id"], 0)]
    assert outbox.pending() == []


def test_an_agent_whose_demotion_keeps_failing_is_reported_and_the_others_are_demoted(
    admin: Admin, mcp: Mcp, agent: dict[str, Any], client: Client, vendor: Vendor, faults: Faults, logged: Any,
) -> None:
    # GIVEN two agents with an idle promoted tool each, and every demotion of the first one's
    # cancelled for a transaction conflict
    publish_read(admin, vendor)
    other = admin.create_agent("other")
    mcp.call("promote", READ)
    Mcp(client, other["api_key"]).call("promote", READ)
    faults.cancel("TransactWriteItems", ["TransactionConflict"], when=demotes_for(agent["id"]))
    # WHEN the sweep runs past the window
    report = sweep_at(admin, utcnow() + 22 * DAY)
    # THEN the first agent is reported failed and keeps its tool; the other's is demoted
    assert faults.hits > 0
    assert report["failed"] == [{"agent_id": agent["id"], "error": "Busy"}]
    assert [(d["agent_id"], d["name"]) for d in report["demoted"]] == [(other["id"], "list-sales-orders")]
    assert books(admin, agent["id"]) == (1, 1, 1)
    assert books(admin, other["id"]) == (0, 0, 0)
    # AND the sweep's line counts the failure
    [line] = log_lines(logged, "sweep")
    assert metrics(line)["SweepFailures"]["value"] == 1
    # WHEN the conflict is over and the next sweep runs
    faults.clear()
    again = sweep_at(admin, utcnow() + 22 * DAY)
    # THEN the first agent's tool is demoted too
    assert [(d["agent_id"], d["name"]) for d in again["demoted"]] == [(agent["id"], "list-sales-orders")]
    assert again["failed"] == []
    assert books(admin, agent["id"]) == (0, 0, 0)


def test_a_revocation_cut_short_by_a_fault_is_finished_by_revoking_again(
    admin: Admin, mcp: Mcp, agent: dict[str, Any], client: Client, vendor: Vendor, faults: Faults,
) -> None:
    # GIVEN a tool through a connection, promoted by two agents, and every write that would make
    # the second agent's promotion due failing
    connection = admin.call("POST", "/v1/connections", {"vendor": READ["vendor"],
                                                        "auth": {"type": "bearer", "token": "secret"}}).json_body
    publish_read(admin, vendor, connection=connection["id"])
    other = admin.create_agent("other")
    mcp.call("promote", READ)
    Mcp(client, other["api_key"]).call("promote", READ)
    faults.fail("UpdateItem", when=lambda body: body.get("Key", {}).get("agent_id", {}).get("S") == other["id"])
    # WHEN the connection is revoked
    cut_short = admin.call("POST", f"/v1/connections/{connection['id']}/revoke")
    # THEN the request fails and the second agent still has the tool
    assert faults.hits > 0
    assert cut_short.status_code == 500, cut_short.body
    assert books(admin, other["id"]) == (1, 1, 1)
    # WHEN the fault is over and the person revokes again
    faults.clear()
    again = admin.call("POST", f"/v1/connections/{connection['id']}/revoke").json_body
    # THEN it is still revoked, and both agents' promotions are demoted for it
    assert again["status"] == "revoked"
    demoted = [(d["agent_id"], d["cause"]) for d in again["demoted"]]
    assert sorted(demoted) == sorted([(agent["id"], "connection_revoked"), (other["id"], "connection_revoked")])
    assert books(admin, agent["id"]) == books(admin, other["id"]) == (0, 0, 0)


# --- item 6: clock skew does not end a live run ---------------------------------------------------

def test_a_sweep_whose_clock_runs_60_s_ahead_holds_the_demotion_and_leaves_the_live_run(
    admin: Admin, mcp: Mcp, agent: dict[str, Any], vendor: Vendor,
) -> None:
    # GIVEN a promoted tool, idle by the time a run of the agent starts on a Lambda whose clock
    # reads `then`, with a lease to `then` + 30 s
    publish_read(admin, vendor)
    mcp.call("promote", READ)
    then = utcnow() + 22 * DAY
    run = Run(run_id=f"run{secrets.token_hex(10)}", agent_id=agent["id"],
              account_id=accounts.authenticate_admin(admin.token), vendor=READ["vendor"], name=READ["name"],
              version=1, input={"customer": "acme"}, status="running", created_at=then, updated_at=then,
              lease_expires_at=then + timedelta(seconds=30))
    run_store.start(run, use_due_at=None)
    # WHEN a sweep whose clock reads 60 s past the lease's end runs
    report = sweep_at(admin, run.lease_expires_at + timedelta(seconds=60))
    # THEN it holds the demotion because a run is in flight, and does not expire the run
    assert report["demoted"] == []
    assert [(h["name"], h["reason"]) for h in report["held"]] == [("list-sales-orders", "run_in_flight")]
    assert report["runs"]["expired"] == 0
    assert fetch_run(admin, run.run_id)["status"] == "running"
    assert books(admin, agent["id"]) == (1, 1, 1)
    # AND the run can still end as it did
    assert run_store.finish(run, "succeeded", then + timedelta(seconds=20), result=ANSWER)
    assert (fetch_run(admin, run.run_id)["status"], fetch_run(admin, run.run_id)["result"]) == ("succeeded", ANSWER)
    assert agent_state(agent["id"]).leases == {}
    # AND with the run over, the same sweep demotes the idle tool
    after = sweep_at(admin, run.lease_expires_at + timedelta(seconds=60))
    assert [(d["name"], d["cause"]) for d in after["demoted"]] == [("list-sales-orders", "idle")]
    assert books(admin, agent["id"]) == (0, 0, 0)
