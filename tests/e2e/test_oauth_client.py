"""A chat product's way in, end to end: the MCP Python SDK's own OAuth client (discovery, dynamic
registration, PKCE, token exchange, refresh) against the served local stack, with the person's
consent given in the console by headless Chromium. Then the minted token lists and calls tools,
refreshes, and stops when revoked; a reused code and a foreign redirect URI are refused."""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import anyio
import httpx2
import pytest
from mcp.client import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from playwright.sync_api import sync_playwright

from tests.e2e.conftest import Stack
from tests.e2e.test_console_browser import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is not installed: `./dev test` installs it"),
]


@dataclass
class MemoryStorage:
    """The SDK's TokenStorage hook: where a client keeps its registration and tokens."""

    tokens: OAuthToken | None = None
    client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@dataclass
class Person:
    """Someone at the console in a real browser, answering the consent page a client sends them to."""

    stack: Stack
    agent_name: str
    callback: str
    answers: list[dict[str, str]] = field(default_factory=list)
    pages: list[str] = field(default_factory=list)

    def consent(self, authorization_url: str) -> None:
        """Open the URL, sign in (the browser has no session yet), approve for a new agent; keep what
        the browser was sent back to the client with."""
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_context().new_page()
            page.route(f"{self.callback}**", lambda route: self._called_back(route))
            page.goto(authorization_url)
            page.fill("#token", self.stack.running.token)
            page.click("button:has-text('Sign in')")
            page.wait_for_selector("#approve")
            self.pages.append(page.content())
            if SCREENSHOTS.exists():  # beside the console's other pages (test_console_browser makes the folder)
                page.screenshot(path=str(SCREENSHOTS / "oauth-consent.png"), full_page=True)
            page.check("#new-agent")
            page.fill("#name-new", self.agent_name)
            page.click("#approve")
            page.wait_for_url(f"{self.callback}**")
            browser.close()

    def _called_back(self, route: Any) -> None:
        self.answers.append({name: values[0] for name, values in parse_qs(urlsplit(route.request.url).query).items()})
        route.fulfill(status=200, body="You can close this window.")

    async def redirect_handler(self, authorization_url: str) -> None:
        await anyio.to_thread.run_sync(self.consent, authorization_url)

    async def callback_handler(self) -> AuthorizationCodeResult:
        answer = self.answers[-1]
        return AuthorizationCodeResult(code=answer["code"], state=answer.get("state"), iss=answer.get("iss"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def person(stack: Stack) -> Iterator[Person]:
    yield Person(stack, f"chat-{uuid.uuid4().hex[:6]}", f"http://localhost:{free_port()}/callback")


def post_form(url: str, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=urlencode(form).encode(), method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def list_with(stack: Stack, token: str) -> int:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()
    request = urllib.request.Request(f"{stack.url}/mcp", data=body, method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json", "MCP-Protocol-Version": "2025-11-25",
        "Accept": "application/json, text/event-stream"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


async def test_a_chat_product_connects_by_url_with_oauth(stack: Stack, person: Person) -> None:
    storage = MemoryStorage()
    provider = OAuthClientProvider(
        server_url=f"{stack.url}/mcp",
        client_metadata=OAuthClientMetadata(client_name="SDK Chat", redirect_uris=[person.callback],
                                            grant_types=["authorization_code", "refresh_token"],
                                            token_endpoint_auth_method="none"),
        storage=storage, redirect_handler=person.redirect_handler, callback_handler=person.callback_handler)
    http = httpx2.AsyncClient(auth=provider, timeout=30)
    async with http, Client(streamable_http_client(f"{stack.url}/mcp", http_client=http), mode="legacy") as client:
        # WHEN the client connects by URL alone: 401, discovery, registration, consent, token
        tools = [tool.name for tool in (await client.list_tools()).tools]
        # THEN it sees the meta-tools as the new agent, and can call one
        assert "find_tool" in tools
        found = await client.call_tool("find_tool", {"query": "sales orders"})
        assert not found.is_error
        # AND the person saw who asked, marked unverified, and where the answer would go
        assert "SDK Chat" in person.pages[0] and 'id="unverified"' in person.pages[0]
        assert f"localhost:{urlsplit(person.callback).port}" in person.pages[0]
        first = storage.tokens
        assert first is not None and first.refresh_token
        # WHEN the access token has expired (as the client reckons it)
        provider.context.token_expiry_time = time.time() - 1
        assert (await client.call_tool("find_tool", {"query": "orders"})).is_error is False
        # THEN the client refreshed: both tokens rotated, and the old access token stopped
        second = storage.tokens
        assert second is not None and second.access_token != first.access_token
        assert second.refresh_token != first.refresh_token
    assert list_with(stack, first.access_token) == 401
    assert list_with(stack, second.access_token) == 200
    assert len(person.answers) == 1  # one consent; the refresh needed no person
    client_id = storage.client_info.client_id if storage.client_info else ""

    # WHEN the client revokes its refresh token (RFC 7009)
    status, _ = post_form(f"{stack.url}/oauth/revoke", {"token": second.refresh_token, "client_id": client_id})
    # THEN its access token stops too, and the refresh token gives nothing
    assert status == 200 and list_with(stack, second.access_token) == 401
    refused, error = post_form(f"{stack.url}/oauth/token", {"grant_type": "refresh_token", "client_id": client_id,
                                                            "refresh_token": second.refresh_token})
    assert (refused, error["error"]) == (400, "invalid_grant")

    # AND the code the browser carried, redeemed once already, is refused the second time
    reused, error = post_form(f"{stack.url}/oauth/token", {
        "grant_type": "authorization_code", "code": person.answers[0]["code"], "client_id": client_id,
        "redirect_uri": person.callback, "code_verifier": "x" * 64})
    assert (reused, error["error"]) == (400, "invalid_grant")


def test_a_foreign_redirect_uri_gets_no_code(stack: Stack) -> None:
    status, registered = post_form_json(f"{stack.url}/oauth/register", {
        "client_name": "Honest", "redirect_uris": ["http://127.0.0.1:9/callback"], "token_endpoint_auth_method": "none"})
    assert status == 201
    query = urlencode({"response_type": "code", "client_id": registered["client_id"],
                       "redirect_uri": "https://evil.example/steal", "code_challenge": "A" * 43,
                       "code_challenge_method": "S256", "state": "s"})
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page()
        evil: list[str] = []
        page.route("https://evil.example/**", lambda route: (evil.append(route.request.url), route.abort()))
        page.goto(f"{stack.url}/console/oauth/authorize?{query}")
        page.fill("#token", stack.running.token)
        page.click("button:has-text('Sign in')")
        page.wait_for_selector("p.notice.error")
        message = page.inner_text("p.notice.error")
        browser.close()
    assert "did not register" in message and evil == []
    assert re.search(r"Nothing was sent there", message)


def post_form_json(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.loads(response.read())

