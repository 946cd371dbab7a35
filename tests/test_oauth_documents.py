"""Client ID Metadata Documents (chalicelib/oauth/documents.py), held to the texts they implement:

- MCP 2026-07-28, basic/authorization/client-registration, "Client ID Metadata Documents":
  authorization servers "MUST validate that the fetched document's `client_id` matches the URL
  exactly", "SHOULD cache metadata respecting HTTP cache headers", "MUST validate redirect URIs
  presented in an authorization request against those in the metadata document", "MUST validate
  the document structure is valid JSON and contains required fields"; "Advertising CIMD Support":
  `client_id_metadata_document_supported: true`; Dynamic Client Registration stays for
  "backwards compatibility".
- the same revision's security-considerations, "Client ID Metadata Document Security": SSRF
  ("Authorization Server Abuse Protection"), and "Localhost Redirect URI Risks" (warn for
  localhost-only redirect URIs, "MUST clearly display the redirect URI hostname").
- draft-ietf-oauth-client-id-metadata-document-00 (which that page cites): section 3 (the URL's
  shape), 4 (200 and a JSON type only; redirects not followed), 4.1 (no shared secret), 6.6 (a
  response size limit, 5 KB).

The documents are served by a real HTTP server on 127.0.0.1 (the test stage allows private
networks, as the local stack does: that is also what admits an http client ID here); the
refusals of private addresses use a stubbed resolver and record every connection attempted.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlencode

import pytest
from chalice.test import Client

from chalicelib.net import outbound
from chalicelib.oauth import documents
from tests import test_oauth
from tests.conftest import Admin, Console
from tests.test_console import text
from tests.test_oauth import REDIRECT, Clock, Flow, Pkce, authorize_query, mcp, redirected, token

clock = test_oauth.clock  # the OAuth tests' fixture

Answer = Callable[[BaseHTTPRequestHandler], None]


@dataclass
class DocumentServer:
    """Serves a metadata document per path; counts the requests each path received."""

    base: str
    answers: dict[str, Answer] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)

    def url(self, path: str) -> str:
        return f"{self.base}{path}"

    def serve(self, path: str, document: dict[str, Any] | None = None, *, headers: dict[str, str] | None = None,
              body: bytes | None = None, status: int = 200) -> str:
        """Serve `document` (its client_id defaulting to its own URL) or raw `body` at `path`."""
        url = self.url(path)
        payload = body if body is not None else json.dumps(
            {"client_id": url, "client_name": "Chat Product", "redirect_uris": [REDIRECT],
             "token_endpoint_auth_method": "none", **(document or {})}).encode()
        sent = {"Content-Type": "application/json", **(headers or {})}

        def answer(handler: BaseHTTPRequestHandler) -> None:
            handler.send_response(status)
            for name, value in sent.items():
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)

        self.answers[path] = answer
        return url


@pytest.fixture
def served() -> Iterator[DocumentServer]:
    holder: dict[str, DocumentServer] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            server = holder["server"]
            server.hits[self.path] = server.hits.get(self.path, 0) + 1
            answer = server.answers.get(self.path)
            if answer is None:
                self.send_error(404)
                return
            answer(self)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    holder["server"] = DocumentServer(f"http://127.0.0.1:{httpd.server_address[1]}")
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)  # stops within 0.05 s
    thread.start()
    documents.forget()
    yield holder["server"]
    documents.forget()
    httpd.shutdown()
    httpd.server_close()


def consent_page(console: Console, client_id: str, pkce: Pkce | None = None, **overrides: str) -> Any:
    query = authorize_query(client_id, pkce or Pkce.new(), **overrides)
    return console.get("/console/oauth/authorize?" + urlencode(query))


def refused(page: Any, reason: str) -> None:
    """The person is told (400) and nothing goes to the redirect URI."""
    assert page.status_code == 400, text(page)
    assert "Location" not in page.headers
    assert reason in text(page).replace("&#39;", "'"), text(page)


# --- advertising (client-registration, "Advertising CIMD Support") --------------------------------

def test_the_server_metadata_advertises_documents_and_keeps_registration(client: Client) -> None:
    # WHEN a client reads the authorization server metadata
    metadata = json.loads(client.http.get("/.well-known/oauth-authorization-server").body)
    # THEN it says metadata-document client IDs are supported, and DCR is still offered
    assert metadata["client_id_metadata_document_supported"] is True
    assert metadata["registration_endpoint"].endswith("/oauth/register")
    assert "none" in metadata["token_endpoint_auth_methods_supported"]


# --- the happy path ---------------------------------------------------------------------------------

def test_a_document_client_consents_redeems_and_calls_mcp(client: Client, console: Console, clock: Clock,
                                                          served: DocumentServer) -> None:
    # GIVEN a client whose client_id is the URL of its metadata document
    client_id = served.serve("/oauth/client.json")
    flow = Flow(client, console, client_id, Pkce.new())
    # WHEN the person opens the consent page
    page = consent_page(console, client_id, flow.pkce)
    # THEN it names the client by the document's name, as identified by the document's host
    body = text(page)
    assert page.status_code == 200, body
    assert 'id="client-name">Chat Product<' in body
    assert f"identified by {client_id.split('/')[2]}" in body
    assert 'id="unverified"' not in body and 'id="redirect-host">chat.example<' in body
    # AND approving gives a code that the client redeems by its URL alone (a public client)
    tokens = flow.tokens()
    assert tokens["token_type"].lower() == "bearer"
    # AND the token works at /mcp
    assert mcp(client, tokens["access_token"]).status_code == 200
    # AND the refresh token rotates for the same client
    assert flow.refresh(tokens["refresh_token"]).status_code == 200


def test_the_token_endpoint_never_fetches_a_document(client: Client, console: Console, clock: Clock,
                                                     served: DocumentServer) -> None:
    # GIVEN a consented document client, whose document then leaves every cache
    client_id = served.serve("/client.json", headers={"Cache-Control": "no-store"})
    flow = Flow(client, console, client_id, Pkce.new())
    code = flow.code()
    fetched = served.hits["/client.json"]
    # WHEN it redeems its code, and a stranger presents another URL client_id with no code
    redeemed = flow.redeem(code)
    stranger = token(client, grant_type="authorization_code", code="wsc_nothing", redirect_uri=REDIRECT,
                     client_id=served.url("/other.json"), code_verifier=flow.pkce.verifier)
    # THEN the redemption works, the stranger gets invalid_grant, and no document was fetched
    assert redeemed.status_code == 200, text(redeemed)
    assert stranger.status_code == 400 and json.loads(stranger.body)["error"] == "invalid_grant"
    assert served.hits["/client.json"] == fetched and "/other.json" not in served.hits


def test_a_code_of_a_document_client_is_not_another_clients(client: Client, console: Console, clock: Clock,
                                                            served: DocumentServer) -> None:
    # GIVEN a code minted for one document client
    flow = Flow(client, console, served.serve("/a.json"), Pkce.new())
    code = flow.code()
    # WHEN another URL presents it
    answer = flow.redeem(code, client_id=served.url("/b.json"))
    # THEN it is refused
    assert answer.status_code == 400 and json.loads(answer.body)["error"] == "invalid_grant"


# --- redirect URIs, exactly ---------------------------------------------------------------------------

@pytest.mark.parametrize("asked", ["https://chat.example/oauth/callback/", "https://chat.example/other",
                                   "http://127.0.0.1:4000/callback"])
def test_a_redirect_uri_not_in_the_document_is_refused_to_the_person(console: Console, clock: Clock,
                                                                     served: DocumentServer, asked: str) -> None:
    # GIVEN a document listing one https and one loopback redirect URI
    client_id = served.serve("/client.json", {"redirect_uris": [REDIRECT, "http://127.0.0.1:3000/callback"]})
    # WHEN an authorization request asks for another (a loopback one on another port included:
    # a document's redirect URIs are enforced exactly)
    page = consent_page(console, client_id, redirect_uri=asked)
    # THEN the person is told and nothing is sent there
    refused(page, "did not register")


def test_a_localhost_only_document_client_gets_a_warning(console: Console, clock: Clock,
                                                         served: DocumentServer) -> None:
    # GIVEN a document whose only redirect URI is on this machine ("Localhost Redirect URI Risks")
    loopback = "http://127.0.0.1:3000/callback"
    client_id = served.serve("/native.json", {"redirect_uris": [loopback]})
    # WHEN the person opens the consent page
    body = text(consent_page(console, client_id, redirect_uri=loopback))
    # THEN the page warns, and names the host the answer goes to
    assert 'id="loopback-warning"' in body and 'id="redirect-host">127.0.0.1:3000<' in body


# --- hostile documents ----------------------------------------------------------------------------------

HOSTILE = {
    "names another client_id": ({"client_id": "https://other.example/client.json"}, {}, "another client_id"),
    "huge": ({"client_name": "Chat Product", "padding": "x" * 6000}, {}, "larger than 5 KB"),
    "not json": (b"<html>hello</html>", {}, "not JSON"),
    "an array": (b"[1, 2]", {}, "not a JSON object"),
    "html content type": ({}, {"Content-Type": "text/html"}, "not served as application/json"),
    "a client secret": ({"client_secret": "s3cret"}, {}, "holds a client secret"),
    "a secret auth method": ({"token_endpoint_auth_method": "client_secret_basic"}, {}, "must be none"),
    "no redirect uris": ({"redirect_uris": []}, {}, "redirect_uris"),
    "a javascript redirect uri": ({"redirect_uris": ["javascript:alert(1)"]}, {}, "redirect_uris"),
    "a bad name": ({"client_name": "a\nb"}, {}, "client_name"),
}


@pytest.mark.parametrize("case", HOSTILE, ids=list(HOSTILE))
def test_a_hostile_document_is_refused_and_nothing_is_granted(client: Client, console: Console, clock: Clock,
                                                              served: DocumentServer, case: str) -> None:
    document, headers, reason = HOSTILE[case]
    # GIVEN a document that cannot identify a client
    if isinstance(document, bytes):
        client_id = served.serve("/client.json", body=document, headers=headers)
    else:
        client_id = served.serve("/client.json", document, headers=headers)
    flow = Flow(client, console, client_id, Pkce.new())
    # WHEN the person opens the consent page, and (the form being the browser's) posts an approval
    page = consent_page(console, client_id, flow.pkce)
    approval = console.post("/console/oauth/authorize", {**authorize_query(client_id, flow.pkce), "agent": "new",
                                                         "decision": "approve", "name": "x"})
    # THEN both are refused to the person, and nothing went to the redirect URI
    refused(page, reason)
    refused(approval, reason)
    # AND the refusal is not cached: the document was asked for each time
    assert served.hits["/client.json"] == 2


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_not_followed(console: Console, clock: Clock, served: DocumentServer, status: int) -> None:
    # GIVEN a client ID URL that redirects to a valid document (draft 4: MUST NOT follow redirects)
    target = served.serve("/real.json")
    client_id = served.serve("/client.json", body=b"", status=status, headers={"Location": target})
    # WHEN the person opens the consent page
    page = consent_page(console, client_id)
    # THEN it is refused, and the redirect's target was never asked
    refused(page, f"HTTP {status}")
    assert "/real.json" not in served.hits


def test_an_error_status_is_refused(console: Console, clock: Clock, served: DocumentServer) -> None:
    refused(consent_page(console, served.url("/missing.json")), "HTTP 404")


def test_a_slow_document_is_cut_at_the_deadline(console: Console, clock: Clock, served: DocumentServer,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a server that trickles its document, a byte at a time
    monkeypatch.setattr(documents, "FETCH_TIMEOUT_SECONDS", 0.5)
    stop = threading.Event()

    def trickle(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", "4000")
        handler.end_headers()
        while not stop.is_set():
            try:
                handler.wfile.write(b" ")
                handler.wfile.flush()
            except OSError:
                return
            time.sleep(0.05)

    served.answers["/slow.json"] = trickle
    # WHEN the person opens the consent page
    started = time.monotonic()
    page = consent_page(console, served.url("/slow.json"))
    elapsed = time.monotonic() - started
    stop.set()
    # THEN the fetch ended at its deadline and the person is told
    refused(page, "did not answer within 0.5 s")
    assert elapsed < 5  # far under the trickle's 4000 bytes x 0.05 s (not a timing of the code)


# --- the client ID URL, and where it may point -----------------------------------------------------------

@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every outgoing connection attempted (none is made)."""
    attempted: list[Any] = []

    def record(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        attempted.append(address)
        raise OSError("no connection in this test")

    monkeypatch.setattr(socket, "create_connection", record)
    return attempted


@pytest.mark.parametrize(("addresses", "allow_private"), [
    (["10.0.0.5"], "false"), (["127.0.0.1"], "false"), (["::ffff:192.168.1.1"], "false"),
    (["93.184.215.14", "10.1.2.3"], "false"),  # one bad answer among good ones
    (["169.254.169.254"], "true"), (["fe80::1"], "true"),  # link-local, even where private networks are allowed
])
def test_a_private_address_is_refused_before_any_connection(console: Console, clock: Clock, settings_env: Any,
                                                            monkeypatch: pytest.MonkeyPatch, connections: list[Any],
                                                            addresses: list[str], allow_private: str) -> None:
    # GIVEN a client ID whose host resolves to an address Workset must not reach
    settings_env(WORKSET_ALLOW_PRIVATE_NETWORK=allow_private)
    asked: list[str] = []
    monkeypatch.setattr(outbound, "system_resolver", lambda host, port: asked.append(host) or addresses)
    documents.forget()
    # WHEN the person opens the consent page
    page = consent_page(console, "https://client.example/oauth/client.json")
    # THEN the host was resolved, refused, and never connected to
    refused(page, "private, loopback or link-local")
    assert asked == ["client.example"] and connections == []


@pytest.mark.parametrize(("client_id", "reason"), [
    ("https://client.example/", "must have a path"),
    ("https://client.example", "must have a path"),
    ("https://client.example/a/../client.json", ". or .. path segments"),
    ("https://user:pw@client.example/client.json", "credentials"),
    ("https://client.example/client.json#frag", "fragment"),
    ("ftp://client.example/client.json", "http or https"),
    ("http://client.example/client.json", "must be an https URL"),
    ("https://client.example/" + "a" * 2000, "at most 2000 characters"),
    ("https://client\u00e9.example/client.json", "printable ASCII"),
])
def test_a_client_id_url_of_the_wrong_shape_is_refused_without_a_lookup(
        console: Console, clock: Clock, settings_env: Any, monkeypatch: pytest.MonkeyPatch, connections: list[Any],
        client_id: str, reason: str) -> None:
    # GIVEN a deployment that allows no private network (so http is refused too: draft section 3)
    settings_env(WORKSET_ALLOW_PRIVATE_NETWORK="false")
    asked: list[str] = []
    monkeypatch.setattr(outbound, "system_resolver", lambda host, port: asked.append(host) or ["93.184.215.14"])
    # WHEN a request names a client ID URL that draft section 3 does not allow
    page = consent_page(console, client_id)
    # THEN the person is told why, and nothing was resolved or connected to
    refused(page, reason)
    assert asked == [] and connections == []


# --- the cache -------------------------------------------------------------------------------------------

def test_a_document_is_reused_while_its_max_age_lasts(console: Console, clock: Clock, served: DocumentServer) -> None:
    # GIVEN a document that may be reused for a minute (its Age already 10 s of it)
    client_id = served.serve("/client.json", headers={"Cache-Control": "public, max-age=60", "Age": "10"})
    # WHEN the consent page is opened twice within 50 s
    assert consent_page(console, client_id).status_code == 200
    clock.advance(seconds=49)
    assert consent_page(console, client_id).status_code == 200
    # THEN the document was fetched once
    assert served.hits["/client.json"] == 1
    # AND once it is stale, fetched again
    clock.advance(seconds=2)
    assert consent_page(console, client_id).status_code == 200
    assert served.hits["/client.json"] == 2


@pytest.mark.parametrize("headers", [
    {"Cache-Control": "no-store"}, {"Cache-Control": "no-cache"}, {"Cache-Control": "max-age=0"},
    {"Cache-Control": "max-age=oops, no-cache"}, {"Cache-Control": "max-age=60", "Age": "100"},
    {"Expires": "Thu, 01 Jan 1970 00:00:00 GMT"}, {"Expires": "not a date"},
])
def test_a_document_that_must_not_be_reused_is_fetched_every_time(console: Console, clock: Clock,
                                                                  served: DocumentServer,
                                                                  headers: dict[str, str]) -> None:
    client_id = served.serve("/client.json", headers=headers)
    for _ in range(2):
        assert consent_page(console, client_id).status_code == 200
    assert served.hits["/client.json"] == 2


def test_expires_is_honoured_and_the_cache_is_bounded(console: Console, clock: Clock, served: DocumentServer,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a cache of two documents, and three documents fresh for an hour by their Expires header
    monkeypatch.setattr(documents, "CACHE_ENTRIES", 2)
    headers = {"Date": "Thu, 03 Dec 2026 10:00:00 GMT", "Expires": "Thu, 03 Dec 2026 11:00:00 GMT"}
    ids = [served.serve(f"/{name}.json", headers=headers) for name in ("a", "b", "c")]
    # WHEN each is used, then the first again
    for client_id in [*ids, ids[0]]:
        assert consent_page(console, client_id).status_code == 200
    # THEN the first was dropped by the third (least recently used) and fetched again; the others once
    assert served.hits == {"/a.json": 2, "/b.json": 1, "/c.json": 1}


def test_a_consent_stores_no_client(client: Client, console: Console, clock: Clock, served: DocumentServer) -> None:
    # GIVEN a document client that a person approved
    from chalicelib.store import oauth as oauth_store

    flow = Flow(client, console, served.serve("/client.json"), Pkce.new())
    answer = redirected(flow.consent())
    # THEN a code was minted, and no registration exists for the URL (nothing to expire or keep)
    assert answer["code"].startswith("wsc_")
    assert oauth_store.get_client(flow.client_id, clock.now) is None


def test_the_documents_name_is_shown_as_text(console: Console, clock: Clock, served: DocumentServer) -> None:
    # GIVEN a document whose name is markup
    client_id = served.serve("/client.json", {"client_name": "<script>alert(1)</script>"})
    # WHEN the person opens the consent page
    body = text(consent_page(console, client_id))
    # THEN the name is text on the page, never markup
    assert "<script>alert(1)" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body


# --- how a person sees the client afterwards ------------------------------------------------------

@pytest.mark.parametrize("cache", ["no-store", "max-age=3600"])
def test_a_granted_document_client_is_never_named_by_its_bare_host(client: Client, console: Console, clock: Clock,
                                                                   served: DocumentServer, admin: Admin,
                                                                   cache: str) -> None:
    # GIVEN a document client (no name of its own: an attacker's host is all there is to read) that
    # redeems its code where its document is not cached (no-store: another instance), or is
    client_id = served.serve("/client.json", {"client_name": ""}, headers={"Cache-Control": cache})
    host = client_id.split("/")[2]
    agent = admin.create_agent("hermes")
    flow = Flow(client, console, client_id, Pkce.new())
    assert flow.redeem(flow.code(agent=agent["id"])).status_code == 200
    # WHEN a person reads the agent's OAuth clients, in the console and through the API
    page = text(console.get(f"/console/agents/{agent['id']}"))
    grants = json.loads(admin.call("GET", f"/v1/agents/{agent['id']}/grants").body)["items"]
    # THEN the client is named by its whole client ID URL, never by the bare host, and the console
    # says, as the consent page does, that the host is only what identified it
    assert [grant["client_name"] for grant in grants] == [client_id]
    cell = re.search(r'<td data-label="Client">(.*?)</td>', page, re.DOTALL)
    assert cell is not None, page
    assert not re.match(rf"\s*{re.escape(host)}\s*<", cell.group(1)), cell.group(1)
    assert f"identified by {host}" in cell.group(1)


def test_the_token_side_names_an_uncached_document_client_by_its_url() -> None:
    # GIVEN a client ID URL whose document no cache holds
    documents.forget()
    client_id = "https://claude.ai.example/oauth/client.json"
    # WHEN the token or revocation endpoint names it
    named = documents.public_client(client_id, test_oauth.utcnow())
    # THEN the name is the whole URL (read as an address), never the host alone (read as a brand)
    assert named is not None and named.client_name == client_id
