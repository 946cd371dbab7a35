"""MCP servers as vendors, end to end through the admin API and /mcp: registering a real MCP
server (the MCP Python SDK's own, and the npm reference server) publishes its tools; agents find,
promote and call them through to the server, with approvals and dry runs as for any tool; a sync
follows the server's changes; the sweep queues an hourly sync; failures are clear errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.base.clock import utcnow
from chalicelib.base.config import settings
from chalicelib.net import mcpclient
from chalicelib.store.models import ApprovalItem, approval_sk
from tests.books import sweep_at, take_bodies, work
from tests.conftest import Admin, HandshakeHandler, JsonHandler, Mcp, serving
from tests.upstream_servers import bridged_url_fixture, everything_url_fixture, forecast_server, sdk_server  # noqa: F401


@pytest.fixture(autouse=True)
def fresh_sessions() -> Iterator[None]:
    mcpclient.forget_sessions()
    yield
    mcpclient.forget_sessions()


@pytest.fixture
def notes() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """The SDK's server with the forecast tools and a `save_note` that records what it was sent."""
    saved: list[dict[str, str]] = []
    server = forecast_server()

    @server.tool()
    def save_note(title: str) -> str:
        """Save a note with this title."""
        saved.append({"title": title})
        return f"saved {title}"

    with sdk_server(server) as url:
        yield url, saved


def _register(admin: Admin, url: str, vendor: str = "weather", **extra: Any) -> Any:
    return admin.call("POST", "/v1/upstreams", {"vendor": vendor, "url": url, **extra})


def _names(answer: dict[str, Any]) -> dict[str, str]:
    return {line["name"]: line["outcome"] for line in answer["sync"]["tools"]}


def test_registering_a_server_publishes_its_tools_with_their_schemas_and_hints(admin: Admin,
                                                                               notes: Any) -> None:
    url, _ = notes
    # WHEN an admin registers the server
    answer = _register(admin, url)
    # THEN each of its tools is a tool of the vendor, named from its own name
    assert answer.status_code == 201, answer.body
    assert _names(answer.json_body) == {"get-forecast": "published", "create-note": "published",
                                        "fail": "published", "save-note": "published"}
    assert (answer.json_body["last_sync"]["ok"], answer.json_body["revision"]) == (True, "2026-07-28")
    forecast = admin.call("GET", "/v1/tools/weather/get-forecast").json_body["versions"][-1]
    assert forecast["upstream"] == {"upstream": "weather", "url": url, "tool": "get_forecast"}
    assert forecast["annotations"]["readOnlyHint"] is True
    assert forecast["input_schema"]["required"] == ["city"]
    assert "output_schema" in forecast
    listed = admin.call("GET", "/v1/upstreams").json_body["items"]
    assert [(item["vendor"], item["url"]) for item in listed] == [("weather", url)]


def test_an_agent_finds_promotes_and_calls_a_server_tool_first_class(admin: Admin, mcp: Mcp, notes: Any) -> None:
    _register(admin, notes[0])
    # GIVEN an agent that finds the server's tool in plain words and promotes it
    hits = mcp.call("find_tool", {"query": "weather forecast for tomorrow"})["structuredContent"]["hits"]
    assert hits[0]["name"] == "get-forecast"
    mcp.call("promote", {"vendor": "weather", "name": "get-forecast"})
    # WHEN it calls the tool by its first-class name
    result = mcp.call("weather__get-forecast", {"city": "Paris"})
    # THEN the server's own result comes back: its content and its structured content
    assert result["isError"] is False, result
    assert result["structuredContent"] == {"city": "Paris", "temperature_c": 21.5, "conditions": "sunny"}
    assert result["content"][0]["type"] == "text"


def test_a_server_write_waits_for_approval_then_reaches_the_server_once(admin: Admin, mcp: Mcp, notes: Any) -> None:
    url, saved = notes
    _register(admin, url)
    # GIVEN a dry run of a write: it answers the tools/call it would send and reaches nothing
    preview = mcp.call("run_tool", {"vendor": "weather", "name": "save-note", "input": {"title": "hi"},
                                    "dryRun": True})["structuredContent"]["preview"]
    assert (preview["method"], preview["url"]) == ("POST", f"{url.rsplit('/', 1)[0]}/…")  # the path may hold a key
    assert preview["body"]["method"] == "tools/call"
    assert preview["body"]["params"] == {"name": "save_note", "arguments": {"title": "hi"}}
    assert saved == []
    # WHEN it is called, it waits for a person; approved, it runs
    waiting = mcp.call("run_tool", {"vendor": "weather", "name": "save-note", "input": {"title": "hi"}})
    assert waiting["structuredContent"]["status"] == "awaiting_approval"
    assert saved == []
    run = admin.call("POST", f"/v1/approvals/{waiting['structuredContent']['run_id']}/approve").json_body
    # THEN the server got the call once, and the run holds its answer
    assert saved == [{"title": "hi"}]
    assert run["status"] == "succeeded"
    assert run["result"]["content"][0]["text"] == "saved hi"


def test_a_failing_server_tool_is_an_error_result(admin: Admin, mcp: Mcp, notes: Any) -> None:
    _register(admin, notes[0])
    # GIVEN a server tool that fails (not marked read-only, so a person approves it first)
    waiting = mcp.call("run_tool", {"vendor": "weather", "name": "fail", "input": {"reason": "no luck"}})
    # WHEN it runs
    run = admin.call("POST", f"/v1/approvals/{waiting['structuredContent']['run_id']}/approve").json_body
    # THEN the run failed with the server's own words
    assert run["status"] == "failed"
    assert "no luck" in json.dumps(run["error"])


def test_a_sync_publishes_new_versions_and_withdraws_what_the_server_dropped(admin: Admin, mcp: Mcp) -> None:
    server = forecast_server()
    with sdk_server(server) as url:
        _register(admin, url)
        # GIVEN the server changes: one tool gone, one new, one described anew
        server.remove_tool("fail")

        @server.tool()
        def get_alerts(region: str) -> str:
            """Severe weather alerts for a region."""
            return "none"

        server.remove_tool("create_note")

        @server.tool(name="create_note")
        def create_note_again(title: str, body: str) -> str:
            """Create a note, now with a better description."""
            return "ok"

        # WHEN it is synced
        answer = admin.call("POST", "/v1/upstreams/weather/sync")
    # THEN the changes are versions, the dropped tool is unavailable, the rest unchanged
    assert answer.status_code == 200, answer.body
    assert _names(answer.json_body) == {"get-forecast": "unchanged", "create-note": "new_version",
                                        "get-alerts": "published", "fail": "unavailable"}
    call = mcp.call("run_tool", {"vendor": "weather", "name": "fail", "input": {"reason": "x"}})
    assert call["structuredContent"]["error"]["code"] == "tool_unavailable"


def test_a_server_that_cannot_be_reached_registers_nothing(admin: Admin) -> None:
    with sdk_server() as url:
        pass  # started and stopped: nothing listens there now
    answer = _register(admin, url)
    assert answer.status_code == 502
    assert answer.json_body["error"]["code"] == "vendor_error"
    assert admin.call("GET", "/v1/upstreams").json_body["items"] == []
    assert admin.call("GET", "/v1/tools").json_body["items"] == []


def test_a_server_gone_at_call_time_is_a_clear_tool_error(admin: Admin, mcp: Mcp) -> None:
    with sdk_server() as url:
        _register(admin, url)
    mcpclient.forget_sessions()
    result = mcp.call("run_tool", {"vendor": "weather", "name": "get-forecast", "input": {"city": "Oslo"}})
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] in ("vendor_error", "vendor_timeout")


def test_a_failed_sync_is_remembered_and_a_second_registration_is_refused(admin: Admin) -> None:
    with sdk_server() as url:
        _register(admin, url)
        assert _register(admin, url).status_code == 409
    failed = admin.call("POST", "/v1/upstreams/weather/sync")
    assert failed.status_code == 502
    listed = admin.call("GET", "/v1/upstreams/weather").json_body
    assert listed["last_sync"]["ok"] is False and listed["last_sync"]["message"]
    assert admin.call("POST", "/v1/upstreams/nobody/sync").status_code == 404


@pytest.mark.parametrize(("body", "field"), [
    ({"vendor": "Bad Name", "url": "http://127.0.0.1:9/mcp"}, "vendor"),
    ({"vendor": "w", "url": "ftp://127.0.0.1/mcp"}, "url"),
    ({"vendor": "w", "url": "http://user:pw@127.0.0.1/mcp"}, "url"),
    ({"vendor": "w", "url": "http://127.0.0.1:9/{x}"}, "url"),
    ({"vendor": "w", "url": "http://127.0.0.1:9/mcp", "connection": "cn-none"}, "connection"),
    ({"vendor": "w", "url": "http://127.0.0.1:9/mcp", "extra": 1}, "extra"),
])
def test_bad_registrations_are_refused_naming_the_field(admin: Admin, body: dict[str, Any], field: str) -> None:
    answer = admin.call("POST", "/v1/upstreams", body)
    assert (answer.status_code, answer.json_body["error"]["field"]) == (400, field)
    assert admin.call("GET", "/v1/upstreams").json_body["items"] == []


@pytest.mark.parametrize("command", [
    "npx -y @modelcontextprotocol/server-everything",
    "uvx mcp-server-fetch",
    "API_KEY=sk-secret-123 node build/index.js",
    "/usr/local/bin/mcp-server --stdio",
    "docker run -i --rm mcp/fetch",
])
def test_a_stdio_command_is_refused_saying_how_to_serve_it_over_http(admin: Admin, command: str) -> None:
    # GIVEN the command a stdio MCP server's README gives, pasted where the URL goes
    # WHEN it is registered
    answer = admin.call("POST", "/v1/upstreams", {"vendor": "fetch", "url": command})
    # THEN it is refused naming the url, saying Workset speaks Streamable HTTP and how to bridge a
    # stdio server, without the command (whose arguments may hold a key) and without registering
    error = answer.json_body["error"]
    assert (answer.status_code, error["field"]) == (400, "url")
    assert "Streamable HTTP" in error["message"] and "stdio" in error["message"]
    assert "supergateway --stdio" in error["message"] and "/mcp" in error["message"]
    assert command not in error["message"] and "sk-secret" not in error["message"]
    assert admin.call("GET", "/v1/upstreams").json_body["items"] == []


@pytest.mark.parametrize("url", ["mcp.example.com/mcp", "localhost:8100/mcp", "127.0.0.1:8100/mcp"])
def test_a_host_without_its_scheme_is_told_to_add_it(admin: Admin, url: str) -> None:
    answer = admin.call("POST", "/v1/upstreams", {"vendor": "w", "url": url})
    error = answer.json_body["error"]
    assert (answer.status_code, error["field"]) == (400, "url")
    assert "https://" in error["message"] and "stdio" not in error["message"]


@pytest.fixture
def hostile() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A handshake-era server listing a good tool, a tool with an unusable schema and a nameless
    one; it records the headers of every request."""
    seen: list[dict[str, str]] = []
    tools = [{"name": "echo", "description": "Echo text back.", "inputSchema": {"type": "object"}},
             {"name": "bad", "inputSchema": {"type": "object", "properties": {"a": {"pattern": "(?=x)"}}}},
             {"description": "no name"}]

    class Handler(JsonHandler):
        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({name.lower(): value for name, value in self.headers.items()})
            method = message["method"]
            if method == "server/discover":
                self.reply(400, {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "no"}})
            elif method == "notifications/initialized":
                self.reply(202, None)
            else:
                value = {"initialize": {"protocolVersion": "2025-11-25", "capabilities": {}},
                         "tools/list": {"tools": tools},
                         "tools/call": {"content": [{"type": "text", "text": "echoed"}]}}[method]
                self.reply(200, {"jsonrpc": "2.0", "id": message["id"], "result": value})

    with serving(Handler) as base:
        yield f"{base}/mcp", seen


def test_a_servers_unusable_tools_are_skipped_with_why_and_its_credential_travels(admin: Admin, mcp: Mcp,
                                                                                  hostile: Any) -> None:
    url, seen = hostile
    connection = admin.call("POST", "/v1/connections", {"vendor": "echoes", "hosts": [url.split("/")[2]],
                                                        "auth": {"type": "bearer", "token": "tok-123456"}})
    answer = _register(admin, url, vendor="echoes", connection=connection.json_body["id"]).json_body
    outcomes = {line["name"]: (line["outcome"], line.get("reason", "")) for line in answer["sync"]["tools"]}
    assert outcomes["echo"] == ("published", "")
    assert outcomes["bad"][0] == "skipped" and "RE2" in outcomes["bad"][1]
    assert outcomes["tool-2"] == ("skipped", "the server listed a tool without a valid name")
    # WHEN the published tool is called, the connection's credential goes with every request
    waiting = mcp.call("run_tool", {"vendor": "echoes", "name": "echo", "input": {}})
    run = admin.call("POST", f"/v1/approvals/{waiting['structuredContent']['run_id']}/approve").json_body
    assert run["result"]["content"] == [{"type": "text", "text": "echoed"}]
    assert {headers.get("authorization") for headers in seen} == {"Bearer tok-123456"}
    assert "tok-123456" not in json.dumps(run)


def test_the_everything_server_is_a_vendor_too(admin: Admin, mcp: Mcp, everything_url: str) -> None:
    # WHEN the npm reference server is registered
    answer = _register(admin, everything_url, vendor="everything").json_body
    # THEN its tools are published (it speaks the handshake era) and its echo answers
    assert answer["revision"] == "2025-11-25"
    assert _names(answer)["echo"] == "published"
    echo = admin.call("GET", "/v1/tools/everything/echo").json_body["versions"][-1]
    assert echo["annotations"]["readOnlyHint"] is True  # so it runs without a person
    result = mcp.call("run_tool", {"vendor": "everything", "name": "echo", "input": {"message": "hello"}})
    assert result["isError"] is False, result
    assert "hello" in result["content"][0]["text"]


def test_a_stdio_server_behind_a_bridge_is_a_vendor(admin: Admin, mcp: Mcp, bridged_url: str) -> None:
    # GIVEN a server that speaks only stdio, served over Streamable HTTP by supergateway on 127.0.0.1
    # WHEN its bridge's URL is registered
    answer = _register(admin, bridged_url, vendor="everything")
    # THEN its tools are published and a call goes through the bridge to the stdio server and back
    assert answer.status_code == 201, answer.json_body
    assert _names(answer.json_body)["echo"] == "published"
    result = mcp.call("run_tool", {"vendor": "everything", "name": "echo", "input": {"message": "over stdio"}})
    assert result["isError"] is False, result
    assert "over stdio" in result["content"][0]["text"]


def test_a_bridge_on_a_private_address_is_refused_where_private_networks_are_off(
        admin: Admin, bridged_url: str, settings_env: Any) -> None:
    # GIVEN a deployment that calls only public addresses, and a bridge listening on 127.0.0.1
    settings_env(WORKSET_ALLOW_PRIVATE_NETWORK="false")
    # WHEN the bridge is registered
    answer = _register(admin, bridged_url, vendor="everything")
    # THEN the outbound guard refuses it before any request, and nothing is registered
    assert (answer.status_code, answer.json_body["error"]["code"]) == (400, "forbidden_destination")
    assert admin.call("GET", "/v1/upstreams").json_body["items"] == []


def test_the_sweep_queues_an_hourly_sync_of_each_server(admin: Admin, client: Client, notes: Any) -> None:
    _register(admin, notes[0])
    # GIVEN a sweep within the hour: nothing to sync
    sweep_at(admin, utcnow() + timedelta(minutes=30))
    assert take_bodies(settings().sweep_queue) == []
    # WHEN a sweep runs more than an hour after the last sync
    sweep_at(admin, utcnow() + timedelta(hours=2))
    messages = take_bodies(settings().sweep_queue)
    # THEN the server is handed to the work queue, and the worker syncs it
    assert messages == [{"type": "sync_upstream", "account_id": messages[0]["account_id"], "vendor": "weather"}]
    before = admin.call("GET", "/v1/upstreams/weather").json_body["synced_at"]
    work(client, messages)
    after = admin.call("GET", "/v1/upstreams/weather").json_body
    assert after["synced_at"] > before and after["last_sync"]["ok"] is True


@pytest.fixture
def echoing() -> Iterator[str]:
    """A handshake-era server that lists its tools once, then refuses tools/list with an error
    quoting the Authorization header it got, decoded (what a careless or hostile server does)."""
    import base64

    listed: list[int] = []

    class Handler(HandshakeHandler):
        def answer(self, message: dict[str, Any]) -> None:
            if not listed:
                listed.append(1)
                self.result(message, {"tools": [
                    {"name": "echo", "description": "Echo text back.", "inputSchema": {"type": "object"}}]})
            else:
                sent = base64.b64decode(self.headers["Authorization"].removeprefix("Basic ")).decode()
                self.reply(200, {"jsonrpc": "2.0", "id": message["id"], "error": {
                    "code": -32000, "message": f"user {sent} may not list; password {sent.partition(':')[2]!r}"}})

    with serving(Handler) as base:
        yield f"{base}/mcp"


def test_a_server_quoting_its_decoded_credential_in_an_error_never_shows_it(admin: Admin, echoing: str) -> None:
    # GIVEN a server reached with a basic credential, registered while it behaved
    password = "pw-Very-Secret-42"
    connection = admin.call("POST", "/v1/connections", {"vendor": "echoes", "hosts": [echoing.split("/")[2]],
                                                        "auth": {"type": "basic", "username": "svc",
                                                                 "password": password}})
    assert _register(admin, echoing, vendor="echoes", connection=connection.json_body["id"]).status_code == 201
    # WHEN a sync meets an error that quotes the decoded credential
    failed = admin.call("POST", "/v1/upstreams/echoes/sync")
    remembered = admin.call("GET", "/v1/upstreams/echoes").json_body
    # THEN the sync fails, and neither its answer nor what is remembered of it holds the password
    assert failed.status_code == 502 and "may not list" in failed.json_body["error"]["message"]
    assert password not in json.dumps(failed.json_body)
    assert password not in json.dumps(remembered)


@pytest.fixture
def stateful() -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    """A keyless handshake-era server that mints a session per initialize and records, for every
    tools/call, the session it came in: what a server keeping a browser per session sees."""
    calls: list[tuple[str, str | None]] = []
    minted: list[str] = []

    class Handler(JsonHandler):
        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            method = message["method"]
            if method == "server/discover":
                self.reply(400, {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "no"}})
            elif method == "notifications/initialized":
                self.reply(202, None)
            elif method == "initialize":
                minted.append(f"session-{len(minted) + 1}")
                body = json.dumps({"jsonrpc": "2.0", "id": message["id"],
                                   "result": {"protocolVersion": "2025-11-25", "capabilities": {}}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Mcp-Session-Id", minted[-1])
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif method == "tools/list":
                self.reply(200, {"jsonrpc": "2.0", "id": message["id"], "result": {"tools": [
                    {"name": "page", "description": "Read the page the browser shows.",
                     "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}]}})
            else:
                calls.append((message["params"]["name"], self.headers.get("Mcp-Session-Id")))
                self.reply(200, {"jsonrpc": "2.0", "id": message["id"],
                                 "result": {"content": [{"type": "text", "text": "a page"}]}})

    with serving(Handler) as base:
        yield f"{base}/mcp", calls


def test_two_accounts_on_one_keyless_server_never_share_its_session(client: Client, admin: Admin,
                                                                    other_admin: Admin, stateful: Any) -> None:
    url, calls = stateful
    # GIVEN two accounts that registered the same keyless server, each with an agent that has its tool
    agents = []
    for who in (admin, other_admin):
        assert _register(who, url, vendor="browser").status_code == 201
        agent = Mcp(client, who.create_agent()["api_key"])
        agent.call("promote", {"vendor": "browser", "name": "page"})
        agents.append(agent)
    # WHEN each agent calls it in turn, in the same warm instance
    for agent in (*agents, agents[0]):
        assert agent.call("browser__page", {})["isError"] is False
    # THEN each account's calls travel in a session of its own
    sessions = [session for _, session in calls]
    assert None not in sessions
    assert sessions[0] == sessions[2] != sessions[1]


class _Cut(BaseException):
    """The Lambda's timeout: the worker stops mid-sync, nothing after runs."""


def test_a_sync_cut_short_is_remembered_and_not_handed_out_again_within_the_hour(
        admin: Admin, notes: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.catalog import imports, upstreams

    _register(admin, notes[0])
    start = utcnow() + timedelta(hours=2)
    assert upstreams.queue_due(start) == 1
    message = take_bodies(settings().sweep_queue)[0]
    # GIVEN a server whose sync the worker cannot finish in time (a list so large that publishing
    # it outlasts the Lambda), so the worker is cut off in the middle
    def outlasting(*args: Any, **kwargs: Any) -> Any:
        raise _Cut()

    monkeypatch.setattr(imports, "apply", outlasting)
    with pytest.raises(_Cut):
        upstreams.handle_sync(message, start)
    # WHEN the sweeps of the next hour look for servers to sync
    queued = [upstreams.queue_due(start + timedelta(minutes=minutes)) for minutes in (5, 30, 55)]
    # THEN none hands the server out again (each would cost another cut-off worker, forever), and
    # the server's last sync says it did not finish
    assert queued == [0, 0, 0]
    last = admin.call("GET", "/v1/upstreams/weather").json_body["last_sync"]
    assert last["ok"] is False and "did not finish" in last["message"]
    # AND an hour on, it is tried again
    assert upstreams.queue_due(start + timedelta(minutes=61)) == 1


KEY = "k3y-Very-Secret-9"


@pytest.fixture
def keyed() -> Iterator[tuple[str, list[str]]]:
    """A handshake-era server that wants its key as `?api_key=` (as many hosted MCP servers do):
    without it, HTTP 401. It records the path and query of every request."""
    paths: list[str] = []

    class Handler(JsonHandler):
        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            paths.append(self.path)
            method = message["method"]
            if f"api_key={KEY}" not in self.path:
                self.reply(401, {"error": "no key"})
            elif method == "notifications/initialized":
                self.reply(202, None)
            elif method == "server/discover":
                self.reply(400, {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "no"}})
            else:
                value = {"initialize": {"protocolVersion": "2025-11-25", "capabilities": {}},
                         "tools/list": {"tools": [{"name": "echo", "description": "Echo text back.",
                                                   "inputSchema": {"type": "object"}}]},
                         "tools/call": {"content": [{"type": "text", "text": "echoed"}]}}[method]
                self.reply(200, {"jsonrpc": "2.0", "id": message["id"], "result": value})

    with serving(Handler) as base:
        yield f"{base}/mcp", paths


def test_a_server_keyed_in_its_query_registers_with_a_query_connection(admin: Admin, mcp: Mcp, keyed: Any) -> None:
    url, paths = keyed
    # GIVEN the server's key kept as a connection that sends it as the query parameter api_key
    connection = admin.call("POST", "/v1/connections", {"vendor": "keyed", "hosts": [url.split("/")[2]],
                                                        "auth": {"type": "query", "name": "api_key", "value": KEY}})
    # WHEN the server is registered by its bare endpoint with that connection
    answer = _register(admin, url, vendor="keyed", connection=connection.json_body["id"])
    # THEN it registers (the key went with the list), and a call carries the key to the server
    assert answer.status_code == 201, answer.body
    assert _names(answer.json_body) == {"echo": "published"}
    waiting = mcp.call("run_tool", {"vendor": "keyed", "name": "echo", "input": {}})
    run = admin.call("POST", f"/v1/approvals/{waiting['structuredContent']['run_id']}/approve").json_body
    assert run["result"]["content"] == [{"type": "text", "text": "echoed"}]
    assert paths and all(path.startswith("/mcp?") and f"api_key={KEY}" in path for path in paths)
    # AND neither the run, nor a dry run's preview, nor the server's listing shows the key
    preview = mcp.call("run_tool", {"vendor": "keyed", "name": "echo", "input": {}, "dryRun": True})
    assert KEY not in json.dumps(run) + json.dumps(preview) + admin.call("GET", "/v1/upstreams").body.decode()


def test_a_key_in_a_servers_url_reaches_no_agent_and_no_page(admin: Admin, mcp: Mcp, console: Any,
                                                             keyed: Any) -> None:
    url, _ = keyed
    # GIVEN a server registered with its key in its URL (no connection)
    assert _register(admin, f"{url}?api_key={KEY}", vendor="keyed").status_code == 201
    # WHEN an agent previews a call of its tool
    preview = mcp.call("run_tool", {"vendor": "keyed", "name": "echo", "input": {}, "dryRun": True})
    # THEN the preview names the server's host, not its path or its query's values
    host = url.rsplit("/", 1)[0]
    assert preview["structuredContent"]["preview"]["url"] == f"{host}/…?api_key=…"
    # AND the admin API and the console show the endpoint with the query's values hidden
    shown = [admin.call("GET", "/v1/upstreams").body.decode(), admin.call("GET", "/v1/tools/keyed/echo").body.decode(),
             console.get("/console/upstreams").body.decode(), console.get("/console/tools/keyed/echo").body.decode()]
    assert all(KEY not in page for page in shown)
    assert f"{url}?api_key=…" in shown[0]
    # AND the calls still carry it
    waiting = mcp.call("run_tool", {"vendor": "keyed", "name": "echo", "input": {}})
    run = admin.call("POST", f"/v1/approvals/{waiting['structuredContent']['run_id']}/approve").json_body
    assert run["result"]["content"] == [{"type": "text", "text": "echoed"}]


def test_a_key_in_a_servers_url_reaches_no_approval_nor_what_changed_since(admin: Admin, mcp: Mcp, agent: Any,
                                                                           console: Any, keyed: Any) -> None:
    url, _ = keyed
    # GIVEN a server registered with its key in its URL, and a person's approval of its tool
    assert _register(admin, f"{url}?api_key={KEY}", vendor="keyed").status_code == 201
    # (a destructive write, by MCP's default hints, asks on every call unless its approvals stand)
    assert admin.call("PUT", "/v1/tools/keyed/echo/approval-policy", {"policy": "first_call"}).status_code == 200
    waiting = mcp.call("run_tool", {"vendor": "keyed", "name": "echo", "input": {}})["structuredContent"]
    assert admin.call("POST", f"/v1/approvals/{waiting['run_id']}/approve").status_code == 200
    # WHEN the agent's decisions are listed
    decisions = admin.call("GET", f"/v1/agents/{agent['id']}/approvals")
    # THEN the request shape shows the query's names, not their values
    assert KEY not in decisions.body.decode()
    assert decisions.json_body["items"][0]["request_shape"]["query"] == "api_key=…"
    # AND WHEN that decision is one from before request shapes (every part of the shape is new to it)
    ApprovalItem(agent_id=agent["id"], sk=approval_sk("keyed", "echo")).update(actions=[ApprovalItem.shape.remove()])
    again = mcp.call("run_tool", {"vendor": "keyed", "name": "echo", "input": {}})["structuredContent"]
    assert again["status"] == "awaiting_approval"
    # THEN what changed since the decision shows the query without its values, in the API and the console
    pending = admin.call("GET", "/v1/approvals")
    since = pending.json_body["items"][0]["since_decision"]
    assert since["changes"]["query"] == {"from": None, "to": "api_key=…"}
    page = console.get(f"/console/approvals/{again['run_id']}").body.decode()
    assert "api_key=…" in page
    assert KEY not in pending.body.decode() + page


@pytest.fixture
def restless() -> Iterator[str]:
    """A handshake-era server that describes its three tools anew on every tools/list (a hostile
    or broken server: each sync brings three new versions)."""
    lists: list[int] = []

    class Handler(HandshakeHandler):
        def answer(self, message: dict[str, Any]) -> None:
            lists.append(1)
            tools = [{"name": f"tool_{index}", "description": f"Tool {index}, as listed {len(lists)} times.",
                      "inputSchema": {"type": "object"}} for index in range(3)]
            self.result(message, {"tools": tools})

    with serving(Handler) as base:
        yield f"{base}/mcp"

@pytest.fixture
def capped(admin: Admin, restless: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """`restless` registered as the vendor "restless" (3 versions) under a day's cap of 7 new
    versions: (its account, today's UTC day)."""
    from chalicelib.catalog import imports
    from chalicelib.store import upstreams as upstream_store

    monkeypatch.setattr(imports, "MAX_VERSIONS_PER_DAY", 7)
    assert _register(admin, restless, vendor="restless").status_code == 201
    (upstream,) = upstream_store.list_fleet()
    return upstream.account_id, f"{utcnow():%Y-%m-%d}"


def test_a_server_changing_more_than_a_days_versions_publishes_nothing_more_that_day(
        admin: Admin, capped: tuple[str, str]) -> None:
    from chalicelib.catalog import upstreams

    # GIVEN a server that changes every tool on every sync, registered (3 versions) under a day's cap of 7
    assert admin.call("POST", "/v1/upstreams/restless/sync").status_code == 200  # 6
    # WHEN it is synced again the same day (3 more would pass the cap)
    refused = admin.call("POST", "/v1/upstreams/restless/sync")
    # THEN the sync publishes nothing, says why and how many more the day allows, and is remembered so
    assert refused.status_code == 502 and "too many changes" in refused.json_body["error"]["message"]
    assert "1 more today" in refused.json_body["error"]["message"]
    versions = admin.call("GET", "/v1/tools/restless/tool-0").json_body["versions"]
    assert [version["version"] for version in versions] == [1, 2]
    last = admin.call("GET", "/v1/upstreams/restless").json_body["last_sync"]
    assert last["ok"] is False and "too many changes" in last["message"]
    # AND the next day's hourly sync publishes again
    tomorrow = utcnow() + timedelta(days=1)
    assert upstreams.queue_due(tomorrow) == 1
    upstreams.handle_sync(take_bodies(settings().sweep_queue)[0], tomorrow)
    versions = admin.call("GET", "/v1/tools/restless/tool-0").json_body["versions"]
    assert [version["version"] for version in versions] == [1, 2, 3]
    assert admin.call("GET", "/v1/upstreams/restless").json_body["last_sync"]["ok"] is True


def test_two_syncs_at_once_cannot_both_pass_the_days_cap(admin: Admin, capped: tuple[str, str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.store import daycounts
    from chalicelib.store import upstreams as upstream_store

    # GIVEN a server that changes every tool on every sync, a day's cap of 7, and a registration (3 versions)
    account_id, day = capped
    # WHEN another sync counts its 3 new versions after this one has planned its own, and before it counts them
    real = daycounts.count

    def raced(*args: Any) -> bool:
        assert real(account_id, "restless", day, 3, 7)
        return real(*args)

    monkeypatch.setattr(daycounts, "count", raced)
    refused = admin.call("POST", "/v1/upstreams/restless/sync")
    # THEN this one publishes nothing, says why, and the day's count stays within the cap
    assert refused.status_code == 502 and "too many changes" in refused.json_body["error"]["message"]
    versions = admin.call("GET", "/v1/tools/restless/tool-0").json_body["versions"]
    assert [version["version"] for version in versions] == [1]
    assert daycounts.counted(account_id, "restless", day) == 6
    assert "too many changes" in upstream_store.list_fleet()[0].sync["message"]  # type: ignore[index]


def test_versions_the_store_refused_are_not_counted_against_the_day(admin: Admin, capped: tuple[str, str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.base.errors import Busy
    from chalicelib.store import daycounts
    from chalicelib.store import tools as tool_store

    # GIVEN a day's cap of 7 and a registration (3 versions)
    account_id, day = capped
    # WHEN a sync's 3 new versions are counted and then refused by a store too busy to write them
    def busy(*args: Any, **kwargs: Any) -> None:
        raise Busy("the store is busy")

    with monkeypatch.context() as patched:
        patched.setattr(tool_store, "put_versions", busy)
        failed = admin.call("POST", "/v1/upstreams/restless/sync").json_body
    assert failed["sync"]["counts"]["failed"] == 3
    # THEN the day's count is as it was, and a sync publishes them later that day
    assert daycounts.counted(account_id, "restless", day) == 3
    assert admin.call("POST", "/v1/upstreams/restless/sync").status_code == 200
    versions = admin.call("GET", "/v1/tools/restless/tool-0").json_body["versions"]
    assert [version["version"] for version in versions] == [1, 2]
    assert daycounts.counted(account_id, "restless", day) == 6


def test_a_days_count_takes_versions_up_to_the_cap_and_starts_again_the_next_day(admin: Admin, restless: str) -> None:
    from chalicelib.store import daycounts
    from chalicelib.store import upstreams as upstream_store

    assert _register(admin, restless, vendor="restless").status_code == 201
    (upstream,) = upstream_store.list_fleet()
    key = (upstream.account_id, upstream.vendor)
    day = f"{utcnow():%Y-%m-%d}"
    assert daycounts.counted(*key, day) == 3
    # the day's count takes what fits under the cap, exactly up to it, and nothing past it
    assert daycounts.count(*key, day, 4, 7)
    assert not daycounts.count(*key, day, 1, 7)
    assert daycounts.counted(*key, day) == 7
    # another day starts its own count (a count over the cap is refused whole)
    assert not daycounts.count(*key, "2999-01-01", 8, 7)
    assert daycounts.count(*key, "2999-01-01", 2, 7)
    assert daycounts.counted(*key, "2999-01-01") == 2
    assert daycounts.counted(*key, day) == 7
    # what is given back makes room again, and never takes the count below zero
    daycounts.give_back(*key, "2999-01-01", 2)
    daycounts.give_back(*key, "2999-01-01", 1)
    assert daycounts.counted(*key, "2999-01-01") == 0


def test_a_vendors_imports_and_its_servers_syncs_share_the_days_cap(admin: Admin, capped: tuple[str, str]) -> None:
    # GIVEN a day's cap of 7, a server registered under a vendor (3 versions), and an OpenAPI
    # document imported under the same vendor (3 more)
    document = {"openapi": "3.0.3", "info": {"title": "More", "version": "1"}, "servers": [{"url": "http://127.0.0.1:9"}],
                "paths": {f"/more{index}": {"get": {"operationId": f"more{index}", "responses": {}}} for index in range(3)}}
    imported = admin.call("POST", "/v1/imports/openapi", {"vendor": "restless", "document": document})
    assert imported.json_body["counts"]["published"] == 3
    # WHEN the server is synced (3 changed tools would pass the vendor's cap)
    refused = admin.call("POST", "/v1/upstreams/restless/sync")
    # THEN the sync publishes nothing and says how many more the vendor's day allows
    assert refused.status_code == 502 and "1 more today" in refused.json_body["error"]["message"]
    versions = admin.call("GET", "/v1/tools/restless/tool-0").json_body["versions"]
    assert [version["version"] for version in versions] == [1]
