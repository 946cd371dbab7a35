"""MCP servers the tests start on 127.0.0.1 to stand in for the upstreams an admin registers:

- `sdk_server`: the MCP Python SDK's own server (`MCPServer`, its Streamable HTTP app) under
  uvicorn in a thread of the test process. It speaks 2026-07-28 and, through `initialize`, the
  handshake era (with session ids). Tests may add or remove tools while it serves.
- `everything_server`: the reference server `@modelcontextprotocol/server-everything` (the
  TypeScript SDK's, handshake era only, session ids, event-stream answers), run by `node` from
  tests/upstreams/node_modules, which `./dev test` installs (`npm ci`).
- `bridged_server`: the same server in its stdio mode, served over Streamable HTTP by the bridge
  `supergateway` (as the README tells a person with a stdio-only server to do).

Each context manager yields the URL of the MCP endpoint; the fixtures below share one server per
module (SDK) or per session (everything). Import a fixture into a test module to use it:
`from tests.upstream_servers import sdk_url_fixture` gives the test module the `sdk_url` fixture.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TypedDict

import pytest
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import ToolAnnotations

UPSTREAMS = Path(__file__).resolve().parent / "upstreams"
EVERYTHING = UPSTREAMS / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
SUPERGATEWAY = UPSTREAMS / "node_modules" / "supergateway" / "dist" / "index.js"
STARTUP_SECONDS = 30


class Forecast(TypedDict):
    city: str
    temperature_c: float
    conditions: str


def forecast_server() -> MCPServer:
    """An SDK server with three tools: `get_forecast` (read-only, structured content, and a log
    notification ahead of its answer), `create_note` (a write), `fail` (raises: an isError result)."""
    server = MCPServer("forecast", instructions="Weather and notes, for Workset's tests.")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_forecast(city: str, ctx: Context) -> Forecast:
        """Tomorrow's forecast for a city."""
        # Sent on the request's own event stream before the result (in the handshake era; the
        # 2026-07-28 revision sends logs only to a client that asked for them, and deprecates them).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await ctx.info(f"looking up {city}")
        return {"city": city, "temperature_c": 21.5, "conditions": "sunny"}

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    def create_note(title: str, body: str) -> str:
        """Create a note."""
        return f"created note {title!r} ({len(body)} characters)"

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails, saying why."""
        raise ToolError(reason)

    return server


@contextmanager
def sdk_server(server: MCPServer | None = None, *, json_response: bool = False, port: int = 0) -> Iterator[str]:
    """Serve `server` (by default a new `forecast_server()`) on 127.0.0.1 (`port`, or a free one);
    yields the endpoint URL. `json_response` answers plain JSON instead of event streams."""
    app = (server or forecast_server()).streamable_http_app(json_response=json_response)
    listener = socket.create_server(("127.0.0.1", port))
    runner = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=runner.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    started = time.monotonic()
    while not runner.started:
        if not thread.is_alive() or time.monotonic() - started > STARTUP_SECONDS:
            listener.close()
            raise RuntimeError("the SDK's MCP server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
    finally:
        runner.should_exit = True
        thread.join(timeout=10)
        listener.close()


@contextmanager
def everything_server() -> Iterator[str]:
    """The reference server in its Streamable HTTP mode (`node dist/index.js streamableHttp`, the
    port from PORT) on 127.0.0.1; yields the endpoint URL. Without node or the npm install the
    test is skipped (failed under CI, which must run it)."""
    node = _node(EVERYTHING)
    port = _free_port()
    # A bare environment: the server has a tool (`get-env`) that answers its environment.
    with _serving([node, "--require", str(UPSTREAMS / "loopback.cjs"), str(EVERYTHING), "streamableHttp"],
                  port, {"PORT": str(port)}) as url:
        yield url


@contextmanager
def bridged_server() -> Iterator[str]:
    """The reference server speaking stdio, behind `supergateway --stdio ... --outputTransport
    streamableHttp` on 127.0.0.1 (both preloaded with loopback.cjs); yields the endpoint URL."""
    node = _node(EVERYTHING, SUPERGATEWAY)
    port = _free_port()
    loopback = str(UPSTREAMS / "loopback.cjs")
    stdio = " ".join(shlex.quote(part) for part in (node, "--require", loopback, str(EVERYTHING), "stdio"))
    with _serving([node, "--require", loopback, str(SUPERGATEWAY), "--stdio", stdio, "--outputTransport",
                   "streamableHttp", "--stateful", "--port", str(port), "--logLevel", "none"], port, {}) as url:
        yield url


def _node(*scripts: Path) -> str:
    """node's path, once the npm packages `scripts` need are installed; else the test is skipped
    (failed under CI, which must run it)."""
    node = shutil.which("node")
    if node is None or not all(script.is_file() for script in scripts):
        reason = "node or tests/upstreams/node_modules is missing: `./dev test` installs them (apt-get, npm ci)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return node


@contextmanager
def _serving(command: list[str], port: int, env: dict[str, str]) -> Iterator[str]:
    """`command` (a node server listening on 127.0.0.1:`port`) started in a bare environment (the
    reference server's get-env tool answers its environment), stopped after; yields its MCP URL."""
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, cwd=UPSTREAMS, env={"PATH": os.environ.get("PATH", ""), **env},
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        try:
            _wait_for_port(port, process, log)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            _stop(process)


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    started = time.monotonic()
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() - started > STARTUP_SECONDS:
                log.seek(0)
                output = log.read().decode("utf-8", "replace")[-2000:]
                _stop(process)
                raise RuntimeError(f"the everything server did not start on port {port}:\n{output}") from None
            time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End the server's whole process group."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module", name="sdk_url")
def sdk_url_fixture() -> Iterator[str]:
    """The SDK server (event-stream answers) shared by a test module."""
    with sdk_server() as url:
        yield url


@pytest.fixture(scope="module", name="sdk_json_url")
def sdk_json_url_fixture() -> Iterator[str]:
    """The SDK server answering plain JSON, shared by a test module."""
    with sdk_server(json_response=True) as url:
        yield url


@pytest.fixture(scope="module", name="bridged_url")
def bridged_url_fixture() -> Iterator[str]:
    """The reference server over stdio behind supergateway, shared by a test module."""
    with bridged_server() as url:
        yield url


@pytest.fixture(scope="session", name="everything_url")
def everything_url_fixture() -> Iterator[str]:
    """The reference everything server, shared by the whole run."""
    with everything_server() as url:
        yield url
