"""A key pasted into a tool's definition (a credential-named header, a credential-named URL query
parameter, an MCP server's `?api_key=`) that the vendor quotes back never reaches the agent's
answer, the run record or a log line: it joins the connection's secrets in the one redaction
path (`vendor.redact`), in every form a vendor echoes it (plain, percent-encoded, base64,
JSON-escaped, cut by a size cap, in an error, in a header it returns). A value shorter than
`sensitive.ECHO_MIN_CHARS` is not redacted (it would blank common words); what the agent's
input fills is the agent's own and shown. The header and query twins of this file show how
previews and request shapes hide the same values (test_template_headers.py, test_template_query.py)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from chalicelib.base import sensitive
from chalicelib.calls import vendor as vendor_calls
from chalicelib.net import mcpclient, urls
from chalicelib.tools.definitions import parse_spec
from tests.conftest import Admin, HandshakeHandler, Mcp, serving, tool_spec

KEY = "sk/live+key-0123456789"  # `/` and `+`: JSON and URLs escape it, each in their own way
TOOL = {"vendor": "crm", "name": "find-contact"}
CAP = 4096  # the vendor answer's size cap in the clipping tests
Reply = tuple[int, dict[str, str], bytes]  # status, headers, body


def _json(status: int, body: Any, **headers: str) -> Reply:
    return status, {"Content-Type": "application/json", **headers}, json.dumps(body).encode()


def _text(status: int, body: str, **headers: str) -> Reply:
    return status, {"Content-Type": "text/plain", **headers}, body.encode()


def _lower_escapes(text: str) -> str:
    return "".join(part.lower() if part.startswith("%") else part for part in _percent_parts(text))


def _percent_parts(text: str) -> list[str]:
    parts, index = [], 0
    while index < len(text):
        step = 3 if text[index] == "%" else 1
        parts.append(text[index:index + step])
        index += step
    return parts


# How a hostile vendor quotes the key it was sent: (its answer, the quoted form that must not come back)
ECHOES: dict[str, Callable[[str], tuple[Reply, str]]] = {
    "plain": lambda key: (_json(200, {"echo": f"you sent {key}"}), key),
    "percent-encoded": lambda key: (_json(200, {"next": f"https://crm.example/p?api_key={quote(key, safe='')}"}),
                                    quote(key, safe="")),
    "percent-lower": lambda key: (_json(200, {"next": f"/p?k={_lower_escapes(quote(key, safe=''))}"}),
                                  _lower_escapes(quote(key, safe=""))),
    "base64": lambda key: (_json(200, {"debug": base64.b64encode(f"GET /contacts key={key} page=2".encode()).decode()}),
                           base64.b64encode(key.encode()).decode()[:12]),
    "base64-whole": lambda key: (_json(200, {"token": base64.b64encode(key.encode()).decode()}),
                                 base64.b64encode(key.encode()).decode()[:12]),
    "json-escaped": lambda key: ((200, {"Content-Type": "application/json"},
                                  ('{"echo": "' + key.replace("/", "\\/").replace("+", "\\u002B") + '"}').encode()),
                                 key),
    "plain text": lambda key: (_text(200, f"key {key} accepted"), key),
    "error status": lambda key: (_json(401, {"error": f"invalid api_key {key}"}), key),
    "error text": lambda key: (_text(403, f"Forbidden: key {key} was revoked"), key),
    "error clipped": lambda key: (_text(500, "e" * (vendor_calls.ERROR_BODY_PREVIEW - 6) + key + "e" * 50), key[:6]),
    "answer clipped": lambda key: (_text(200, "x" * (CAP - 9) + key + "y" * 100), key[:9]),
    "response header": lambda key: (_json(200, {"ok": True}, **{"X-Echo": key, "WWW-Authenticate": f'Key k="{key}"'}),
                                    key),
    "redirect": lambda key: (_text(302, "", Location=f"https://crm.example/login?api_key={quote(key)}"), key),
}


@dataclass
class Echo:
    """A vendor on 127.0.0.1 that quotes back the key it was sent (its `X-Api-Key` header, or its
    `api_key` query parameter) as `echo` says."""

    url: str = ""
    echo: Callable[[str], Reply] = lambda key: _json(200, {"echo": key})
    received: list[str] = field(default_factory=list)


@pytest.fixture
def echo() -> Iterator[Echo]:
    state = Echo()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = parse_qs(urlsplit(self.path).query)
            key = self.headers.get("X-Api-Key") or query.get("api_key", [""])[0]
            state.received.append(key)
            status, headers, body = state.echo(key)
            self.send_response(status, f"Invalid key {key}" if status >= 400 else None)  # the reason phrase too
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        state.url = url
        yield state


def _publish(admin: Admin, echo: Echo, *, header: str | None = None, query: str = "",
             params: list[dict[str, str]] | None = None, key: str = KEY) -> None:
    """A read tool whose definition pastes `key` in a header named `header`, or in its URL's `query`;
    its input is an `email` and a `key` (both required)."""
    request: dict[str, Any] = {"method": "GET", "url": f"{echo.url}/contacts{'?' + query if query else ''}"}
    if header is not None:
        request["headers"] = {header: key}
    if params is not None:
        request["params"] = params
    admin.publish(**tool_spec(**TOOL, description="Find a contact in the CRM.", input_schema={
        "type": "object", "properties": {"email": {"type": "string"}, "key": {"type": "string"}},
        "required": ["email", "key"]}, request=request))


def _run(mcp: Mcp, key: str = "agent-chosen-key-1") -> dict[str, Any]:
    return mcp.call("run_tool", {**TOOL, "input": {"email": "a@example.com", "key": key}})


def _record(admin: Admin, agent: dict[str, Any]) -> str:
    """What a person reads back of the agent's one run, as the admin API shows it."""
    (run,) = admin.call("GET", f"/v1/agents/{agent['id']}/runs").json_body["items"]
    return admin.call("GET", f"/v1/runs/{run['id']}").body.decode()


PASTED = {
    "header": {"header": "X-Api-Key"},
    "query": {"query": f"api_key={quote(KEY, safe='')}&mode=full"},
}


@pytest.mark.parametrize("echoed", list(ECHOES))
@pytest.mark.parametrize("pasted", list(PASTED))
def test_a_vendor_quoting_a_pasted_key_back_shows_it_nowhere(
        admin: Admin, mcp: Mcp, agent: dict[str, Any], echo: Echo, settings_env: Any, logged: Any,
        pasted: str, echoed: str) -> None:
    # GIVEN a tool whose definition pastes a key, and a vendor that quotes back what it was sent
    settings_env(WORKSET_VENDOR_MAX_RESPONSE_BYTES=str(CAP))
    _publish(admin, echo, **PASTED[pasted])  # type: ignore[arg-type]
    echo.echo = lambda key: ECHOES[echoed](key)[0]
    form = ECHOES[echoed](KEY)[1]
    # WHEN an agent calls it
    result = _run(mcp)
    # THEN the vendor got the key as written
    assert echo.received == [KEY]
    # AND neither the answer, nor the run record a person reads, nor the log holds it in that form
    answer, record = json.dumps(result), _record(admin, agent)
    for shown in (answer, record, logged.text):
        assert form not in shown and KEY not in shown
    # AND what the vendor said around it is still there, the key marked where it was
    if echoed in ("plain", "json-escaped", "error status", "error text", "plain text"):
        assert "[redacted]" in answer


def test_the_answer_around_an_echoed_key_keeps_its_shape(admin: Admin, mcp: Mcp, echo: Echo) -> None:
    # GIVEN a vendor that answers JSON quoting the pasted key in a value and in a member's name
    _publish(admin, echo, header="X-Api-Key")
    echo.echo = lambda key: _json(200, {"echo": f"you sent {key}", key: 1, "items": [{"id": 1}]})
    # WHEN an agent calls the tool
    result = _run(mcp)
    # THEN the answer is the vendor's JSON, only the key replaced
    assert result["isError"] is False
    assert result["structuredContent"] == {"echo": "you sent [redacted]", "[redacted]": 1, "items": [{"id": 1}]}


def test_a_clipped_answer_drops_the_half_key_it_ends_with(admin: Admin, mcp: Mcp, echo: Echo, settings_env: Any) -> None:
    # GIVEN an answer over the size cap, cut inside the pasted key
    settings_env(WORKSET_VENDOR_MAX_RESPONSE_BYTES=str(CAP))
    _publish(admin, echo, header="X-Api-Key")
    echo.echo = lambda key: _text(200, "x" * (CAP - 9) + key + "y" * 100)
    # WHEN an agent calls the tool
    structured = _run(mcp)["structuredContent"]
    # THEN it gets the answer up to where the key began, marked as cut
    assert structured["truncated"] is True and structured["result"] == "x" * (CAP - 9)


@pytest.mark.parametrize(("pasted", "key"), [
    ({"header": "X-Api-Key"}, "abc1234"),
    ({"query": "api_key=abc1234"}, "abc1234"),
])
def test_a_key_shorter_than_8_characters_is_not_redacted(admin: Admin, mcp: Mcp, echo: Echo, pasted: dict[str, str],
                                                         key: str) -> None:
    # GIVEN a definition whose pasted key is 7 characters (SECURITY.md: too short to tell from text)
    assert len(key) == sensitive.ECHO_MIN_CHARS - 1
    _publish(admin, echo, key=key, **pasted)  # type: ignore[arg-type]
    # WHEN the vendor quotes it back
    echo.echo = lambda sent: _json(200, {"echo": f"you sent {sent}", "flag": "true"})
    result = _run(mcp)
    # THEN it is shown as the vendor said it (documented), and nothing else is touched
    assert result["structuredContent"] == {"echo": f"you sent {key}", "flag": "true"}


def test_a_common_word_pasted_as_a_token_is_redacted_and_the_answer_still_parses(admin: Admin, mcp: Mcp,
                                                                                 echo: Echo) -> None:
    # GIVEN a hostile definition whose `Token` header is a common word of 8 characters
    _publish(admin, echo, header="Token", key="customer")
    echo.echo = lambda key: _json(200, {"customer": {"id": 7, "kind": "customer", "name": "Acme"}, "count": 1})
    # WHEN an agent calls the tool
    result = _run(mcp)
    # THEN the word is redacted wherever it stands (acceptable: SECURITY.md), and the answer is
    # still the vendor's JSON, every other member as it was
    assert result["isError"] is False
    assert result["structuredContent"] == {"[redacted]": {"id": 7, "kind": "[redacted]", "name": "Acme"}, "count": 1}
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]


@pytest.mark.parametrize("placed", [
    {"query": "api_key={key}"},
    {"params": [{"field": "key", "name": "X-Api-Key", "in": "header"}]},
], ids=["query placeholder", "header param"])
def test_what_the_agents_input_fills_is_not_a_secret(admin: Admin, mcp: Mcp, echo: Echo,
                                                     placed: dict[str, Any]) -> None:
    # GIVEN a tool whose key, named like one, comes from the input
    _publish(admin, echo, **placed)
    echo.echo = lambda key: _json(200, {"echo": f"you sent {key}"})
    # WHEN an agent calls it with its own value
    result = _run(mcp, key="agent-knows-this-123")
    # THEN the vendor's echo of it is shown: the agent sent it
    assert echo.received == ["agent-knows-this-123"]
    assert result["structuredContent"] == {"echo": "you sent agent-knows-this-123"}


def test_a_key_beside_a_placeholder_is_redacted_and_the_input_is_not(admin: Admin, mcp: Mcp, echo: Echo) -> None:
    # GIVEN a query value made of a pasted key and a placeholder the input fills
    _publish(admin, echo, query="api_key=sk_live_prefix_0123{key}")
    echo.echo = lambda key: _json(200, {"echo": key})
    # WHEN an agent calls it
    result = _run(mcp, key="-agent-part")
    # THEN the vendor got both, and the echo shows the input's part only
    assert echo.received == ["sk_live_prefix_0123-agent-part"]
    assert result["structuredContent"] == {"echo": "[redacted]-agent-part"}


@pytest.mark.parametrize("urlsafe", [False, True], ids=["standard", "url-safe"])
@pytest.mark.parametrize("prefix", ["", "k", "ke"], ids=["offset 0", "offset 1", "offset 2"])
def test_a_key_inside_base64_text_loses_every_character_only_it_decides(prefix: str, urlsafe: bool) -> None:
    # GIVEN a vendor's base64 text quoting the key at each of the three offsets a key can start at
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    before = f"{prefix}bad key ".encode()
    blob = encode(before + KEY.encode() + b"!").decode()
    # WHEN it is redacted
    redacted = vendor_calls.redact_text(blob, (KEY,))
    # THEN one run is replaced, covering every base64 character made of the key's bits alone
    start, _, rest = redacted.partition("[redacted]")
    end = len(blob) - len(rest)
    first_bit, last_bit = 8 * len(before), 8 * (len(before) + len(KEY))  # the key's bits in the decoded text
    assert blob.startswith(start) and blob.endswith(rest)
    assert len(start) <= -(-first_bit // 6) and end >= last_bit // 6


# --- what a definition's pasted secrets are ------------------------------------------------------


@pytest.mark.parametrize(("name", "credential"), [
    ("X-Api-Key", True), ("apikey", True), ("access_token", True), ("X-Amz-Signature", True),
    ("sig", True), ("x_sig", True), ("SIG", True), ("pwd", True), ("user-pass", True), ("jwt", True),
    ("design", False), ("signal", False), ("bypass", False), ("passenger", False), ("mode", False),
])
def test_a_name_says_credential_by_its_words_and_whole_short_parts(name: str, credential: bool) -> None:
    assert sensitive.names_credential(name) is credential
    assert (sensitive.withheld(f"{name}=abc12345") != f"{name}=abc12345") is credential


@pytest.mark.parametrize("text", ["-key" * 250 + "=", "-sig" * 250 + "=", "api_key= rest", "x_sig=&y=1"])
def test_a_credential_name_with_no_value_after_it_withholds_nothing(text: str) -> None:
    assert sensitive.withheld(text) == text and not sensitive.looks_secret(text)


@pytest.mark.parametrize(("url", "values"), [
    ("https://x.example/a?api_key=abc123secret&q={query}", ("abc123secret",)),
    ("https://x.example/a?sig=ab%2Bcd{x}ef+gh&design=notakey123", ("ab+cd", "ef+gh", "ef gh")),
    ("https://x.example/a?access_token=&token={t}&key", ()),
    ("https://x.example/a?mode=full", ()),
])
def test_a_urls_credential_values_are_its_literal_runs_decoded(url: str, values: tuple[str, ...]) -> None:
    assert urls.credential_values(url) == values


def test_a_definitions_pasted_secrets_are_8_characters_or_more() -> None:
    spec = parse_spec(tool_spec(request={
        "method": "GET", "url": "https://crm.example/c?api_key=short12&token=long-enough-1&q={customer}",
        "headers": {"X-Api-Key": "abc1234", "Cookie": "theme=dark; session=s3ss10n-value", "X-Custom": "Bearer tok-12345678",
                    "X-Tenant": "acme-corporation"}}))
    assert set(spec.pasted_secrets) == {
        "long-enough-1", "theme=dark; session=s3ss10n-value", "theme=dark", "session=s3ss10n-value", "s3ss10n-value",
        "Bearer tok-12345678", "tok-12345678"}


def test_every_pasted_secret_joins_the_requests_secrets() -> None:
    from chalicelib.access.connection_auth import Credential
    from chalicelib.tools.definitions import Tool

    spec = parse_spec(tool_spec(request={"method": "GET", "url": "https://crm.example/c?api_key=pasted-query-1",
                                         "headers": {"X-Api-Key": "pasted-header-1"}}))
    tool = Tool(version=None, spec=spec)  # type: ignore[arg-type]
    request = vendor_calls.build(tool, {"customer": "x"}, Credential("X-Vendor", "conn-secret", secrets=("conn-secret",)))
    assert set(request.secrets) == {"conn-secret", "pasted-header-1", "pasted-query-1"}


# --- an MCP server's URL key -------------------------------------------------------------------------

LIST_FAILS: list[bool] = []  # set: the echoing server's tools/list errors, quoting its key


@pytest.fixture
def echoing_server() -> Iterator[str]:
    """An MCP server whose one tool, `whoami`, answers with the key its URL carried; asked to
    `fail`, it errors quoting it (so does its tools/list while LIST_FAILS holds anything)."""
    mcpclient.forget_sessions()
    LIST_FAILS.clear()

    class Handler(HandshakeHandler):
        def answer(self, message: dict[str, Any]) -> None:
            key = parse_qs(urlsplit(self.path).query)["api_key"][0]
            if message["method"] == "tools/list" and LIST_FAILS:
                self.reply(200, {"jsonrpc": "2.0", "id": message["id"],
                                 "error": {"code": -32000, "message": f"key {key} may not list tools"}})
            elif message["method"] == "tools/list":
                self.result(message, {"tools": [{"name": "whoami", "description": "Who the key belongs to.",
                                                 "inputSchema": {"type": "object"},
                                                 "annotations": {"readOnlyHint": True}}]})
            elif message["params"]["arguments"].get("fail"):
                self.reply(200, {"jsonrpc": "2.0", "id": message["id"],
                                 "error": {"code": -32000, "message": f"key {key} is over its quota"}})
            else:
                self.result(message, {"content": [{"type": "text", "text": f"the key {key} is acme's"}]})

    with serving(Handler) as base:
        yield f"{base}/mcp?api_key={quote(KEY, safe='')}"
    mcpclient.forget_sessions()


@pytest.mark.parametrize("fail", [False, True], ids=["answer", "error"])
def test_an_mcp_servers_echo_of_its_url_key_shows_nowhere(admin: Admin, mcp: Mcp, agent: dict[str, Any],
                                                          echoing_server: str, logged: Any, fail: bool) -> None:
    # GIVEN a registered MCP server whose URL carries its key
    assert admin.call("POST", "/v1/upstreams", {"vendor": "whois", "url": echoing_server}).status_code == 201
    # WHEN an agent calls its tool, and the server quotes the key back
    result = mcp.call("run_tool", {"vendor": "whois", "name": "whoami", "input": {"fail": True} if fail else {}})
    run = admin.call("GET", f"/v1/agents/{agent['id']}/runs").json_body["items"][0]
    if run["status"] == "awaiting_approval":  # a tool from a server asks a person first, whatever its hint
        admin.call("POST", f"/v1/approvals/{run['id']}/approve")
    record = admin.call("GET", f"/v1/runs/{run['id']}").body.decode()
    # THEN the key is in neither the answer, the run record, nor a log line
    assert "over its quota" in record if fail else "is acme's" in record
    for shown in (json.dumps(result), record, logged.text):
        assert KEY not in shown and quote(KEY, safe="") not in shown


def test_a_sync_whose_server_quotes_its_url_key_in_an_error_never_shows_it(admin: Admin, echoing_server: str,
                                                                           logged: Any) -> None:
    # GIVEN a server registered with its key in its URL, while it behaved
    assert admin.call("POST", "/v1/upstreams", {"vendor": "whois", "url": echoing_server}).status_code == 201
    # WHEN a sync meets an error that quotes the key
    LIST_FAILS.append(True)
    failed = admin.call("POST", "/v1/upstreams/whois/sync")
    remembered = admin.call("GET", "/v1/upstreams/whois").body.decode()
    # THEN the sync fails saying why, and neither its answer, what is remembered, nor a log line holds the key
    assert failed.status_code == 502 and "may not list tools" in failed.body.decode()
    for shown in (failed.body.decode(), remembered, logged.text):
        assert KEY not in shown and quote(KEY, safe="") not in shown
