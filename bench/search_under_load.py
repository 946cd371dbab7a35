"""find_tool while the toolbox is being imported into: every answer a hit list or a clear error.

    nice -n 10 python bench/search_under_load.py [--seconds 120] [--finders 4] [--importers 2]

`python -m local` runs as a child process (local/process.py) on a fresh data folder. Finders
start searching at once, while the toolbox is still empty, and keep searching while importers
add OpenAPI documents of 1 to 40 operations (the large ones' vectors come from the work queue,
so searches rank PENDING tools meanwhile). Each answer is counted as `ok` (hits or none), `busy`
(a tool error saying to try again) or `crashed` (JSON-RPC -32603); the stack's own crash lines
(`*.internal_error`) are counted from its output. Goal: no crash. The machine-independent figures
are the counts; the medians depend on the machine and what else runs on it.

Everything goes to 127.0.0.1: the documents' servers are never called.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.local_scale import TOKEN, Client
from local import process

WORDS = ["orders", "invoices", "customers", "payments", "shipments", "products", "carts", "refunds"]
DROPPED = (OSError, http.client.HTTPException, ValueError)  # no answer, or not JSON
SIZES = [1, 1, 3, 12, 40]  # operations per imported document: most small, some queued for vectors


def document(operations: int, rng: random.Random) -> str:
    """An OpenAPI document of `operations` reads, each about one of WORDS."""
    paths = {}
    for number in range(operations):
        word = rng.choice(WORDS)
        paths[f"/{word}{number}/{{id}}"] = {"get": {
            "operationId": f"get{word.title()}{number}", "summary": f"Get the {word} record {number} of a customer",
            "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}]}}
    return json.dumps({"openapi": "3.1.0", "info": {"title": "Load", "version": "1"},
                       "servers": [{"url": "http://127.0.0.1:9"}], "paths": paths})


def outcome(status: int, answer: Any) -> str:
    """ok, busy, crashed (-32603), or the error's code for anything else."""
    error = (answer or {}).get("error")
    if error is not None:
        return "crashed" if error.get("code") == -32603 else f"rpc {error.get('code')}"
    result = (answer or {}).get("result") or {}
    if status == 200 and result.get("isError") is False:
        return "ok"
    code = ((result.get("structuredContent") or {}).get("error") or {}).get("code")
    return "busy" if code == "busy" else f"tool error {code}"


def run(seconds: float, finders: int, importers: int, rng: random.Random) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    latencies: list[float] = []
    lock = threading.Lock()
    with tempfile.TemporaryDirectory() as data:
        log = Path(data) / "stack.log"
        stack = process.start(Path(data) / "stack", TOKEN, log=log)
        try:
            admin = Client(stack.url, TOKEN)
            agents = [admin.call("POST", "/v1/agents", {"name": f"finder-{n}"})[1] for n in range(finders)]
            deadline = time.monotonic() + seconds

            def importer(seed: float) -> None:
                local, client = random.Random(seed), Client(stack.url, TOKEN)
                while time.monotonic() < deadline:
                    body = {"vendor": f"shop{uuid.uuid4().hex[:8]}", "document": document(local.choice(SIZES), local)}
                    try:
                        status, _ = client.call("POST", "/v1/imports/openapi", body)
                        seen = f"import {status}"
                    except DROPPED:
                        client, seen = Client(stack.url, TOKEN), "import dropped"
                    with lock:
                        counts[seen] += 1

            def finder(number: int, seed: float) -> None:
                local, client = random.Random(seed), Client(stack.url, agents[number]["api_key"])
                while time.monotonic() < deadline:
                    query = f"{local.choice(WORDS)} of a customer"
                    began = time.perf_counter()
                    try:
                        status, answer = client.call("POST", "/mcp", {
                            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                            "params": {"name": "find_tool", "arguments": {"query": query}}})
                        seen = f"find_tool {outcome(status, answer)}"
                    except DROPPED:
                        client, seen = Client(stack.url, agents[number]["api_key"]), "find_tool dropped"
                    with lock:
                        latencies.append(time.perf_counter() - began)
                        counts[seen] += 1

            threads = ([threading.Thread(target=importer, args=(rng.random(),)) for _ in range(importers)]
                       + [threading.Thread(target=finder, args=(n, rng.random())) for n in range(finders)])
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            stack.stop()
            stack.closed.wait(10)
        crash_lines = sum('"internal_error"' in line or '.internal_error"' in line
                          for line in log.read_text(encoding="utf-8", errors="replace").splitlines())
    return {**dict(sorted(counts.items())), "stack crash lines": crash_lines,
            "find_tool median ms": round(statistics.median(latencies) * 1000, 1) if latencies else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--finders", type=int, default=4)
    parser.add_argument("--importers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    figures = run(args.seconds, args.finders, args.importers, random.Random(args.seed))
    for name, value in figures.items():
        print(f"{name:>28}  {value}")


if __name__ == "__main__":
    main()
