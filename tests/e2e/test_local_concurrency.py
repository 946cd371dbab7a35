"""Many MCP clients at once against the served local stack (issue 12): every request answered, no
error, no dropped connection, and afterwards each agent's books exact (its size is its promotions,
and its History replays to its working set). A smaller storm than bench/local_scale.py's, with
the same clients and the same checks."""

from __future__ import annotations

import random
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

from bench.local_scale import TOKEN, Client, Vendor, books, storm, toolbox
from local import process
from tests.e2e.conftest import stack_log

CLIENTS = 8
AGENTS = 4
TOOLS = 60


def test_concurrent_clients_get_answers_and_leave_exact_books(tmp_path: Path) -> None:
    # GIVEN the served stack with a toolbox calling a vendor here, and four agents
    vendor = ThreadingHTTPServer(("127.0.0.1", 0), Vendor)
    vendor.daemon_threads = True
    threading.Thread(target=vendor.serve_forever, daemon=True).start()
    stack = process.start(tmp_path, TOKEN, log=stack_log(tmp_path))
    try:
        admin = Client(stack.url, TOKEN)
        tools = toolbox(TOOLS, f"http://127.0.0.1:{vendor.server_address[1]}")
        assert all(admin.call("POST", "/v1/tools", tool)[0] == 201 for tool in tools)
        agents = [admin.call("POST", "/v1/agents", {"name": f"agent-{number}"})[1] for number in range(AGENTS)]
        # WHEN eight clients promote, demote, call and search at once, two per agent
        load = storm(stack.url, agents, tools, CLIENTS, seconds=4, rng=random.Random(7))
        # THEN every request was answered, none with an error or a dropped connection
        assert load.get("answers", 0) > CLIENTS and load.get("errors", 0) == 0 and load.get("dropped", 0) == 0, load
        assert load.get("promote", 0) and load.get("demote", 0)
        # AND each agent's size is its promotions, and its History replays to its working set
        for agent in agents:
            size, working, replayed = books(stack.url, agent)
            assert size == len(working) and working == replayed, (agent["name"], size, working ^ replayed)
    finally:
        stack.stop()
        vendor.shutdown()
