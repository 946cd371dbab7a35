"""Vendor credentials beyond a bearer token: HTTP Basic, a key in the query, OAuth 2 client
credentials and authorization code (against fake token endpoints on 127.0.0.1), reconnecting in
place, and a connection's recent calls. Every secret stays out of answers, previews, run records,
logs and error messages; token endpoints are hostile."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, quote, quote_plus, urlsplit

import pytest
from chalice.test import Client

from chalicelib.base.clock import utcnow
from chalicelib.net import outbound
from tests.conftest import Admin, Mcp, Vendor, log_lines, serving
from tests.test_console import Console

CLIENT_SECRET = "cs_live_client_secret_0123456789"
PASSWORD = "pa55-w0rd-very-secret"
QUERY_KEY = "qk secret/+&=value-0123456789"  # needs URL encoding in every form


# --- fake servers ---------------------------------------------------------------------------------


def _reply(handler: BaseHTTPRequestHandler, status: int, body: bytes, kind: str = "application/json",
           location: str | None = None) -> None:
    """Answer a fake server's request with `body` (and a `Location`, for a redirect)."""
    handler.send_response(status)
    handler.send_header("Content-Type", kind)
    if location is not None:
        handler.send_header("Location", location)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@dataclass
class TokenEndpoint:
    """An OAuth token endpoint on 127.0.0.1: issues numbered tokens, rotates refresh tokens
    strictly (each works once, from the moment it is received), and answers whatever `scripted`
    holds first, if anything. `hold` (a grant type): the first request of that grant is answered
    only once `release` is set (`arrived` is set when it comes)."""

    url: str = ""
    received: list[dict[str, Any]] = field(default_factory=list)
    scripted: list[tuple[int, bytes, str]] = field(default_factory=list)
    issued: int = 0
    expires_in: Any = 3600
    live_refresh: set[str] = field(default_factory=set)
    strict_rotation: bool = True
    release: threading.Event = field(default_factory=threading.Event)
    delay: float = 0.0
    hold: str | None = None
    arrived: threading.Event = field(default_factory=threading.Event)
    location: str | None = None  # sent with a 3xx answer

    def answer(self, form: dict[str, str]) -> tuple[int, bytes, str]:
        if self.scripted:
            return self.scripted.pop(0)
        grant = form.get("grant_type")
        if grant == "refresh_token":
            if form.get("refresh_token") not in self.live_refresh:
                return 400, json.dumps({"error": "invalid_grant", "error_description": form.get("refresh_token")}
                                       ).encode(), "application/json"
            if self.strict_rotation:
                self.live_refresh.discard(form["refresh_token"])
        elif grant == "authorization_code" and form.get("code") != "good-code":
            return 400, b'{"error": "invalid_grant"}', "application/json"
        self.issued += 1
        body: dict[str, Any] = {"access_token": f"at-{self.issued}-{'x' * 12}", "token_type": "Bearer",
                                "expires_in": self.expires_in}
        if grant != "client_credentials":
            body["refresh_token"] = f"rt-{self.issued}-{'y' * 12}"
            self.live_refresh.add(body["refresh_token"])
        return 200, json.dumps(body).encode(), "application/json"

    def grants(self) -> list[str]:
        return [request["form"].get("grant_type", "") for request in self.received]


@pytest.fixture(name="tokens")
def tokens_fixture() -> Iterator[TokenEndpoint]:
    state = TokenEndpoint()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            form = {name: values[0] for name, values in parse_qs(raw.decode()).items()}
            state.received.append({"path": self.path, "headers": dict(self.headers), "form": form})
            answer = state.answer(form)  # a vendor rotates on receipt, however late it answers
            if state.hold is not None and form.get("grant_type") == state.hold:
                state.hold = None
                state.arrived.set()
                state.release.wait(30)
            elif state.delay:
                state.release.wait(state.delay)
            _reply(self, *answer, location=state.location if 300 <= answer[0] < 400 else None)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        state.url = f"{url}/oauth/token"
        yield state
        state.release.set()


@dataclass
class Api:
    """A vendor API on 127.0.0.1 that answers 401 to the bearer tokens in `refused` and echoes the
    request's path and query otherwise."""

    url: str = ""
    received: list[dict[str, Any]] = field(default_factory=list)
    refused: set[str] = field(default_factory=set)
    refuse_all: bool = False


@pytest.fixture(name="api")
def api_fixture() -> Iterator[Api]:
    state = Api()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            authorization = self.headers.get("Authorization", "")
            state.received.append({"path": self.path, "authorization": authorization})
            refused = state.refuse_all or authorization.removeprefix("Bearer ") in state.refused
            body = json.dumps({"error": "invalid_token"} if refused else {"ok": True, "path": self.path}).encode()
            _reply(self, 401 if refused else 200, body)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        state.url = url
        yield state


# --- helpers --------------------------------------------------------------------------------------


def _connect(admin: Admin, auth: dict[str, Any], **extra: Any) -> dict[str, Any]:
    response = admin.call("POST", "/v1/connections", {"vendor": "acme", "auth": auth, **extra})
    assert response.status_code == 201, response.body
    return response.json_body


def _publish(admin: Admin, url: str, connection_id: str, *, method: str = "GET", **request: Any) -> None:
    annotations = {"readOnlyHint": True} if method == "GET" else {"destructiveHint": False}
    admin.publish(vendor="acme", name="orders", description="List Acme orders.",
                  input_schema={"type": "object", "properties": {"page": {"type": "integer"}}},
                  annotations=annotations, connection=connection_id,
                  request={"method": method, "url": f"{url}/orders?status=open", **request})


def _run(mcp: Mcp, **arguments: Any) -> dict[str, Any]:
    return mcp.call("run_tool", {"vendor": "acme", "name": "orders", "input": {"page": 2}, **arguments})


def _error(result: dict[str, Any]) -> dict[str, Any]:
    assert result["isError"] is True, result
    return result["structuredContent"]["error"]


def _client_credentials(admin: Admin, tokens: TokenEndpoint, **extra: Any) -> dict[str, Any]:
    return _connect(admin, {"type": "oauth2_client_credentials", "token_url": tokens.url, "client_id": "acme-app",
                            "client_secret": CLIENT_SECRET, "scope": "orders:read"}, **extra)


def _authorization_code(admin: Admin, tokens: TokenEndpoint) -> dict[str, Any]:
    return _connect(admin, {"type": "oauth2_authorization_code", "authorize_url": "https://login.acme.test/authorize",
                            "token_url": tokens.url, "client_id": "acme-app", "client_secret": CLIENT_SECRET,
                            "scopes": ["orders:read", "offline_access"]})


def _connection(admin: Admin, connection_id: str) -> dict[str, Any]:
    return admin.call("GET", f"/v1/connections/{connection_id}").json_body


def _later(monkeypatch: pytest.MonkeyPatch, delta: timedelta) -> None:
    """Move the connections' clock (token expiry and refresh leases are judged by it) `delta` ahead
    of the wall clock."""
    monkeypatch.setattr("chalicelib.access.credentials.utcnow", lambda: utcnow() + delta)
    monkeypatch.setattr("chalicelib.access.token_refresh.utcnow", lambda: utcnow() + delta)


def _no_secret_anywhere(admin: Admin, secrets: list[str], *texts: str) -> None:
    runs = admin.call("GET", f"/v1/agents/{admin.call('GET', '/v1/agents').json_body['items'][0]['id']}/runs")
    for run in runs.json_body["items"]:
        texts += (admin.call("GET", f"/v1/runs/{run['id']}").body.decode(),)
    for text in texts:
        for secret in secrets:
            assert secret not in text


# --- basic and query --------------------------------------------------------------------------------


def test_basic_auth_sends_the_authorization_header_and_never_shows_the_password(
        admin: Admin, mcp: Mcp, vendor: Vendor, logged: pytest.LogCaptureFixture) -> None:
    # GIVEN a basic connection and a tool using it
    connection = _connect(admin, {"type": "basic", "username": "acme-user", "password": PASSWORD})
    _publish(admin, vendor.url, connection["id"])
    # WHEN the tool is called
    result = _run(mcp)
    # THEN the vendor got HTTP Basic, and nothing shown holds the password or the encoded pair
    assert result["isError"] is False
    encoded = base64.b64encode(f"acme-user:{PASSWORD}".encode()).decode()
    assert vendor.received[0]["headers"]["Authorization"] == f"Basic {encoded}"
    assert connection["auth"] == {"type": "basic"} and connection["auth_type"] == "basic"
    _no_secret_anywhere(admin, [PASSWORD, encoded], json.dumps(result), json.dumps(connection), logged.text)


def test_a_query_key_goes_with_every_request_and_is_redacted_everywhere(
        admin: Admin, mcp: Mcp, api: Api, logged: pytest.LogCaptureFixture) -> None:
    # GIVEN a key that needs URL encoding, sent as the query parameter api_key
    connection = _connect(admin, {"type": "query", "name": "api_key", "value": QUERY_KEY})
    _publish(admin, api.url, connection["id"])
    # WHEN the tool is called, and a preview asked for
    result = _run(mcp)
    preview = _run(mcp, dryRun=True)
    # THEN the vendor got the key beside the tool's own parameters (the read-only dry run reached it too)
    assert len(api.received) == 2
    query = parse_qs(urlsplit(api.received[0]["path"]).query)
    assert query == {"status": ["open"], "page": ["2"], "api_key": [QUERY_KEY]}
    # AND the vendor's echo of the URL comes back redacted, in the run record and logs too
    assert result["isError"] is False and "[redacted]" in result["structuredContent"]["path"]
    assert connection["auth"] == {"type": "query", "name": "api_key"}
    _no_secret_anywhere(admin, [QUERY_KEY, "qk+secret", "qk%20secret", "secret%2F"], json.dumps(result),
                        json.dumps(preview), logged.text)


def test_a_preview_of_a_write_redacts_the_query_key(admin: Admin, mcp: Mcp, api: Api) -> None:
    connection = _connect(admin, {"type": "query", "name": "key", "value": QUERY_KEY})
    _publish(admin, api.url, connection["id"], method="POST")
    result = _run(mcp, dryRun=True)
    url = result["structuredContent"]["preview"]["url"]
    assert url.endswith("?status=…&key=[redacted]")  # the template's own value hidden too (test_template_query.py)
    assert api.received == []


@pytest.mark.parametrize("request_part", [
    {"url": "URL/orders?key=mine"},
    {"params": [{"field": "page", "name": "key", "in": "query"}]},
    {"input_field": "key"},
])
def test_a_tool_that_sets_the_connections_query_parameter_is_refused_at_publish(
        admin: Admin, api: Api, request_part: dict[str, Any]) -> None:
    # GIVEN a connection that sends its key as `key`
    connection = _connect(admin, {"type": "query", "name": "key", "value": QUERY_KEY})
    properties: dict[str, Any] = {"page": {"type": "integer"}}
    request: dict[str, Any] = {"method": "GET", "url": f"{api.url}/orders"}
    if "url" in request_part:
        request["url"] = request_part["url"].replace("URL", api.url)
    if "params" in request_part:
        request["params"] = request_part["params"]
    if "input_field" in request_part:
        properties["key"] = {"type": "string"}
    # WHEN a tool would send a parameter of that name itself THEN it is refused, nothing stored
    response = admin.call("POST", "/v1/tools", {
        "vendor": "acme", "name": "orders", "description": "d", "annotations": {"readOnlyHint": True},
        "input_schema": {"type": "object", "properties": properties}, "connection": connection["id"],
        "request": request})
    assert response.status_code == 400, response.body
    assert response.json_body["error"]["code"] == "invalid_input" and "key" in response.json_body["error"]["message"]
    assert admin.call("GET", "/v1/tools/acme/orders").status_code == 404


# --- OAuth 2 client credentials ----------------------------------------------------------------------


def test_client_credentials_fetch_one_token_for_two_calls(admin: Admin, mcp: Mcp, api: Api,
                                                          tokens: TokenEndpoint) -> None:
    # GIVEN a client-credentials connection
    connection = _client_credentials(admin, tokens)
    _publish(admin, api.url, connection["id"])
    # WHEN the tool is called twice
    first, second = _run(mcp), _run(mcp)
    # THEN one token was fetched, with HTTP Basic client authentication, and both calls carried it
    assert first["isError"] is False and second["isError"] is False
    assert tokens.grants() == ["client_credentials"]
    sent = tokens.received[0]
    assert sent["form"] == {"grant_type": "client_credentials", "scope": "orders:read"}
    assert sent["headers"]["Authorization"] == "Basic " + base64.b64encode(
        f"acme-app:{CLIENT_SECRET}".encode()).decode()
    assert [request["authorization"] for request in api.received] == [f"Bearer at-1-{'x' * 12}"] * 2
    assert CLIENT_SECRET not in json.dumps(_connection(admin, connection["id"]))


def test_client_credentials_fetch_a_new_token_once_it_expires(admin: Admin, mcp: Mcp, api: Api,
                                                              tokens: TokenEndpoint,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    tokens.expires_in = 600
    connection = _client_credentials(admin, tokens)
    _publish(admin, api.url, connection["id"])
    _run(mcp)
    # WHEN the clock passes the token's expiry
    _later(monkeypatch, timedelta(seconds=600))
    _run(mcp)
    # THEN a second token was fetched and used
    assert tokens.grants() == ["client_credentials", "client_credentials"]
    assert api.received[-1]["authorization"] == f"Bearer at-2-{'x' * 12}"


def test_a_vendor_401_fetches_a_new_token_and_retries_once(admin: Admin, mcp: Mcp, api: Api,
                                                           tokens: TokenEndpoint) -> None:
    # GIVEN a vendor that no longer takes the first token
    connection = _client_credentials(admin, tokens)
    _publish(admin, api.url, connection["id"])
    api.refused.add(f"at-1-{'x' * 12}")
    # WHEN the tool is called THEN a new token is fetched and the call retried, once, successfully
    result = _run(mcp)
    assert result["isError"] is False
    assert tokens.grants() == ["client_credentials", "client_credentials"]
    assert [request["authorization"][-16:] for request in api.received] == [f"at-1-{'x' * 12}"[-16:],
                                                                            f"at-2-{'x' * 12}"[-16:]]


def test_a_vendor_refusing_every_token_is_retried_only_once(admin: Admin, mcp: Mcp, api: Api,
                                                            tokens: TokenEndpoint) -> None:
    connection = _client_credentials(admin, tokens)
    _publish(admin, api.url, connection["id"])
    api.refuse_all = True
    error = _error(_run(mcp))
    assert error["code"] == "vendor_error" and error["status"] == 401
    assert len(api.received) == 2 and len(tokens.received) == 2


HOSTILE_ANSWERS = {
    "server error": (500, b'{"error": "server_error"}', "application/json"),
    "html": (200, b"<html><body>Sign in</body></html>", "text/html"),
    "garbage": (200, b"\xff\xfe\x00garbage", "application/octet-stream"),
    "not an object": (200, b'["at-1"]', "application/json"),
    "no access token": (200, b'{"token_type": "bearer"}', "application/json"),
    "not bearer": (200, b'{"access_token": "abc", "token_type": "mac"}', "application/json"),
    "token with a newline": (200, b'{"access_token": "abc\\r\\nX-Evil: 1"}', "application/json"),
    "huge": (200, b'{"access_token": "' + b"a" * 200_000 + b'"}', "application/json"),
    "redirect": (302, b"", "text/plain"),
    "bare 401": (401, b"Unauthorized", "text/plain"),  # a proxy's, not the endpoint's word on the client
    "echoing the secret": (500, f'{{"error": "{CLIENT_SECRET}"}}'.encode(), "application/json"),
}


@pytest.mark.parametrize("answer", HOSTILE_ANSWERS.values(), ids=HOSTILE_ANSWERS.keys())
def test_a_token_endpoint_answering_no_token_fails_the_call_cleanly(admin: Admin, mcp: Mcp, api: Api,
                                                                    tokens: TokenEndpoint,
                                                                    answer: tuple[int, bytes, str]) -> None:
    # GIVEN a token endpoint that answers something that is not a token
    connection = _client_credentials(admin, tokens)
    _publish(admin, api.url, connection["id"])
    tokens.scripted.append(answer)
    tokens.location = f"{api.url}/stolen"  # where a redirect would lead
    # WHEN the tool is called THEN it fails with token_unavailable, the vendor untouched, no secret shown
    result = _run(mcp)
    error = _error(result)
    assert error["code"] == "token_unavailable" and error["vendor_acted"] is False
    assert CLIENT_SECRET not in json.dumps(result) and "Sign in" not in json.dumps(result)
    assert api.received == []
    # AND a passing hiccup does not need a person: the next call fetches a token and works
    assert _connection(admin, connection["id"])["status"] == "active"
    assert _run(mcp)["isError"] is False


def test_a_slow_token_endpoint_times_out_within_the_runs_deadline(admin: Admin, mcp: Mcp, api: Api,
                                                                  tokens: TokenEndpoint, settings_env) -> None:
    settings_env(WORKSET_VENDOR_TIMEOUT_SECONDS="0.5")
    connection = _client_credentials(admin, tokens)
    _publish(admin, api.url, connection["id"])
    tokens.delay = 30
    error = _error(_run(mcp))
    assert error["code"] == "token_unavailable" and "did not answer" in error["message"]
    assert api.received == []


def test_a_token_endpoint_refusing_the_client_marks_the_connection_for_reconnection(
        admin: Admin, mcp: Mcp, api: Api, tokens: TokenEndpoint) -> None:
    connection = _client_credentials(admin, tokens)
    _publish(admin, api.url, connection["id"])
    tokens.scripted.append((401, b'{"error": "invalid_client"}', "application/json"))
    error = _error(_run(mcp))
    assert error["code"] == "connection_needs_reconnect"
    assert f"http://127.0.0.1:8000/console/connections/{connection['id']}" in error["message"]
    assert _connection(admin, connection["id"])["status"] == "needs_reconnect"
    # a new secret in place makes it work again
    auth = {"type": "oauth2_client_credentials", "token_url": tokens.url, "client_id": "acme-app",
            "client_secret": "cs_new_secret_0000"}
    assert admin.call("PUT", f"/v1/connections/{connection['id']}/auth", {"auth": auth}).json_body["status"] == "active"
    assert _run(mcp)["isError"] is False


@pytest.mark.parametrize("address", ["169.254.169.254", "10.0.0.7", "::ffff:127.0.0.1"])
def test_a_private_or_metadata_token_url_is_refused_before_any_connection(
        admin: Admin, mcp: Mcp, api: Api, address: str, settings_env, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a token endpoint whose name resolves to a metadata or private address, and a socket
    # layer that fails the test if anything connects
    connection = _connect(admin, {"type": "oauth2_client_credentials", "token_url": "https://login.acme.test/token",
                                  "client_id": "acme-app", "client_secret": CLIENT_SECRET})
    _publish(admin, "https://api.acme.test", connection["id"])
    settings_env(WORKSET_ALLOW_PRIVATE_NETWORK="false")
    monkeypatch.setattr(outbound, "system_resolver", lambda host, port: [address])

    def no_connect(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(socket, "create_connection", no_connect)
    # WHEN the tool is called THEN the token request is refused for its destination
    error = _error(_run(mcp))
    assert error["code"] == "forbidden_destination"


def test_a_token_url_on_http_is_refused_where_private_networks_are_not_allowed(admin: Admin, settings_env) -> None:
    settings_env(WORKSET_ALLOW_PRIVATE_NETWORK="false")
    response = admin.call("POST", "/v1/connections", {"vendor": "acme", "auth": {
        "type": "oauth2_client_credentials", "token_url": "http://login.acme.test/token", "client_id": "c",
        "client_secret": CLIENT_SECRET}})
    assert response.status_code == 400
    assert response.json_body["error"]["field"] == "auth.oauth2_client_credentials.token_url"
    assert CLIENT_SECRET not in response.body.decode()
    assert admin.call("GET", "/v1/connections").json_body["items"] == []


# --- OAuth 2 authorization code --------------------------------------------------------------------


def _start(console: Console, connection_id: str) -> dict[str, str]:
    """Press Connect: answers the authorize URL's query."""
    answer = console.post(f"/console/connections/{connection_id}/connect")
    assert answer.status_code == 303, answer.body
    location = answer.headers["Location"]
    assert location.startswith("https://login.acme.test/authorize?")
    return {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}


def _callback(console: Console, query: str) -> Any:
    return console.get(f"/console/connections/callback?{query}")


def _connected(admin: Admin, console: Console, tokens: TokenEndpoint) -> dict[str, Any]:
    connection = _authorization_code(admin, tokens)
    sent = _start(console, connection["id"])
    answer = _callback(console, f"code=good-code&state={sent['state']}")
    assert answer.status_code == 303, answer.body
    return connection


def test_connect_redirects_to_the_vendor_with_state_and_a_pkce_challenge(admin: Admin, console: Console,
                                                                          tokens: TokenEndpoint) -> None:
    connection = _authorization_code(admin, tokens)
    assert connection["status"] == "not_connected"
    page = console.get(f"/console/connections/{connection['id']}")
    assert "form-action 'self' https://login.acme.test" in page.headers["Content-Security-Policy"]
    sent = _start(console, connection["id"])
    assert sent["response_type"] == "code" and sent["client_id"] == "acme-app"
    assert sent["redirect_uri"] == "http://127.0.0.1:8000/console/connections/callback"
    assert sent["scope"] == "orders:read offline_access"
    assert sent["code_challenge_method"] == "S256" and len(sent["code_challenge"]) == 43
    assert sent["state"].startswith(connection["id"] + ".") and len(sent["state"]) > 40
    assert _start(console, connection["id"])["state"] != sent["state"]  # a fresh one each time


def test_the_callback_exchanges_the_code_with_the_verifier_and_calls_work(admin: Admin, console: Console,
                                                                          mcp: Mcp, api: Api,
                                                                          tokens: TokenEndpoint) -> None:
    # GIVEN a connection a person is connecting
    connection = _authorization_code(admin, tokens)
    _publish(admin, api.url, connection["id"])
    assert _error(_run(mcp))["code"] == "connection_needs_reconnect"  # not connected yet
    sent = _start(console, connection["id"])
    # WHEN the vendor sends the person back with a code
    answer = _callback(console, f"code=good-code&state={sent['state']}")
    # THEN the code was exchanged with the PKCE verifier and client authentication, and calls work
    assert answer.status_code == 303 and answer.headers["Location"].endswith(f"{connection['id']}?done=connected")
    exchange = tokens.received[0]
    assert exchange["form"]["grant_type"] == "authorization_code" and exchange["form"]["code"] == "good-code"
    assert exchange["form"]["redirect_uri"] == sent["redirect_uri"]
    challenge = base64.urlsafe_b64encode(hashlib.sha256(exchange["form"]["code_verifier"].encode()).digest())
    assert challenge.decode().rstrip("=") == sent["code_challenge"]
    assert exchange["headers"]["Authorization"].startswith("Basic ")
    assert _connection(admin, connection["id"])["status"] == "active"
    assert _run(mcp)["isError"] is False
    assert api.received[-1]["authorization"] == f"Bearer at-1-{'x' * 12}"


@pytest.mark.parametrize("tamper", ["wrong", "reused", "other session", "no cookie"])
def test_a_wrong_or_reused_state_is_refused(admin: Admin, client: Client, console: Console,
                                            tokens: TokenEndpoint, tamper: str) -> None:
    connection = _authorization_code(admin, tokens)
    state = _start(console, connection["id"])["state"]
    if tamper == "wrong":
        answer = _callback(console, f"code=good-code&state={connection['id']}.forged")
    elif tamper == "reused":
        assert _callback(console, f"code=good-code&state={state}").status_code == 303
        answer = _callback(console, f"code=good-code&state={state}")
    elif tamper == "other session":
        other = Console(client)
        other.sign_in(admin.token)
        answer = _callback(other, f"code=good-code&state={state}")
    else:
        answer = client.http.get(f"/console/connections/callback?code=good-code&state={state}")
    assert answer.status_code in (400, 403)
    assert tokens.grants() == (["authorization_code"] if tamper == "reused" else [])


def test_a_callback_without_the_session_exchanges_nothing_and_the_state_survives(
        client: Client, admin: Admin, console: Console, tokens: TokenEndpoint) -> None:
    # GIVEN a browser without the console session that pressed Connect
    connection = _authorization_code(admin, tokens)
    state = _start(console, connection["id"])["state"]
    answer = client.http.get(f"/console/connections/callback?code=good-code&state={state}")
    # THEN it is asked to sign in, nothing is exchanged, and the session's own callback still works
    assert answer.status_code == 403 and "Sign in first" in answer.body.decode() and tokens.received == []
    assert _callback(console, f"code=good-code&state={state}").status_code == 303


def test_an_expired_token_is_refreshed_and_the_rotated_refresh_token_kept(
        admin: Admin, console: Console, mcp: Mcp, api: Api, tokens: TokenEndpoint,
        monkeypatch: pytest.MonkeyPatch) -> None:
    connection = _connected(admin, console, tokens)
    _publish(admin, api.url, connection["id"])
    assert _run(mcp)["isError"] is False
    # WHEN the access token has expired
    _later(monkeypatch, timedelta(hours=2))
    assert _run(mcp)["isError"] is False
    # THEN the first refresh token was used, a rotated one came back and is what the next refresh uses
    assert tokens.received[1]["form"] == {"grant_type": "refresh_token", "refresh_token": f"rt-1-{'y' * 12}"}
    _later(monkeypatch, timedelta(hours=4))
    assert _run(mcp)["isError"] is False
    assert tokens.received[2]["form"]["refresh_token"] == f"rt-2-{'y' * 12}"
    assert [request["authorization"][7:11] for request in api.received] == ["at-1", "at-2", "at-3"]


def test_a_vendor_401_refreshes_an_authorization_code_token_once(admin: Admin, console: Console, mcp: Mcp,
                                                                api: Api, tokens: TokenEndpoint) -> None:
    connection = _connected(admin, console, tokens)
    _publish(admin, api.url, connection["id"])
    api.refused.add(f"at-1-{'x' * 12}")
    assert _run(mcp)["isError"] is False
    assert tokens.grants() == ["authorization_code", "refresh_token"]


@pytest.mark.parametrize("strict", [True, False], ids=["strict rotation", "lenient rotation"])
def test_a_call_that_read_the_tokens_before_another_refreshed_uses_the_new_ones(
        admin: Admin, console: Console, tokens: TokenEndpoint, strict: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.access import credentials, token_refresh
    from chalicelib.store import connections as connection_store

    # GIVEN two calls that both read the expired tokens (version v) before either refreshed
    tokens.strict_rotation = strict
    connection = _connected(admin, console, tokens)
    account = _account(admin)
    _later(monkeypatch, timedelta(hours=2))
    stale = connection_store.get(account, connection["id"])
    assert stale is not None
    # WHEN the first refreshes, and then the second, from its older read
    winner = credentials.credential(account, connection["id"], "https://api.acme.test/x", timeout=5)
    loser = token_refresh.refresh(stale, timeout=5)
    # THEN the second sent no refresh of its own, and neither overwrote nor marked: it uses the first's
    assert tokens.grants() == ["authorization_code", "refresh_token"]
    assert loser.token == winner.token
    now = connection_store.get(account, connection["id"])
    assert now is not None and now.status == "active" and now.token_version == stale.token_version + 1
    assert token_refresh.stored_tokens(now).refresh_token == f"rt-2-{'y' * 12}"


def test_a_revoked_refresh_token_needs_a_reconnect_and_connect_again_fixes_it(
        admin: Admin, console: Console, mcp: Mcp, api: Api, tokens: TokenEndpoint,
        monkeypatch: pytest.MonkeyPatch, logged: pytest.LogCaptureFixture) -> None:
    connection = _connected(admin, console, tokens)
    _publish(admin, api.url, connection["id"])
    # GIVEN the vendor revoked the grant, and the access token expired
    tokens.live_refresh.clear()
    _later(monkeypatch, timedelta(hours=2))
    # WHEN the tool is called
    result = _run(mcp)
    # THEN it fails with connection_needs_reconnect naming the page, no secret in sight, the vendor untouched
    error = _error(result)
    page = f"http://127.0.0.1:8000/console/connections/{connection['id']}"
    assert error["code"] == "connection_needs_reconnect" and page in error["message"]
    assert "invalid_grant" in error["message"]
    for secret in (CLIENT_SECRET, "rt-1-", "at-1-"):
        assert secret not in json.dumps(result) and secret not in logged.text
    assert api.received == [] and _connection(admin, connection["id"])["status"] == "needs_reconnect"
    assert "needs reconnect" in console.get(f"/console/connections/{connection['id']}").body.decode()
    # AND later calls fail the same way without asking the token endpoint again
    asked = len(tokens.received)
    assert _error(_run(mcp))["code"] == "connection_needs_reconnect" and len(tokens.received) == asked
    # WHEN a person connects again (in place)
    state = _start(console, connection["id"])["state"]
    assert _callback(console, f"code=good-code&state={state}").status_code == 303
    # THEN calls work again with the same tool version
    assert _run(mcp)["isError"] is False
    assert [v["version"] for v in admin.call("GET", "/v1/tools/acme/orders").json_body["versions"]] == [1]


# --- reconnecting in place -------------------------------------------------------------------------


def test_a_revoked_bearer_connection_takes_a_new_secret_in_place(admin: Admin, agent: dict[str, Any], mcp: Mcp,
                                                                 vendor: Vendor) -> None:
    # GIVEN a bearer connection whose promoted tool was demoted by the revocation
    connection = _connect(admin, {"type": "bearer", "token": "old-token-0000"})
    _publish(admin, vendor.url, connection["id"])
    mcp.call("promote", {"vendor": "acme", "name": "orders"})
    admin.call("POST", f"/v1/connections/{connection['id']}/revoke")
    assert _error(_run(mcp))["code"] == "connection_revoked"
    # WHEN it gets a new secret
    response = admin.call("PUT", f"/v1/connections/{connection['id']}/auth",
                          {"auth": {"type": "bearer", "token": "new-token-1111"}})
    # THEN it is active under the same id, calls carry the new token, no version was made, no promotion either
    assert response.status_code == 200 and response.json_body["status"] == "active"
    assert response.json_body["id"] == connection["id"] and "new-token" not in response.body.decode()
    assert _run(mcp)["isError"] is False
    assert vendor.received[-1]["headers"]["Authorization"] == "Bearer new-token-1111"
    assert len(admin.call("GET", "/v1/tools/acme/orders").json_body["versions"]) == 1
    assert admin.call("GET", f"/v1/agents/{agent['id']}/working-set").json_body["items"] == []


@pytest.mark.parametrize(("auth", "field"), [
    ({"type": "header", "name": "X-Key", "value": "v"}, "auth.type"),
    ({"type": "bearer", "token": ""}, "auth.bearer.token"),
    ({"type": "bearer"}, "auth.bearer.token"),
])
def test_a_bad_new_secret_is_refused_and_changes_nothing(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                         auth: dict[str, Any], field: str) -> None:
    connection = _connect(admin, {"type": "bearer", "token": "old-token-0000"})
    _publish(admin, vendor.url, connection["id"])
    response = admin.call("PUT", f"/v1/connections/{connection['id']}/auth", {"auth": auth})
    assert response.status_code == 400 and response.json_body["error"]["field"] == field
    _run(mcp)
    assert vendor.received[-1]["headers"]["Authorization"] == "Bearer old-token-0000"


def test_another_accounts_connection_cannot_be_given_a_secret(admin: Admin, other_admin: Admin) -> None:
    theirs = _connect(other_admin, {"type": "bearer", "token": "their-token"})
    response = admin.call("PUT", f"/v1/connections/{theirs['id']}/auth", {"auth": {"type": "bearer", "token": "x"}})
    assert response.status_code == 404
    assert admin.call("GET", f"/v1/connections/{theirs['id']}/calls").status_code == 404


def test_the_console_gives_a_connection_a_new_secret(admin: Admin, console: Console, mcp: Mcp,
                                                     vendor: Vendor) -> None:
    connection = _connect(admin, {"type": "basic", "username": "u", "password": PASSWORD})
    _publish(admin, vendor.url, connection["id"])
    admin.call("POST", f"/v1/connections/{connection['id']}/revoke")
    answer = console.post(f"/console/connections/{connection['id']}/auth", {"username": "u2", "secret": "pw-2"})
    assert answer.status_code == 303
    assert _run(mcp)["isError"] is False
    assert vendor.received[-1]["headers"]["Authorization"] == "Basic " + base64.b64encode(b"u2:pw-2").decode()


# --- recent calls -----------------------------------------------------------------------------------


def test_a_connections_recent_calls_show_tool_agent_outcome_and_time_never_input(
        admin: Admin, agent: dict[str, Any], console: Console, mcp: Mcp, vendor: Vendor) -> None:
    connection = _connect(admin, {"type": "bearer", "token": "tok-0000"})
    _publish(admin, vendor.url, connection["id"])
    mcp.call("run_tool", {"vendor": "acme", "name": "orders", "input": {"page": 987654}})
    vendor.status = 500
    mcp.call("run_tool", {"vendor": "acme", "name": "orders", "input": {"page": 123456}})
    # THEN the admin API lists them newest first
    calls = admin.call("GET", f"/v1/connections/{connection['id']}/calls").json_body["items"]
    assert [(call["name"], call["agent_id"], call["status"], call["error_code"]) for call in calls] == [
        ("orders", agent["id"], "failed", "vendor_error"), ("orders", agent["id"], "succeeded", None)]
    assert calls[0]["at"] >= calls[1]["at"]
    # AND the console page shows them with the agent's name, and no input
    page = console.get(f"/console/connections/{connection['id']}").body.decode()
    assert page.count("data-call=") == 2 and "hermes" in page and "vendor_error" in page
    for shown in (json.dumps(calls), page):
        assert "987654" not in shown and "123456" not in shown and "tok-0000" not in shown


def test_recent_calls_cost_no_extra_dynamodb_call_per_call(admin: Admin, mcp: Mcp, vendor: Vendor,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A call through a connection makes the calls a keyless call makes, plus the connection's one
    GetItem: the `by_connection` index is fed by the run's own writes."""
    import botocore.client

    connection = _connect(admin, {"type": "bearer", "token": "tok-0000"})
    _publish(admin, vendor.url, connection["id"])
    admin.publish(vendor="acme", name="keyless", description="Keyless Acme orders.",
                  input_schema={"type": "object", "properties": {"page": {"type": "integer"}}},
                  annotations={"readOnlyHint": True}, request={"method": "GET", "url": f"{vendor.url}/orders"})
    for name in ("orders", "keyless"):  # warm: the first call of each reads what later calls keep
        mcp.call("run_tool", {"vendor": "acme", "name": name, "input": {}})
    calls: list[str] = []
    original: Callable[..., Any] = botocore.client.BaseClient._make_api_call

    def counted(client: Any, operation: str, params: dict[str, Any]) -> Any:
        if client.meta.service_model.service_name == "dynamodb":
            calls.append(operation)
        return original(client, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", counted)
    mcp.call("run_tool", {"vendor": "acme", "name": "keyless", "input": {}})
    keyless, calls[:] = sorted(calls), []
    mcp.call("run_tool", {"vendor": "acme", "name": "orders", "input": {}})
    assert sorted(calls) == sorted([*keyless, "GetItem"])


def test_a_callback_carrying_odd_parameters_or_a_refusal_changes_nothing(admin: Admin, console: Console,
                                                                         tokens: TokenEndpoint) -> None:
    connection = _authorization_code(admin, tokens)
    state = _start(console, connection["id"])["state"]
    assert _callback(console, "path=x&state=&code=").status_code == 400
    answer = _callback(console, f"error=access_denied&error_description=no%20thanks&state={state}")
    assert answer.status_code == 400 and "access_denied" in answer.body.decode()
    assert "no thanks" not in answer.body.decode()
    assert tokens.received == [] and _connection(admin, connection["id"])["status"] == "not_connected"


def test_run_lines_in_the_log_never_carry_a_credential(admin: Admin, mcp: Mcp, api: Api, tokens: TokenEndpoint,
                                                       logged: pytest.LogCaptureFixture) -> None:
    connection = _client_credentials(admin, tokens)
    _publish(admin, api.url, connection["id"])
    _run(mcp)
    assert log_lines(logged, "run")
    assert "at-1-" not in logged.text and CLIENT_SECRET not in logged.text


def _account(admin: Admin) -> str:
    from chalicelib.identity import accounts

    return accounts.authenticate_admin(admin.token)


def _lower_escapes(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda match: match.group().lower(), text)


@pytest.mark.parametrize("form", [
    QUERY_KEY.replace("/", "\\/"),  # JSON as PHP writes it
    QUERY_KEY.replace("+", "\\u002b").replace("&", "\\u0026"),  # JSON as Go and .NET write + and &
    QUERY_KEY.replace("+", "\\u002B").replace("q", "\\u0071", 1),
    _lower_escapes(quote(QUERY_KEY, safe="")),
    _lower_escapes(quote_plus(QUERY_KEY)),
    quote(QUERY_KEY, safe="").replace("%2F", "%2f"),  # one escape in lower case among upper-case ones
    json.dumps(QUERY_KEY)[1:-1].replace("/", "\\/").replace(" ", "\\u0020"),
], ids=["json-slash", "json-u-lower", "json-u-upper", "percent-lower", "plus-lower", "percent-mixed", "json-mixed"])
def test_a_secret_echoed_in_an_escaped_form_is_redacted(form: str) -> None:
    from chalicelib.calls import vendor as vendor_calls

    # GIVEN a vendor's text that echoes the secret as JSON or a URL escapes it
    text = f'{{"error": "bad key {form} given"}}'
    # WHEN it is redacted (as text, and inside an answer's values)
    redacted = vendor_calls.redact_text(text, (QUERY_KEY,))
    nested = vendor_calls.redact({"body": [text]}, (QUERY_KEY,))
    # THEN the secret is gone in that form too, and the rest of the text stays
    assert redacted == '{"error": "bad key [redacted] given"}'
    assert nested == {"body": [redacted]}
