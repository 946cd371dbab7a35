"""Structured logs and metrics: one JSON line per MCP request, admin request, run, sweep and
webhook delivery, each with its request id, account, agent and run where they exist, outcome and
duration; never a secret, a token or a tool's input. Metrics ride on those lines in CloudWatch's
embedded metric format (EMF), dimensioned by few-valued fields only."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.agents import workingset
from chalicelib.base import log
from chalicelib.base.clock import iso, utcnow
from chalicelib.catalog import indexes
from tests.conftest import Admin, Mcp, Vendor, log_lines

CANARY = "canary-input-7f3a"  # a value a tool's input carries, which no line may show


lines = log_lines


def metrics(line: dict[str, Any]) -> dict[str, Any]:
    """The metrics an EMF line declares, each with its value and dimension values, after checking
    the line against the specification: every target member at the root, dimension values text,
    values numbers, at most 30 dimensions a set and 100 metrics a directive."""
    meta = line["_aws"]
    assert isinstance(meta["Timestamp"], int)
    found = {}
    for directive in meta["CloudWatchMetrics"]:
        assert directive["Namespace"] == "Workset" and len(directive["Metrics"]) <= 100
        for dimensions in directive["Dimensions"]:
            assert dimensions[0] == "stage" and len(dimensions) <= 30
            assert all(isinstance(line[name], str) and line[name] for name in dimensions)
        for definition in directive["Metrics"]:
            value = line[definition["Name"]]
            assert isinstance(value, int | float) and not isinstance(value, bool)
            found[definition["Name"]] = {
                "value": value, "unit": definition["Unit"],
                "dimensions": {name: line[name] for name in directive["Dimensions"][0]},
            }
    return found


def _read_tool(admin: Admin, vendor: Vendor) -> None:
    admin.publish(vendor="shop", name="orders", description="List orders.", annotations={"readOnlyHint": True},
                  input_schema={"type": "object", "properties": {"customer": {"type": "string"}}},
                  request={"method": "GET", "url": f"{vendor.url}/orders"})


def _write_tool(admin: Admin, vendor: Vendor) -> None:
    admin.publish(vendor="shop", name="refund", description="Refund an order.",
                  annotations={"destructiveHint": True},
                  input_schema={"type": "object", "properties": {"customer": {"type": "string"}}},
                  request={"method": "POST", "url": f"{vendor.url}/refunds"})


# --- MCP requests ---------------------------------------------------------------------------------

@pytest.mark.parametrize("modern", [False, True])
def test_an_mcp_request_writes_one_line_with_who_what_and_how_it_ended(mcp: Mcp, agent: dict[str, Any],
                                                                       logged: Any, modern: bool) -> None:
    # GIVEN an agent's client in either revision
    mcp.modern = modern
    # WHEN it lists its tools
    assert mcp.post("tools/list").status_code == 200
    # THEN exactly one request line: its id, the agent and account, the method, the outcome, the time
    [line] = lines(logged, "mcp.request")
    assert line["request_id"] and line["agent_id"] == agent["id"] and line["account_id"].startswith("ac")
    assert (line["rpc_method"], line["outcome"], line["status"], line["route"]) == ("tools/list", "ok", 200, "/mcp")
    assert isinstance(line["duration_ms"], float)
    # AND it counts one call and no error, by method and stage only
    counted = metrics(line)
    assert counted["McpCalls"] == {"value": 1, "unit": "Count",
                                   "dimensions": {"stage": "test", "rpc_method": "tools/list"}}
    assert counted["McpErrors"]["value"] == 0
    # AND the agent's key is nowhere
    assert agent["api_key"] not in logged.text


def test_a_tool_call_writes_a_run_line_and_the_request_line_names_the_run(admin: Admin, mcp: Mcp, agent: dict[str, Any],
                                                                         vendor: Vendor, logged: Any) -> None:
    # GIVEN a promoted read tool
    _read_tool(admin, vendor)
    mcp.call("promote", {"vendor": "shop", "name": "orders"})
    logged.clear()
    # WHEN the agent calls it with an input
    result = mcp.call("shop__orders", {"customer": CANARY})
    assert result["isError"] is False
    # THEN one run line: the run, the agent, how it ended and the vendor's latency, never the input
    [run] = lines(logged, "run")
    [request] = lines(logged, "mcp.request")
    assert run["run_id"] == result["_meta"]["io.workset/runId"] == request["run_id"]
    assert run["request_id"] == request["request_id"]
    assert (run["agent_id"], run["status"], run["dry_run"], run["error_code"]) == (agent["id"], "succeeded",
                                                                                  False, None)
    assert run["vendor_ms"] > 0 and run["duration_ms"] >= run["vendor_ms"]
    assert metrics(run)["VendorLatency"] == {"value": run["vendor_ms"], "unit": "Milliseconds",
                                             "dimensions": {"stage": "test"}}
    assert CANARY not in logged.text and vendor.received  # the vendor got it; the log did not
    assert (request["rpc_method"], request["outcome"]) == ("tools/call", "ok")


def test_a_failed_vendor_call_is_a_tool_error_with_its_code(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                            logged: Any) -> None:
    _read_tool(admin, vendor)
    mcp.call("promote", {"vendor": "shop", "name": "orders"})
    vendor.status = 502
    logged.clear()
    assert mcp.call("shop__orders", {"customer": CANARY})["isError"] is True
    [run] = lines(logged, "run")
    [request] = lines(logged, "mcp.request")
    assert run["status"] == "failed" and run["error_code"]
    assert (request["outcome"], request["error_code"]) == ("tool_error", run["error_code"])
    assert metrics(request)["McpErrors"]["value"] == 1
    assert CANARY not in logged.text


def test_a_write_that_waits_on_a_person_counts_an_approval_request(admin: Admin, mcp: Mcp, agent: dict[str, Any],
                                                                   vendor: Vendor, logged: Any) -> None:
    # GIVEN a write tool
    _write_tool(admin, vendor)
    logged.clear()
    # WHEN the agent runs it, and a person approves
    result = mcp.call("run_tool", {"vendor": "shop", "name": "refund", "input": {"customer": CANARY}})
    run_id = result["structuredContent"]["run_id"]
    [waiting] = lines(logged, "run.awaiting_approval")
    assert (waiting["run_id"], waiting["agent_id"]) == (run_id, agent["id"])
    assert metrics(waiting)["RunsAwaitingApproval"]["value"] == 1
    assert lines(logged, "mcp.request")[-1]["run_id"] == run_id and lines(logged, "run") == []
    assert admin.call("POST", f"/v1/approvals/{run_id}/approve").status_code == 200
    # THEN the approval's request line names the account and the run, and the run's line follows it
    [approval] = lines(logged, "api.request")
    [run] = lines(logged, "run")
    assert approval["account_id"] == run["account_id"] and approval["run_id"] == run_id == run["run_id"]
    assert run["request_id"] == approval["request_id"] and run["status"] == "succeeded"
    assert CANARY not in logged.text and admin.token not in logged.text


def test_an_unknown_method_is_an_rpc_error_counted_under_a_bounded_name(mcp: Mcp, logged: Any) -> None:
    # WHEN a client calls a method of its own invention
    answer = mcp.post("x" * 500 + "/mine")
    assert answer.json_body["error"]["code"] == -32601
    # THEN the line says rpc_error, and the metric's dimension is not the caller's text
    [line] = lines(logged, "mcp.request")
    assert (line["outcome"], line["rpc_error"], line["rpc_method"]) == ("rpc_error", -32601, "unknown")
    assert metrics(line)["McpErrors"]["value"] == 1


def test_a_stranger_is_unauthorized_and_names_no_one(client: Client, logged: Any) -> None:
    stranger = Mcp(client, "wsa_nobody_" + "x" * 40)
    assert stranger.post("tools/list").status_code == 401
    [line] = lines(logged, "mcp.request")
    assert (line["outcome"], line["rpc_method"]) == ("unauthorized", "unauthenticated")
    assert "agent_id" not in line and "account_id" not in line and "x" * 40 not in logged.text


def test_a_crash_is_one_request_line_counted_as_an_error(mcp: Mcp, logged: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(workingset, "promoted_tools_with_policies", boom)
    mcp.post("tools/list")
    [line] = lines(logged, "mcp.request")
    [crash] = lines(logged, "mcp.internal_error")
    assert (line["outcome"], line["rpc_method"], line["request_id"]) == ("crashed", "tools/list", crash["request_id"])
    assert metrics(line)["McpErrors"]["value"] == 1


def test_a_crash_in_find_tool_logs_its_type_trace_and_cause_and_no_secret(mcp: Mcp, logged: Any,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a search that fails in our own code, its message quoting the caller's credentials
    def failing_lookup(*args: Any, **kwargs: Any) -> Any:
        try:
            {}["acme"]
        except KeyError as cause:
            raise RuntimeError(f"no index for Authorization: Bearer {mcp.key}, key={mcp.key} "
                               "at https://admin:hunter2@127.0.0.1/x") from cause

    monkeypatch.setattr(indexes, "current_with_memory", failing_lookup)
    # WHEN the agent calls find_tool
    answer = mcp.post("tools/call", {"name": "find_tool", "arguments": {"query": "orders"}}).json_body
    # THEN it gets -32603 naming the request, whose crash line says what broke, where, and from what
    [crash] = lines(logged, "mcp.internal_error")
    assert answer["error"]["code"] == -32603 and answer["error"]["data"]["requestId"] == crash["request_id"]
    assert crash["error"] == "RuntimeError" and crash["trace"][-1].endswith(" failing_lookup")
    [cause] = crash["causes"]
    assert cause.startswith("KeyError at tests/test_observability.py:") and cause.endswith(" failing_lookup")
    # AND no credential reaches the log
    assert mcp.key not in logged.text and "hunter2" not in logged.text
    assert "Bearer [withheld]" in crash["message"]


def test_a_notification_is_accepted_and_counted_as_one(mcp: Mcp, logged: Any) -> None:
    raw = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    assert mcp.post("ignored", raw=raw).status_code == 202
    [line] = lines(logged, "mcp.request")
    assert (line["outcome"], line["rpc_method"]) == ("accepted", "notification")


# --- admin requests -------------------------------------------------------------------------------

def test_an_admin_request_names_its_account_and_the_agent_it_addresses(admin: Admin, agent: dict[str, Any],
                                                                       logged: Any) -> None:
    assert admin.call("GET", f"/v1/agents/{agent['id']}").status_code == 200
    [line] = lines(logged, "api.request")
    assert (line["route"], line["http_method"], line["status"], line["outcome"]) == (
        "/v1/agents/{agent_id}", "GET", 200, "ok")
    assert line["agent_id"] == agent["id"] and line["account_id"].startswith("ac") and line["request_id"]
    assert "_aws" not in line  # no metric rides on admin lines
    assert admin.token not in logged.text and agent["api_key"] not in logged.text


def test_a_refused_admin_request_is_logged_without_an_account_or_the_token(admin: Admin, logged: Any) -> None:
    assert admin.call("GET", "/v1/agents", token="wrong-token-" + "y" * 40).status_code == 401
    [line] = lines(logged, "api.request")
    assert (line["status"], line["outcome"]) == (401, "refused") and "account_id" not in line
    assert "y" * 40 not in logged.text


# --- sweeps ---------------------------------------------------------------------------------------

def test_a_sweep_writes_one_line_with_its_demotions_counted(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                            logged: Any) -> None:
    # GIVEN a promoted tool left idle past its window
    _read_tool(admin, vendor)
    mcp.call("promote", {"vendor": "shop", "name": "orders"})
    logged.clear()
    # WHEN an operator sweeps a month later
    report = admin.call("POST", "/v1/sweep", {"now": iso(utcnow() + timedelta(days=40))}).json_body
    # THEN one sweep line, with the request's id, counting what it did
    [sweep] = lines(logged, "sweep")
    [request] = lines(logged, "api.request")
    assert len(report["demoted"]) == 1
    assert (sweep["demoted"], sweep["held"], sweep["outcome"]) == (1, 0, "ok")
    assert sweep["request_id"] == request["request_id"] and sweep["duration_ms"] >= 0
    counted = metrics(sweep)
    assert (counted["SweepDemotions"]["value"], counted["SweepHeld"]["value"]) == (1, 0)


def test_the_scheduled_sweep_line_carries_lambdas_request_id(client: Client, logged: Any) -> None:
    event = client.events.generate_cw_event(source="aws.events", detail_type="Scheduled Event", detail={},
                                            resources=[])
    client.lambda_.invoke("sweep", event)
    [sweep] = lines(logged, "sweep")
    assert sweep["request_id"] and sweep["outcome"] == "ok" and sweep["account_id"] is None
    assert metrics(sweep)["SweepDemotions"]["value"] == 0


# --- the log itself -------------------------------------------------------------------------------

def test_notes_and_measures_outside_a_request_are_dropped_and_inside_gather_on_one_line(logged: Any) -> None:
    log.note(agent_id="ag-outside")
    log.measure("Outside", 1)
    with log.bound("req-1"):
        log.note(agent_id="ag1", outcome="ok")
        log.measure("Things", 1, by=("outcome",))
        log.measure("Things", 2, by=("outcome",))  # the last word wins
        log.request_line("test.request", route="/x")
    [line] = lines(logged)
    assert (line["request_id"], line["agent_id"], line["route"], line["Things"]) == ("req-1", "ag1", "/x", 2)
    assert metrics(line) == {"Things": {"value": 2, "unit": "Count", "dimensions": {"stage": "test", "outcome": "ok"}}}
    assert "ag-outside" not in logged.text and "Outside" not in line


def test_a_dimension_is_always_short_text(logged: Any) -> None:
    log.event("test.event", metrics=[log.Metric("Things", 1, by=("missing", "long", "number"))], long="z" * 500,
              number=7)
    [line] = lines(logged)
    assert (line["missing"], line["long"], line["number"]) == ("none", "z" * log.DIMENSION_CHARS, "7")
    metrics(line)
