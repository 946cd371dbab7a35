"""Calling a tool: request building, dry runs, vendor failures, timeouts and outbound safety."""

from __future__ import annotations

import json
import socket

import pytest

from chalicelib.base.errors import ForbiddenDestination
from chalicelib.net import outbound
from tests.conftest import Admin, Mcp, Vendor

WRITE = {"destructiveHint": False}
ORDER_SCHEMA = {
    "type": "object",
    "properties": {"customer": {"type": "string"}, "lines": {"type": "array"}, "urgent": {"type": "boolean"}},
    "required": ["customer"],
}


def _publish_write(admin: Admin, vendor: Vendor, method: str = "POST") -> None:
    admin.publish(name="create-order", description="Create a sales order.", input_schema=ORDER_SCHEMA,
                  annotations=WRITE, request={"method": method, "url": f"{vendor.url}/customers/{{customer}}/orders",
                                              "headers": {"X-Tenant": "nz"}})


def test_write_sends_the_rest_of_the_input_as_a_json_body(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    _publish_write(admin, vendor)
    waiting = mcp.call("run_tool", {"vendor": "unleashed", "name": "create-order",
                                    "input": {"customer": "c1", "lines": [{"sku": "A"}], "urgent": True}})
    approved = admin.call("POST", f"/v1/approvals/{waiting['structuredContent']['run_id']}/approve")
    assert approved.json_body["status"] == "succeeded"
    sent = vendor.received[0]
    assert (sent["method"], sent["path"]) == ("POST", "/customers/c1/orders")
    assert json.loads(sent["body"]) == {"lines": [{"sku": "A"}], "urgent": True}
    assert sent["headers"]["X-Tenant"] == "nz"
    assert sent["headers"]["Content-Type"] == "application/json"


def test_dry_run_of_a_write_previews_and_sends_nothing(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    _publish_write(admin, vendor)
    result = mcp.call("run_tool", {"vendor": "unleashed", "name": "create-order",
                                   "input": {"customer": "c1", "urgent": False}, "dryRun": True})
    assert result["isError"] is False
    assert result["structuredContent"]["preview"] == {
        "method": "POST",
        "url": f"{vendor.url}/customers/c1/orders",
        "headers": {"X-Tenant": "nz", "Content-Type": "application/json", "Accept": "application/json"},
        "body": {"urgent": False},
    }
    assert vendor.received == []


def test_dry_run_of_a_read_reaches_the_vendor(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    admin.publish(request={"method": "GET", "url": f"{vendor.url}/orders"})
    result = mcp.call("run_tool", {"vendor": "unleashed", "name": "list-sales-orders",
                                   "input": {"customer": "c"}, "dryRun": True})
    assert result["structuredContent"] == {"orders": [{"id": 1}]}
    assert len(vendor.received) == 1


def test_first_class_dry_run_previews_a_write(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    _publish_write(admin, vendor)
    mcp.call("promote", {"vendor": "unleashed", "name": "create-order"})
    result = mcp.call("unleashed__create-order", {"customer": "c1", "dryRun": True})
    assert result["structuredContent"]["preview"]["method"] == "POST"
    assert vendor.received == []


@pytest.mark.parametrize("status", [400, 404, 500, 503])
def test_vendor_failure_is_an_error_result_with_status(admin: Admin, mcp: Mcp, vendor: Vendor, status: int) -> None:
    vendor.status, vendor.body = status, {"message": "no such customer"}
    admin.publish(request={"method": "GET", "url": f"{vendor.url}/orders"})
    result = mcp.call("run_tool", {"vendor": "unleashed", "name": "list-sales-orders", "input": {"customer": "c"}})
    assert result["isError"] is True
    error = result["structuredContent"]["error"]
    assert (error["code"], error["status"], error["body"]) == ("vendor_error", status, {"message": "no such customer"})


def test_vendor_timeout_is_an_error_result(admin: Admin, mcp: Mcp, vendor: Vendor, settings_env) -> None:
    settings_env(WORKSET_VENDOR_TIMEOUT_SECONDS="0.2")
    vendor.delay = 5
    admin.publish(request={"method": "GET", "url": f"{vendor.url}/orders"})
    result = mcp.call("run_tool", {"vendor": "unleashed", "name": "list-sales-orders", "input": {"customer": "c"}})
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "vendor_timeout", result


def test_non_object_json_is_wrapped_as_result(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    vendor.body = [1, 2, 3]
    admin.publish(request={"method": "GET", "url": f"{vendor.url}/orders"})
    result = mcp.call("run_tool", {"vendor": "unleashed", "name": "list-sales-orders", "input": {"customer": "c"}})
    assert result["structuredContent"] == {"result": [1, 2, 3]}


def test_oversized_answer_is_cut_and_flagged(admin: Admin, mcp: Mcp, vendor: Vendor, settings_env) -> None:
    settings_env(WORKSET_VENDOR_MAX_RESPONSE_BYTES="100")
    vendor.body = {"blob": "x" * 1000}
    admin.publish(request={"method": "GET", "url": f"{vendor.url}/orders"})
    result = mcp.call("run_tool", {"vendor": "unleashed", "name": "list-sales-orders", "input": {"customer": "c"}})
    assert result["structuredContent"]["truncated"] is True
    assert len(result["structuredContent"]["result"]) == 100


def test_unreachable_vendor_is_an_error_result(admin: Admin, mcp: Mcp) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: the connection is refused
        admin.publish(request={"method": "GET", "url": f"http://127.0.0.1:{port}/orders"})
        result = mcp.call("run_tool", {"vendor": "unleashed", "name": "list-sales-orders",
                                       "input": {"customer": "c"}})
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "vendor_error"


@pytest.mark.parametrize(
    "address",
    ["169.254.169.254", "127.0.0.1", "10.1.2.3", "192.168.0.5", "172.16.0.1", "::1", "fd00::1", "0.0.0.0",
     "::ffff:169.254.169.254", "100.64.0.1"],
)
def test_non_public_addresses_are_refused_before_any_connection(address: str, monkeypatch) -> None:
    # GIVEN a resolver stub and a socket layer that fails the test if anything connects
    def no_connect(*args, **kwargs):
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(socket, "create_connection", no_connect)
    request = outbound.HttpRequest("GET", "http://metadata.example/latest/meta-data")
    # WHEN the request is sent with private addresses disallowed
    # THEN it is refused with a clear error, before connecting
    with pytest.raises(ForbiddenDestination, match="does not call"):
        outbound.send(request, timeout=1, max_bytes=10, allow_private=False,
                      resolver=lambda host, port: [address])


def test_a_public_address_passes_the_check() -> None:
    chosen = outbound.check_destination("https://api.example.com/x", allow_private=False,
                                        resolver=lambda host, port: ["93.184.216.34"])
    assert chosen == "93.184.216.34"


def test_metadata_url_is_refused_as_a_tool_result_when_private_networks_are_off(
    admin: Admin, mcp: Mcp, settings_env
) -> None:
    settings_env(WORKSET_ALLOW_PRIVATE_NETWORK="false")
    admin.publish(request={"method": "GET", "url": "http://169.254.169.254/latest/meta-data"})
    result = mcp.call("run_tool", {"vendor": "unleashed", "name": "list-sales-orders", "input": {"customer": "c"}})
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "forbidden_destination"


@pytest.mark.parametrize("address", ["169.254.169.254", "fe80::1", "0.0.0.0", "224.0.0.1"])
def test_link_local_and_unspecified_are_refused_even_where_private_networks_are_allowed(address: str) -> None:
    with pytest.raises(ForbiddenDestination):
        outbound.check_destination("http://metadata.example/", allow_private=True,
                                   resolver=lambda host, port: [address])


def test_a_large_result_is_kept_apart_and_read_back_whole(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    from chalicelib.store import runs as run_store

    # GIVEN a vendor answering far more than fits in the run item inline
    admin.publish(request={"method": "GET", "url": f"{vendor.url}/orders"})
    vendor.body = {"orders": [{"id": index, "note": "x" * 100} for index in range(200)]}
    result = mcp.call("run_tool", {"vendor": "unleashed", "name": "list-sales-orders", "input": {"customer": "a"}})
    run_id = result["_meta"]["io.workset/runId"]
    # THEN the run item holds no result, its own item does, and every read sees the whole answer
    from chalicelib.store.models import RunItem, RunResultItem

    assert RunItem.get(run_id).result is None and RunItem.get(run_id).result_apart is True
    assert RunResultItem.get(f"{run_id}{run_store.RESULT_SUFFIX}").result == vendor.body
    assert admin.call("GET", f"/v1/runs/{run_id}").json_body["result"] == vendor.body
    assert mcp.call("get_run", {"run_id": run_id})["structuredContent"]["result"] == vendor.body


def test_a_small_result_rides_in_the_run_item(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    from chalicelib.store.models import RunItem

    admin.publish(request={"method": "GET", "url": f"{vendor.url}/orders"})
    result = mcp.call("run_tool", {"vendor": "unleashed", "name": "list-sales-orders", "input": {"customer": "a"}})
    item = RunItem.get(result["_meta"]["io.workset/runId"])
    assert item.result == {"orders": [{"id": 1}]} and not item.result_apart


def test_a_run_past_its_retention_is_gone(admin: Admin, mcp: Mcp, vendor: Vendor, settings_env) -> None:
    settings_env(WORKSET_RUN_RETENTION_DAYS="0")
    admin.publish(request={"method": "GET", "url": f"{vendor.url}/orders"})
    result = mcp.call("run_tool", {"vendor": "unleashed", "name": "list-sales-orders", "input": {"customer": "a"}})
    run_id = result["_meta"]["io.workset/runId"]
    assert admin.call("GET", f"/v1/runs/{run_id}").status_code == 404


def test_the_result_item_cannot_be_read_as_a_run(admin: Admin, mcp: Mcp, vendor: Vendor) -> None:
    admin.publish(request={"method": "GET", "url": f"{vendor.url}/orders"})
    vendor.body = {"big": "y" * 10_000}
    run_id = mcp.call("run_tool", {"vendor": "unleashed", "name": "list-sales-orders",
                                   "input": {"customer": "a"}})["_meta"]["io.workset/runId"]
    assert admin.call("GET", f"/v1/runs/{run_id}%23result").status_code == 404
    answer = mcp.call("get_run", {"run_id": f"{run_id}#result"})
    assert answer["structuredContent"]["error"]["code"] == "run_not_found"
