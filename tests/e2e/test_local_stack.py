"""The local stack as a person runs it: state survives a restart; AWS_ENDPOINT_URL is honoured."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import boto3

from local import process
from local.process import RunningStack, clean_environment
from tests.conftest import Vendor
from tests.e2e.conftest import ADMIN_TOKEN, ROOT, Stack, start_stack, stop_stack


def test_state_survives_a_restart(tmp_path: Path, vendor: Vendor) -> None:
    # GIVEN a stack with an agent and a published tool
    first = start_stack(tmp_path)
    try:
        agent = first.new_agent()
        status, connection = first.admin("POST", "/v1/connections",
                                         {"vendor": "keep", "auth": {"type": "bearer", "token": "survivor"}})
        first.publish({"vendor": "keep", "name": "me", "description": "A tool that must survive.",
                       "input_schema": {"type": "object"}, "annotations": {"readOnlyHint": True},
                       "connection": connection["id"], "request": {"method": "GET", "url": f"{vendor.url}/x"}})
    finally:
        stop_stack(first)
    # WHEN the stack is started again on the same data folder
    second = start_stack(tmp_path)
    try:
        # THEN the same admin token still works and everything is there
        status, fetched = second.admin("GET", f"/v1/agents/{agent['id']}")
        assert (status, fetched["name"]) == (200, agent["name"])
        status, tool = second.admin("GET", "/v1/tools/keep/me")
        assert [v["version"] for v in tool["versions"]] == [1]
        # AND a secret stored before the restart still reaches the vendor
        key = second.admin("POST", "/v1/agents", {"name": "after"})[1]["api_key"]
        called = _rpc(second.url, key, "run_tool", {"vendor": "keep", "name": "me", "input": {}})
        assert called["result"]["isError"] is False, called
        assert vendor.received[-1]["headers"]["Authorization"] == "Bearer survivor"
    finally:
        stop_stack(second)


def test_aws_endpoint_url_replaces_the_embedded_emulator(tmp_path: Path) -> None:
    # GIVEN a separate moto server, as DynamoDB Local or AWS would be
    port = _free_port()
    emulator = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _wait_for(port)
        # WHEN the stack starts with AWS_ENDPOINT_URL pointing at it
        stack = start_stack(tmp_path, {"AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": "us-east-1",
                                       "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"})
        try:
            stack.new_agent()
        finally:
            stop_stack(stack)
        # THEN the tables and the agent live there, and no snapshot was written
        dynamodb = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1",
                                aws_access_key_id="x", aws_secret_access_key="x")
        tables = dynamodb.list_tables()["TableNames"]
        assert "workset-local-agents" in tables
        assert dynamodb.scan(TableName="workset-local-agents")["Count"] == 1
        assert not (tmp_path / "snapshot.json").exists()
    finally:
        emulator.terminate()
        emulator.wait(timeout=10)


def _rpc(url: str, key: str, tool: str, arguments: dict) -> dict:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}}).encode()
    request = urllib.request.Request(f"{url}/mcp", data=body, method="POST", headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json", "MCP-Protocol-Version": "2025-11-25"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def test_the_local_stack_runs_the_sweep_by_itself(tmp_path: Path) -> None:
    # GIVEN a stack sweeping every second, and an agent over its cap
    stack = start_stack(tmp_path, {"WORKSET_SWEEP_INTERVAL_SECONDS": "1"})
    try:
        for name in ("first", "second"):
            stack.publish({"vendor": "keep", "name": name, "description": "A tool.", "input_schema": {"type": "object"},
                           "annotations": {"readOnlyHint": True},
                           "request": {"method": "GET", "url": "http://127.0.0.1:9/x"}})
        status, agent = stack.admin("POST", "/v1/agents", {"name": "capped", "cap": 1})
        assert status == 201, agent
        for name in ("first", "second"):
            stack.admin("POST", f"/v1/agents/{agent['id']}/working-set", {"vendor": "keep", "name": name})
        # WHEN a few sweep intervals pass (polled, not timed)
        deadline = time.monotonic() + 30
        names = ["first", "second"]
        while names != ["second"] and time.monotonic() < deadline:
            time.sleep(0.3)
            names = [i["name"] for i in stack.admin("GET", f"/v1/agents/{agent['id']}/working-set")[1]["items"]]
        # THEN the stack's own sweep demoted the oldest never-used promotion, cause cap
        assert names == ["second"]
        history = stack.admin("GET", f"/v1/agents/{agent['id']}/history")[1]["items"]
        assert (history[0]["name"], history[0]["cause"]) == ("first", "cap")
    finally:
        stop_stack(stack)


def test_an_oversized_body_is_refused_from_its_headers_before_it_is_read(stack) -> None:
    # GIVEN a client that announces 100 MB and sends only a few bytes
    host, port = stack.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Authorization: Bearer wsk_x_y\r\nContent-Length: 100000000\r\n\r\n{\"jsonrpc\"")
        # WHEN it waits for an answer (a server reading the whole body would wait for the rest: the
        # socket's timeout would fail the test)
        answer = b""
        while chunk := raw.recv(4096):  # the server closes the connection after its answer
            answer += chunk
    # THEN the answer is 413 at once, and the stack goes on serving
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert b'"too_large"' in answer
    status, _ = stack.admin("GET", "/v1/agents")
    assert status == 200


def test_a_chunked_body_is_refused_before_it_is_read(stack) -> None:
    host, port = stack.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"POST /v1/agents HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        assert raw.recv(4096).decode().startswith("HTTP/1.1 411")


def _call(url: str, key: str, tool: str, arguments: dict) -> dict:
    """tools/call over MCP; the response is the last message when notifications come first (SSE)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}}).encode()
    request = urllib.request.Request(f"{url}/mcp", data=body, method="POST", headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"})
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
        if response.headers.get("Content-Type", "").startswith("text/event-stream"):
            text = [line for line in text.splitlines() if line.startswith("data: ")][-1].removeprefix("data: ")
    return json.loads(text)


def test_acknowledged_writes_survive_kill_9(tmp_path: Path, vendor: Vendor) -> None:
    # GIVEN a stack that acknowledged an agent, a connection (its secret is binary ciphertext), two
    # tools using it, and over MCP with the agent's key two promotions and a demotion
    first = start_stack(tmp_path)
    try:
        agent = first.new_agent()
        status, connection = first.admin("POST", "/v1/connections",
                                         {"vendor": "keep", "auth": {"type": "bearer", "token": "kill-9-survivor"}})
        assert status == 201, connection
        for name in ("me", "other"):
            first.publish({"vendor": "keep", "name": name, "description": "A tool that must survive.",
                           "input_schema": {"type": "object"}, "annotations": {"readOnlyHint": True},
                           "connection": connection["id"], "request": {"method": "GET", "url": f"{vendor.url}/{name}"}})
        for tool, name in (("promote", "me"), ("promote", "other"), ("demote", "other")):
            answer = _call(first.url, agent["api_key"], tool, {"vendor": "keep", "name": name})
            assert answer["result"]["isError"] is False, answer
        emulator = first.running.emulator_pid()
    finally:
        # WHEN the process is killed at once (SIGKILL: no handler runs, nothing is compacted)
        first.running.process.kill()
        first.running.process.wait(timeout=30)  # reaped; a hang guard only
    # THEN its emulator does not stay behind, orphaned (polled; the deadline is a hang guard only)
    deadline = time.monotonic() + 30
    while not process.ended(emulator) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.ended(emulator)
    second = start_stack(tmp_path)
    try:
        # THEN the agent, the tool's version and the promotion are there after a restart
        status, fetched = second.admin("GET", f"/v1/agents/{agent['id']}")
        assert (status, fetched["name"]) == (200, agent["name"])
        status, tool = second.admin("GET", "/v1/tools/keep/me")
        assert (status, [v["version"] for v in tool["versions"]]) == (200, [1])
        # AND the books agree: the size, the working set and History's promotions less demotions
        size, names, net = second.books(agent["id"])
        assert names == ["me"]
        assert size == len(names) == net
        # AND the connection's secret still reaches the vendor
        called = _rpc(second.url, agent["api_key"], "run_tool", {"vendor": "keep", "name": "me", "input": {}})
        assert called["result"]["isError"] is False, called
        assert vendor.received[-1]["headers"]["Authorization"] == "Bearer kill-9-survivor"
    finally:
        stop_stack(second)


def test_a_taken_demo_port_is_replaced_by_a_free_one(tmp_path: Path) -> None:
    # GIVEN the port asked for the demo vendor is taken by another server
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # WHEN the stack starts with the demo (no --no-demo; local.process.start always passes it)
        environment = clean_environment()
        environment.update(WORKSET_ADMIN_TOKEN=ADMIN_TOKEN, PYTHONUNBUFFERED="1")
        child = subprocess.Popen(
            [sys.executable, "-m", "local", "--port", "0", "--demo-port", str(port), "--data", str(tmp_path)],
            cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        stack = Stack(RunningStack(url="", token=ADMIN_TOKEN, process=child))
        try:
            seen = _output_until_ready(child)
            # THEN it is READY, and says which free port serves the demo vendor instead
            assert seen[-1].startswith("READY "), "".join(seen)
            stack.running.url = seen[-1].split()[1]
            replaced = re.search(r"demo vendor's port (\d+) is taken; it serves on (\d+) instead", "".join(seen))
            assert replaced is not None, "".join(seen)
            assert int(replaced[1]) == port and int(replaced[2]) != port
            # AND the demo vendor answers there, and the seeded demo tools call it there
            with urllib.request.urlopen(f"http://127.0.0.1:{replaced[2]}/unleashed/sales-orders", timeout=10) as answer:
                assert json.loads(answer.read())["orders"]
            status, tool = stack.admin("GET", "/v1/tools/unleashed/list-sales-orders")
            assert status == 200, tool
            assert tool["versions"][-1]["request"]["url"].startswith(f"http://127.0.0.1:{replaced[2]}/")
        finally:
            stop_stack(stack)


def _output_until_ready(child: subprocess.Popen) -> list[str]:
    """The child's lines up to its READY line (or until it ends); the pipe is drained after."""
    assert child.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith("READY "):
            threading.Thread(target=child.stdout.read, daemon=True).start()
            break
    return seen
