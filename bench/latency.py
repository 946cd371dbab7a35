"""Latency of tools/list and of a promoted tool call: over the local stack (HTTP, keep-alive)
and in process (Chalice test client over in-process moto), side by side in one run.

    python bench/latency.py [--n 300]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOOL = {
    "vendor": "bench", "name": "list-orders", "description": "List orders.",
    "input_schema": {"type": "object", "properties": {"customer": {"type": "string"}}},
    "annotations": {"readOnlyHint": True},
}


def rpc(method: str, params: dict, request_id: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()


def timed(run: Callable[[], None], n: int) -> tuple[float, float]:
    """Median and p99 in milliseconds over n runs (after 20 warm-up runs)."""
    for _ in range(20):
        run()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def over_http(vendor_url: str, n: int) -> dict[str, tuple[float, float]]:
    from local import process

    with tempfile.TemporaryDirectory() as data:
        stack = process.start(Path(data), "wsa_bench_" + "x" * 20)
        try:
            target = urlsplit(stack.url)
            admin = http.client.HTTPConnection(target.hostname, target.port)
            headers = {"Authorization": f"Bearer {stack.token}", "Content-Type": "application/json"}
            admin.request("POST", "/v1/tools", json.dumps({**TOOL, "request": {
                "method": "GET", "url": f"{vendor_url}/orders"}}), headers)
            admin.getresponse().read()
            admin.request("POST", "/v1/agents", json.dumps({"name": "bench"}), headers)
            key = json.loads(admin.getresponse().read())["api_key"]
            connection = http.client.HTTPConnection(target.hostname, target.port)
            agent = {"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                     "MCP-Protocol-Version": "2025-11-25"}

            def post(body: bytes) -> None:
                connection.request("POST", "/mcp", body, agent)
                response = connection.getresponse()
                assert response.status == 200, response.status
                response.read()

            post(rpc("tools/call", {"name": "promote", "arguments": {"vendor": "bench", "name": "list-orders"}}, 1))
            return {
                "tools/list": timed(lambda: post(rpc("tools/list", {}, 2)), n),
                "promoted tool call": timed(lambda: post(rpc("tools/call", {
                    "name": "bench__list-orders", "arguments": {"customer": "acme"}}, 3)), n),
            }
        finally:
            stack.stop()


def in_process(vendor_url: str, n: int) -> dict[str, tuple[float, float]]:
    from moto import mock_aws

    from tests.conftest import Admin, Mcp  # fakes the AWS environment before the app loads

    with mock_aws():
        from chalice.test import Client

        from app import app
        from chalicelib.base.clock import utcnow
        from chalicelib.identity import accounts
        from chalicelib.store.tables import create_all

        create_all()
        _, token = accounts.create_account("bench", utcnow())
        with Client(app) as client:
            admin = Admin(client, token)
            admin.call("POST", "/v1/tools", {**TOOL, "request": {"method": "GET", "url": f"{vendor_url}/orders"}})
            mcp = Mcp(client, admin.create_agent("bench")["api_key"])
            mcp.call("promote", {"vendor": "bench", "name": "list-orders"})
            return {
                "tools/list": timed(lambda: mcp.post("tools/list"), n),
                "promoted tool call": timed(lambda: mcp.call("bench__list-orders", {"customer": "acme"}), n),
            }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300)
    args = parser.parse_args()
    from local.demo import start_vendor

    vendor = start_vendor(0)
    vendor_url = f"http://127.0.0.1:{vendor.server_address[1]}"
    http_figures = over_http(vendor_url, args.n)
    process_figures = in_process(vendor_url, args.n)
    print(f"{time.strftime('%Y-%m-%d')}  python bench/latency.py --n {args.n}")
    print(f"{'operation':22} {'local stack median':>19} {'p99':>8} {'in process median':>18} {'p99':>8}")
    for label in http_figures:
        (hm, hp), (pm, pp) = http_figures[label], process_figures[label]
        print(f"{label:22} {hm:16.2f} ms {hp:5.2f} ms {pm:15.2f} ms {pp:5.2f} ms")
    vendor.shutdown()


if __name__ == "__main__":
    main()
