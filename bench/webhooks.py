"""Webhook figures on the local stack: time from a working-set change to the signed POST at a
local receiver (median, p99), and messages per sweep when a sweep demotes many tools.

    python bench/webhooks.py [--n 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from local import process

arrivals: list[tuple[float, dict[str, Any]]] = []
arrived = threading.Event()


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        arrivals.append((time.perf_counter(), body))
        arrived.set()
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def call(stack: process.RunningStack, method: str, path: str, body: Any = None) -> Any:
    request = urllib.request.Request(f"{stack.url}{path}", data=json.dumps(body).encode() if body else None,
                                     method=method, headers={"Authorization": f"Bearer {stack.token}",
                                                             "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--tools", type=int, default=10)
    args = parser.parse_args()
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
    with tempfile.TemporaryDirectory() as data:
        stack = process.start(Path(data), "wsa_bench_" + "w" * 20, {"WORKSET_SWEEP_INTERVAL_SECONDS": "3600"})
        try:
            for index in range(args.tools):
                call(stack, "POST", "/v1/tools", {
                    "vendor": "bench", "name": f"t{index}", "description": "A tool.", "input_schema": {"type": "object"},
                    "annotations": {"readOnlyHint": True}, "request": {"method": "GET", "url": "http://127.0.0.1:9/"}})
            agent = call(stack, "POST", "/v1/agents", {"name": "hooked", "webhook_url": hook})
            base = f"/v1/agents/{agent['id']}/working-set"
            latencies = []
            for round_ in range(args.n):
                arrived.clear()
                start = time.perf_counter()
                if round_ % 2 == 0:
                    call(stack, "POST", base, {"vendor": "bench", "name": "t0"})
                else:
                    call(stack, "DELETE", f"{base}/bench/t0")
                if not arrived.wait(30):
                    raise RuntimeError("no webhook arrived within 30 s")
                latencies.append((arrivals[-1][0] - start) * 1000)
            latencies.sort()
            # many demotions in one sweep: agents x tools, all idle
            arrivals.clear()
            agents = [call(stack, "POST", "/v1/agents", {"name": f"a{i}", "webhook_url": hook})
                      for i in range(args.agents)]
            for each in agents:
                for index in range(args.tools):
                    call(stack, "POST", f"/v1/agents/{each['id']}/working-set", {"vendor": "bench", "name": f"t{index}"})
            time.sleep(3)
            arrivals.clear()
            later = (datetime.now(UTC) + timedelta(days=22)).isoformat().replace("+00:00", "Z")
            report = call(stack, "POST", "/v1/sweep", {"now": later})
            time.sleep(5)
            ids = {each["id"] for each in agents}
            messages = [body for _, body in arrivals if body["params"]["agent_id"] in ids]
        finally:
            stack.stop()
    demoted = sum(1 for d in report["demoted"] if d["agent_id"] in ids)
    print(f"{time.strftime('%Y-%m-%d')}  python bench/webhooks.py --n {args.n} --agents {args.agents} "
          f"--tools {args.tools}")
    print("| measure | value |")
    print("|---|---:|")
    print(f"| change -> webhook POST, median ({args.n} changes) | {statistics.median(latencies):.0f} ms |")
    print(f"| change -> webhook POST, p99 | {latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]:.0f} ms |")
    print(f"| one sweep: demotions / agents / webhook messages | {demoted} / {len(ids)} / {len(messages)} |")
    print(f"| messages per agent in that sweep | {len(messages) / len(ids):.2f} |")


if __name__ == "__main__":
    main()
