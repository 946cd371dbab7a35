"""Vendor failure rates as metrics (issue 27, goal 4): each run that calls its vendor writes, on
its one `run` line, VendorCalls and VendorFailures in CloudWatch's embedded metric format, by stage
alone (what the template's VendorFailureRateAlarm reads): vendor names are the accounts' to write,
and a dimension by vendor would make a billed series of every name a hostile account invents. The
line names the vendor as a plain field (the dashboard's per-vendor table queries the lines). A
failure is the vendor's: a timeout, a 5xx, a refused connection; a 4xx is a call, not a failure; a
preview of a write calls no vendor."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from tests.conftest import Admin, Mcp, Vendor, log_lines


def vendor_counts(line: dict[str, Any]) -> dict[tuple[str, tuple[str, ...]], Any]:
    """(metric, its dimensions) -> value, for VendorCalls and VendorFailures, after checking each
    directive against the EMF specification (every target member at the root, text dimensions)."""
    found: dict[tuple[str, tuple[str, ...]], Any] = {}
    for directive in line["_aws"]["CloudWatchMetrics"]:
        assert directive["Namespace"] == "Workset"
        for dimensions in directive["Dimensions"]:
            assert all(isinstance(line[name], str) and line[name] for name in dimensions)
            for definition in directive["Metrics"]:
                if definition["Name"] in ("VendorCalls", "VendorFailures"):
                    assert definition["Unit"] == "Count"
                    found[(definition["Name"], tuple(dimensions))] = line[definition["Name"]]
    return found


def expected(failures: int) -> dict[tuple[str, tuple[str, ...]], int]:
    return {("VendorCalls", ("stage",)): 1, ("VendorFailures", ("stage",)): failures}


def _publish(admin: Admin, url: str, *, writes: bool = False, vendor: str = "shop") -> None:
    admin.publish(vendor=vendor, name="orders", description="List orders.",
                  annotations={"destructiveHint": True} if writes else {"readOnlyHint": True},
                  input_schema={"type": "object", "properties": {"customer": {"type": "string"}}},
                  request={"method": "POST" if writes else "GET", "url": f"{url}/orders"})


def _call(mcp: Mcp, logged: Any, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    mcp.call("promote", {"vendor": "shop", "name": "orders"})
    logged.clear()
    mcp.call("shop__orders", arguments or {"customer": "c1"})
    [run] = log_lines(logged, "run")
    return run


@pytest.mark.parametrize(("status", "failures"), [(200, 0), (404, 0), (429, 0), (500, 1), (503, 1)])
def test_a_vendor_call_counts_one_call_and_a_5xx_one_failure(admin: Admin, mcp: Mcp, agent: dict[str, Any],
                                                              vendor: Vendor, logged: Any, status: int,
                                                              failures: int) -> None:
    # GIVEN a vendor that answers `status`
    _publish(admin, vendor.url)
    vendor.status = status
    # WHEN an agent calls its tool
    run = _call(mcp, logged)
    # THEN the run line counts one call, and a failure only for a 5xx, by stage; it names the vendor
    assert vendor.received
    assert vendor_counts(run) == expected(failures)
    assert (run["stage"], run["vendor"]) == ("test", "shop")


def test_a_refused_connection_is_a_vendor_failure(admin: Admin, mcp: Mcp, agent: dict[str, Any],
                                                  logged: Any) -> None:
    # GIVEN a tool whose vendor's port listens to nothing
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    _publish(admin, f"http://127.0.0.1:{port}")
    # WHEN an agent calls it
    run = _call(mcp, logged)
    # THEN one call, one failure
    assert run["status"] == "failed"
    assert vendor_counts(run) == expected(1)


def test_a_preview_of_a_write_calls_no_vendor_and_counts_nothing(admin: Admin, mcp: Mcp, agent: dict[str, Any],
                                                                 vendor: Vendor, logged: Any) -> None:
    # GIVEN a write tool, previewed (a dry run of a write reaches no vendor)
    _publish(admin, vendor.url, writes=True)
    mcp.call("promote", {"vendor": "shop", "name": "orders"})
    logged.clear()
    answer = mcp.call("run_tool", {"vendor": "shop", "name": "orders", "input": {"customer": "c1"},
                                   "dryRun": True})["structuredContent"]
    [run] = log_lines(logged, "run")
    # THEN the vendor got nothing and no vendor call is counted
    assert "preview" in answer and run["dry_run"] is True
    assert not vendor.received
    assert "_aws" not in run or vendor_counts(run) == {}


def test_vendor_names_an_account_invents_make_no_metric_series(admin: Admin, mcp: Mcp, agent: dict[str, Any],
                                                               vendor: Vendor, logged: Any) -> None:
    # GIVEN an account (hostile) whose tools go under ever new vendor names, each called once
    names = [f"shop-{n}" for n in range(4)]
    for name in names:
        _publish(admin, vendor.url, vendor=name)
    logged.clear()
    for name in names:
        mcp.call("promote", {"vendor": name, "name": "orders"})
        mcp.call(f"{name}__orders", {"customer": "c1"})
    runs = log_lines(logged, "run")
    # WHEN CloudWatch extracts the metrics of their run lines (a series: a metric, its dimensions' values)
    series = {(name, tuple((dimension, run[dimension]) for dimension in dimensions))
              for run in runs for (name, dimensions) in vendor_counts(run)}
    # THEN there are two series whatever the names, and each line still says which vendor it called
    assert series == {("VendorCalls", (("stage", "test"),)), ("VendorFailures", (("stage", "test"),))}
    assert [run["vendor"] for run in runs] == names
