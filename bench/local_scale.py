"""The local stack holding a real team's data (issue 12): memory and speed as the data grows, then
many MCP clients at once.

    python bench/local_scale.py [--tools 1000] [--agents 100] [--promotions 20] [--clients 32] [--seconds 60]

`python -m local` runs as a child process (local/process.py) on a fresh data folder, with a
vendor on 127.0.0.1 in this process. Everything goes over HTTP, as a person's clients would.

1. **Growth.** The toolbox is both corpora of ../shared/bench (MetaTool's 199 tools and
   LiveMCPBench's 526), then generated variants of them up to `--tools`. Publish, promote and a
   promoted call are timed at the start, with 50 tools and one agent, and at the end, once the
   stack holds every tool and `--agents` agents with `--promotions` promotions each. "End" is the
   start's 50 tools published again under other names (the same descriptions, so the same
   embedding work), and the last agent's promotions and calls. The stack's resident memory
   (VmRSS, and its peak, VmHWM, of its process and its emulator's, summed) is read from /proc at
   the end. Goals: memory <= 1 GiB, each
   median at the end <= 1.5x its median at the start.
2. **Concurrency.** `--clients` threads, each with its own keep-alive connection, speak MCP
   (2025-11-25, JSON-RPC over POST /mcp) for `--seconds`, as 20 agents: promote, demote, a call
   (`run_tool`) and `find_tool`, mixed. An error answer or a dropped connection is counted.
   Afterwards each agent's `size` must equal its promotions, and its History, replayed from the
   start, must give exactly its working set. Goals: no error, no drop, >= 30 answers a second.
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
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CORPORA = [Path("/work/shared/bench/metatool/tools.json"), Path("/work/shared/bench/livemcpbench/tools.json")]
SAMPLE = 50
NAME_CHARS = 31  # chalicelib.base.validation.NAME_PATTERN
BUSY_AGENTS = 20
QUERIES = ["search the web", "send an email", "weather forecast for a city", "convert currency",
           "create a calendar event", "translate text", "find a hotel", "stock price"]
TOKEN = "wsa_bench_" + "s" * 24


class Vendor(BaseHTTPRequestHandler):
    """Every tool's vendor: a small JSON answer."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class Client:
    """One keep-alive connection to the stack: the admin API, or MCP with an agent's key."""

    def __init__(self, url: str, token: str) -> None:
        target = urlsplit(url)
        self.connection = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
        self.next_id = 0

    def call(self, method: str, path: str, payload: Any = None) -> tuple[int, Any]:
        """(status, the JSON answer): for an event stream, its last message (the result; the
        notifications before it are news this bench does not need)."""
        body = json.dumps(payload).encode() if payload is not None else None
        self.connection.request(method, path, body, self.headers)
        response = self.connection.getresponse()
        data = response.read().decode()
        if response.getheader("Content-Type", "").startswith("text/event-stream"):
            data = [line[len("data: "):] for line in data.splitlines() if line.startswith("data: ")][-1]
        return response.status, json.loads(data) if data else None

    def mcp(self, tool: str, arguments: dict[str, Any]) -> tuple[bool, Any]:
        """A tools/call; (ok, result): ok when the HTTP, JSON-RPC and tool answers are all success."""
        self.next_id += 1
        status, answer = self.call("POST", "/mcp", {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                                                    "params": {"name": tool, "arguments": arguments}})
        result = (answer or {}).get("result") or {}
        return status == 200 and "error" not in (answer or {}) and result.get("isError") is False, result


def _renamed(name: str, suffix: str) -> str:
    return name[:NAME_CHARS - len(suffix)].rstrip("-") + suffix


def toolbox(count: int, vendor_url: str) -> list[dict[str, Any]]:
    """`count` tool definitions: both corpora's names and descriptions, then variants of them."""
    seen: list[tuple[str, str, str]] = []
    for corpus in CORPORA:
        for tool in json.loads(corpus.read_text(encoding="utf-8")):
            seen.append((tool["vendor"], tool["name"], tool["description"][:1000] or tool["name"]))
    tools = []
    for number in range(count):
        vendor, name, description = seen[number % len(seen)]
        generation = number // len(seen)
        if generation:
            name = _renamed(name, f"-v{generation + 1}")
            description = f"{description} (variant {generation + 1})"
        tools.append({"vendor": vendor, "name": name, "description": description,
                      "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
                      "annotations": {"readOnlyHint": True},
                      "request": {"method": "GET", "url": f"{vendor_url}/{vendor}/{name}"}})
    return tools


def timed(run: Any, items: list[Any]) -> float:
    """Median milliseconds of `run(item)` over the items; each run must succeed."""
    samples = []
    for item in items:
        start = time.perf_counter()
        ok = run(item)
        samples.append((time.perf_counter() - start) * 1000)
        assert ok, f"failed: {item}"
    return statistics.median(samples)


def memory(pid: int) -> dict[str, float]:
    """The stack's resident memory now and at its peak, in MiB: its process and its children
    (the AWS emulator runs in one), summed."""
    total = {"VmRSS": 0.0, "VmHWM": 0.0}
    for process in [pid, *_children(pid)]:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{process}/status").read_text().splitlines()
                      if ":" in line)
        for name in total:
            total[name] += int(fields[name].split()[0]) / 1024
    return total


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:  # the field after the state is the parent's pid
            found.append(int(stat.parent.name))
    return found


def grow(url: str, pid: int, tools: list[dict[str, Any]], agents: int, promotions: int, rng: random.Random,
         log: Any) -> tuple[dict[str, tuple[float, float]], dict[str, float], list[dict[str, Any]]]:
    """Phase 1: (start, end) medians by operation, memory at the end, the agents made."""
    admin = Client(url, TOKEN)
    publish = lambda tool: admin.call("POST", "/v1/tools", tool)[0] == 201
    made: list[dict[str, Any]] = []

    def new_agent() -> Client:
        status, agent = admin.call("POST", "/v1/agents", {"name": f"agent-{len(made)}", "cap": promotions})
        assert status == 201, agent
        made.append(agent)
        return Client(url, agent["api_key"])

    def promote(agent: Client, tool: dict[str, Any]) -> bool:
        return agent.mcp("promote", {"vendor": tool["vendor"], "name": tool["name"]})[0]

    def call(agent: Client, tool: dict[str, Any]) -> bool:
        return agent.mcp(f"{tool['vendor']}__{tool['name']}", {"q": "x"})[0]

    # the end's sample publishes the start's tools again under other names: the same descriptions,
    # so the same embedding work (its cost follows a description's length, not the data's size)
    first, body = tools[:SAMPLE], tools[SAMPLE:]
    last = [{**tool, "name": _renamed(tool["name"], "-again")} for tool in first]
    assert publish(first[0])  # the first publish loads the embedding model: not a cost of the data
    start = {"publish": timed(publish, first[1:])}
    agent, chosen = new_agent(), rng.sample(first, promotions)
    start["promote"] = timed(lambda tool: promote(agent, tool), chosen)
    start["promoted call"] = timed(lambda tool: call(agent, tool), chosen)
    log(f"start: {start}")
    for number, tool in enumerate(body, 1):
        assert publish(tool), tool
        if number % 200 == 0:
            log(f"published {SAMPLE + number} tools")
    published = first + body
    for _ in range(agents - 2):
        agent = new_agent()
        for tool in rng.sample(published, promotions):
            assert promote(agent, tool)
        if len(made) % 20 == 0:
            log(f"{len(made)} agents with {promotions} promotions")
    end = {"publish": timed(publish, last)}
    agent, chosen = new_agent(), rng.sample(published, promotions)
    end["promote"] = timed(lambda tool: promote(agent, tool), chosen)
    end["promoted call"] = timed(lambda tool: call(agent, tool), chosen)
    log(f"end: {end}")
    return {name: (start[name], end[name]) for name in start}, memory(pid), made


def storm(url: str, agents: list[dict[str, Any]], tools: list[dict[str, Any]], clients: int, seconds: float,
          rng: random.Random) -> dict[str, Any]:
    """Phase 2: `clients` threads for `seconds`, mixed operations over the agents."""
    counts: Counter[str] = Counter()
    latencies: dict[str, list[float]] = {kind: [] for kind in ("promote", "demote", "call", "find_tool")}
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(number: int) -> None:
        local = random.Random(rng.random())
        agent = agents[number % len(agents)]
        mcp = Client(url, agent["api_key"])
        pool = local.sample(tools, 40)
        while time.monotonic() < deadline:
            tool = local.choice(pool)
            ref = {"vendor": tool["vendor"], "name": tool["name"]}
            kind = local.choice(["promote", "demote", "call", "find_tool"])
            arguments = {"promote": ref, "demote": ref, "find_tool": {"query": local.choice(QUERIES)},
                         "call": {**ref, "input": {"q": "x"}}}[kind]
            try:
                began = time.perf_counter()
                ok, _ = mcp.mcp("run_tool" if kind == "call" else kind, arguments)
                outcome = "answers" if ok else "errors"
                with lock:
                    latencies[kind].append(time.perf_counter() - began)
            except (OSError, http.client.HTTPException, ValueError) as error:
                outcome = "dropped"
                with lock:
                    counts[f"dropped: {type(error).__name__}"] += 1
                mcp = Client(url, agent["api_key"])
            with lock:
                counts[outcome] += 1
                counts[kind] += 1

    threads = [threading.Thread(target=client, args=(number,)) for number in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    medians = {f"{kind} median ms": round(statistics.median(values) * 1000, 1) for kind, values in latencies.items()
               if values}
    return {**counts, **medians, "seconds": elapsed, "per_second": (counts["answers"] + counts["errors"]) / elapsed}


def books(url: str, agent: dict[str, Any]) -> tuple[int, set[str], set[str]]:
    """The agent's size, its working set, and its History replayed from the start."""
    admin = Client(url, TOKEN)
    size = admin.call("GET", f"/v1/agents/{agent['id']}")[1]["size"]
    working = {f"{p['vendor']}/{p['name']}" for p in admin.call("GET", f"/v1/agents/{agent['id']}/working-set")[1]["items"]}
    events, cursor = [], None
    while True:
        path = f"/v1/agents/{agent['id']}/history?limit=100" + (f"&cursor={cursor}" if cursor else "")
        page = admin.call("GET", path)[1]
        events += page["items"]
        cursor = page.get("next")
        if not cursor:
            break
    replayed: set[str] = set()
    for event in reversed(events):  # newest first
        key = f"{event['vendor']}/{event['name']}"
        if event["action"] == "promoted":
            replayed.add(key)
        else:
            replayed.discard(key)
    return size, working, replayed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--promotions", type=int, default=20)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    from local import process

    began, rng = time.perf_counter(), random.Random(12)

    def log(text: str) -> None:
        print(f"[{time.perf_counter() - began:6.1f} s] {text}", file=sys.stderr, flush=True)

    vendor = ThreadingHTTPServer(("127.0.0.1", 0), Vendor)
    vendor.daemon_threads = True
    threading.Thread(target=vendor.serve_forever, daemon=True).start()
    tools = toolbox(args.tools, f"http://127.0.0.1:{vendor.server_address[1]}")
    with tempfile.TemporaryDirectory() as data:
        stack = process.start(Path(data), TOKEN)
        try:
            medians, used, agents = grow(stack.url, stack.process.pid, tools, args.agents, args.promotions, rng, log)
            log(f"memory: {used}")
            busy = agents[:BUSY_AGENTS]
            load = storm(stack.url, busy, tools, args.clients, args.seconds, rng)
            log(f"storm: {load}")
            consistent = [books(stack.url, agent) for agent in busy]
            after = memory(stack.process.pid)
        finally:
            stopping = time.perf_counter()
            stack.stop()  # SIGTERM, as a service manager stops it: the journal is compacted first
            stopped = time.perf_counter() - stopping
    print(f"Local stack at scale (`python bench/local_scale.py --tools {args.tools} --agents {args.agents} "
          f"--promotions {args.promotions} --clients {args.clients} --seconds {args.seconds:g}`)")
    print("| operation | median at start | median at end | end / start |")
    print("|---|---:|---:|---:|")
    for name, (first, last) in medians.items():
        print(f"| {name} | {first:.1f} ms | {last:.1f} ms | {last / first:.2f}x |")
    print(f"| resident memory at the end of growth | {used['VmRSS']:.0f} MiB | peak {used['VmHWM']:.0f} MiB | |")
    print(f"| resident memory after the storm | {after['VmRSS']:.0f} MiB | peak {after['VmHWM']:.0f} MiB | |")
    print(f"| SIGTERM to exit, with all of it saved | | {stopped:.1f} s | |")
    exact = sum(size == len(working) and working == replayed for size, working, replayed in consistent)
    print(f"Storm: {args.clients} clients over {len(busy)} agents for {load['seconds']:.0f} s: "
          f"{load.get('answers', 0)} answers, {load.get('errors', 0)} errors, {load.get('dropped', 0)} dropped, "
          f"{load['per_second']:.1f} answers/s (promote {load.get('promote', 0)}, demote {load.get('demote', 0)}, "
          f"call {load.get('call', 0)}, find_tool {load.get('find_tool', 0)}); "
          f"books exact for {exact} of {len(consistent)} agents (size = promotions = History replayed)")


if __name__ == "__main__":
    main()
