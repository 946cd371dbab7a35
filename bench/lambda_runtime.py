"""Lambda runtime: the BUILT package run by each runtime's own interpreter, side by side.

    python bench/lambda_runtime.py PYTHON=DIR [PYTHON=DIR ...] [--rounds 5] [--calls 200]

Each DIR is an unzipped deployment package (`infra/build.sh dev OUT`, with
WORKSET_LAMBDA_RUNTIME=python3.11 for the old runtime; `unzip OUT/deployment.zip -d DIR`), each
PYTHON an interpreter of the Python its template names (pyenv's python3.11, python3.13).

Every round starts one fresh process per package, the packages in turn and the order flipped
each round. A process does what a Lambda instance does, with the package and the standard library
alone on sys.path (`-I -S -B`, the package's own bytecode):

* init: `import app` (wall and CPU);
* the first tools/list through the handler Lambda calls (`app.app(event, context)`, an API
  Gateway proxy event for POST /mcp): the cold path's first answer;
* then the warm call path, `--calls` handler invocations each, after 10 unmeasured: tools/list,
  a promoted tool's call (to a vendor on 127.0.0.1) and find_tool over a small stored toolbox
  (the query embedded by MiniLM in numpy, ranked with wordllama's vectors: our native-code path).

DynamoDB, SQS and KMS are a moto server on 127.0.0.1 in a process of its own (the same for every
package, so its cost is equal on each side); each process gets its own tables. Medians per side,
and the ratio of each side to the first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("tools/list", "promoted call", "find_tool")
TOOLS = [
    {"vendor": "unleashed", "name": "list-sales-orders", "description": "List sales orders in Unleashed."},
    {"vendor": "acme", "name": "send-email", "description": "Send an email message to one or more recipients."},
    {"vendor": "acme", "name": "create-invoice", "description": "Create an invoice for a customer."},
    {"vendor": "notion", "name": "create-page", "description": "Create a page in a Notion workspace."},
    {"vendor": "acme", "name": "list-customers", "description": "List customers, filtered by name or email."},
]
QUERY = "list the sales orders of a customer"
MOTO = """
import logging, sys
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print("http://%s:%d" % server.get_host_and_port(), flush=True)
sys.stdin.read()  # serves until whoever started it closes our stdin (or dies)
server.stop()
"""
# Runs inside the package, under its runtime's interpreter. argv: the package folder, the config.
INSTANCE = r'''
import json, sys, threading, time
sys.path.insert(0, sys.argv[1])
config = json.loads(sys.argv[2])
wall, cpu = time.perf_counter(), time.process_time()
import app  # Lambda's init: the handler string app.app
report = {"import_ms": (time.perf_counter() - wall) * 1000, "import_cpu_ms": (time.process_time() - cpu) * 1000,
          "python": "%d.%d.%d" % sys.version_info[:3]}

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Vendor(BaseHTTPRequestHandler):
    def do_GET(self):
        payload = b'{"orders": [{"id": 1}]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
    def log_message(self, *args):
        pass

vendor = ThreadingHTTPServer(("127.0.0.1", 0), Vendor)
threading.Thread(target=vendor.serve_forever, daemon=True).start()

from chalicelib.identity import accounts
from chalicelib.tools import definitions
from chalicelib.base.clock import utcnow
from chalicelib.base.config import settings
from chalicelib.search.documents import VECTOR_VERSION, document_vector
from chalicelib.store import queues, vault
from chalicelib.store import tools as tool_store
from chalicelib.store.tables import create_all

create_all()
vault.ensure_key()
queues.ensure(settings().sweep_queue)
queues.ensure(settings().webhook_queue)
now = utcnow()
account, _ = accounts.create_account("bench", now)
key = accounts.create_agent(account.account_id, {"name": "bench"}, now).api_key
for tool in config["tools"]:
    spec = definitions.parse_spec({
        "vendor": tool["vendor"], "name": tool["name"], "description": tool["description"],
        "input_schema": {"type": "object", "properties": {"customer": {"type": "string"}}},
        "annotations": {"readOnlyHint": True},
        "request": {"method": "GET", "url": "http://127.0.0.1:%d/orders" % vendor.server_address[1]},
    })
    vector = document_vector(spec.vendor, spec.name, spec.description)
    new = tool_store.NewVersion(spec.vendor, spec.name, spec.model_dump(mode="json", exclude_none=True), 0,
                                vector, VECTOR_VERSION)
    tool_store.put_version(account.account_id, new, accounts.ADMIN, now)

class Context:  # what Lambda hands the handler
    function_name = "workset-bench-APIHandler"
    function_version = "1"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:workset-bench-APIHandler"
    log_group_name = "/aws/lambda/workset-bench-APIHandler"
    log_stream_name = "bench"
    def __init__(self):
        self.aws_request_id = "%032x" % time.perf_counter_ns()
    def get_remaining_time_in_millis(self):
        return 25000

def invoke(method, params):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    event = {
        "resource": "/mcp", "path": "/mcp", "httpMethod": "POST",
        "requestContext": {"httpMethod": "POST", "resourcePath": "/mcp", "path": "/api/mcp",
                           "identity": {"sourceIp": "127.0.0.1"}, "stage": "api", "requestId": "bench"},
        "headers": {"content-type": "application/json", "authorization": "Bearer " + key,
                    "mcp-protocol-version": "2025-11-25", "accept": "application/json, text/event-stream"},
        "multiValueHeaders": {}, "queryStringParameters": None, "multiValueQueryStringParameters": None,
        "pathParameters": None, "stageVariables": {}, "body": body, "isBase64Encoded": False,
    }
    response = app.app(event, Context())
    text = response["body"]
    if response.get("headers", {}).get("Content-Type", "").startswith("text/event-stream"):
        text = [line for line in text.splitlines() if line.startswith("data: ")][-1][len("data: "):]
    answer = json.loads(text)
    if response["statusCode"] != 200 or "result" not in answer or answer["result"].get("isError"):
        raise SystemExit("%s answered %s: %s" % (method, response["statusCode"], text[:500]))
    return answer["result"]

first = config["tools"][0]
ref = {"vendor": first["vendor"], "name": first["name"]}
start = time.perf_counter()
listed = invoke("tools/list", {})
report["first_tools_list_ms"] = (time.perf_counter() - start) * 1000
report["tools"] = sorted(tool["name"] for tool in listed["tools"])
invoke("tools/call", {"name": "promote", "arguments": ref})
steps = {
    "tools/list": lambda: invoke("tools/list", {}),
    "promoted call": lambda: invoke("tools/call", {"name": "%s__%s" % (ref["vendor"], ref["name"]), "arguments": {}}),
    "find_tool": lambda: invoke("tools/call", {"name": "find_tool", "arguments": {"query": config["query"]}}),
}
report["warm_ms"], report["warm_cpu_ms"] = {}, {}
for name, step in steps.items():
    for _ in range(10 if config["calls"] else 0):
        step()
    samples = []
    cpu = time.process_time()
    for _ in range(config["calls"]):
        start = time.perf_counter()
        step()
        samples.append((time.perf_counter() - start) * 1000)
    report["warm_ms"][name] = samples
    report["warm_cpu_ms"][name] = (time.process_time() - cpu) * 1000 / max(1, config["calls"])
print(json.dumps(report))
'''


class MotoServer:
    """A moto server on 127.0.0.1 in a process of its own (this venv's); it ends when we close its
    stdin or exit."""

    def __enter__(self) -> str:
        self.process = subprocess.Popen([sys.executable, "-c", MOTO], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        assert self.process.stdout is not None
        url = self.process.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            self.__exit__()
            raise RuntimeError("the moto server did not start")
        return url

    def __exit__(self, *exc: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def package_environment(package: Path, endpoint: str) -> dict[str, str]:
    """A Lambda-like environment for one instance: fake credentials, its own tables at the moto
    server, the stage `test` (whose vendors may be on 127.0.0.1, as the bench's is)."""
    prefix = f"workset-bench-{uuid.uuid4().hex[:8]}"
    return {"PATH": os.environ.get("PATH", ""), "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_ENDPOINT_URL": endpoint, "OPENBLAS_NUM_THREADS": "1",
            "WORKSET_STAGE": "test", "WORKSET_TABLE_PREFIX": prefix, "WORKSET_PUBLIC_URL": "http://127.0.0.1:8000",
            "LAMBDA_TASK_ROOT": str(package)}


def run_instance(python: str, package: Path, endpoint: str, calls: int, timeout: float = 600) -> dict[str, Any]:
    """One fresh Lambda-like instance of the package under `python`: its report (see INSTANCE)."""
    config = {"tools": TOOLS, "query": QUERY, "calls": calls}
    done = subprocess.run([python, "-I", "-S", "-B", "-c", INSTANCE, str(package), json.dumps(config)],
                          cwd=package, env=package_environment(package, endpoint), capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{python} on {package} failed:\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sides", nargs="+", metavar="PYTHON=DIR", help="an interpreter and the unzipped package it runs")
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per side")
    parser.add_argument("--calls", type=int, default=200, help="warm handler invocations per step and process")
    args = parser.parse_args()
    sides = [(python, Path(folder)) for python, _, folder in (side.partition("=") for side in args.sides)]

    reports: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(sides))}
    load = [os.getloadavg()[0]]
    with MotoServer() as endpoint:
        for round_ in range(args.rounds):
            order = list(range(len(sides))) if round_ % 2 == 0 else list(reversed(range(len(sides))))
            for i in order:
                reports[i].append(run_instance(*sides[i], endpoint, args.calls))
            load.append(os.getloadavg()[0])

    print(f"The built package under each runtime's interpreter: {args.rounds} fresh processes per side, interleaved "
          f"(order flipped each round); {args.calls} warm calls per step and process; {os.cpu_count()} CPUs, "
          f"load average {min(load):.1f}-{max(load):.1f} during the run.")
    rows: list[tuple[str, list[float]]] = []
    rows.append(("init: import app, wall", [statistics.median(r["import_ms"] for r in reports[i]) for i in reports]))
    rows.append(("init: import app, CPU", [statistics.median(r["import_cpu_ms"] for r in reports[i]) for i in reports]))
    rows.append(("first tools/list", [statistics.median(r["first_tools_list_ms"] for r in reports[i]) for i in reports]))
    for step in STEPS:
        rows.append((f"warm {step}", [statistics.median(s for r in reports[i] for s in r["warm_ms"][step])
                                      for i in reports]))
        rows.append((f"warm {step}, CPU", [statistics.median(r["warm_cpu_ms"][step] for r in reports[i])
                                           for i in reports]))
    header = "".join(f"{'python ' + reports[i][0]['python']:>18}" for i in reports)
    ratios = "".join(f"{'ratio ' + str(i + 1) + '/1':>12}" for i in list(reports)[1:])
    print(f"  {'median ms':<26}{header}{ratios}")
    for label, values in rows:
        cells = "".join(f"{value:18.2f}" for value in values)
        print(f"  {label:<26}{cells}" + "".join(f"{value / values[0]:12.2f}" for value in values[1:]))


if __name__ == "__main__":
    main()
