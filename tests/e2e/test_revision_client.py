"""The 2026-07-28 revision's newer parts with the real MCP Python SDK client (mcp 2.3.0) against
the served local stack:

- the working-set extension (basic/versioning, "Extension Negotiation"), read by the SDK from
  `initialize` (legacy mode) and `server/discover` (2026-07-28 mode), and the SDK's own
  `Mcp-Method` / `Mcp-Name` headers accepted (transports/streamable-http, "Standard Request
  Headers"; the mismatches are tests/test_mcp_revision.py, at the HTTP level: the SDK never sends
  a wrong one);
- a Client ID Metadata Document client (basic/authorization/client-registration, "Client ID
  Metadata Documents"): the SDK's `OAuthClientProvider(client_metadata_url=...)` sees
  `client_id_metadata_document_supported`, skips registration and uses its https URL as its
  client_id; the stack fetches the document (served over TLS on this machine, trusted through
  `SSL_CERT_FILE` by that stack alone), a person consents in headless Chromium, and the token works.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import shutil
import ssl
import subprocess
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from mcp.client import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata

from tests.e2e.conftest import Stack, start_stack, stop_stack
from tests.e2e.test_mcp_client import connect
from tests.e2e.test_oauth_client import CHROMIUM, MemoryStorage, Person, free_port, list_with

pytestmark = pytest.mark.anyio
WORKING_SET = "io.workset/working-set"


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_the_sdk_client_reads_the_working_set_extension(stack: Stack, mode: str) -> None:
    agent = stack.new_agent()
    async with connect(stack, agent["api_key"], mode) as client:
        # WHEN the SDK client learns the server's capabilities in its revision's way
        if mode == "legacy":
            extensions = client.server_capabilities.extensions or {}
        else:
            extensions = (await client.session.send_discover(mode))["capabilities"]["extensions"]
        # THEN the working set is declared, with what changes the list and how it is announced
        settings = extensions[WORKING_SET]
        assert settings["changedByTools"] == ["promote", "demote", "acquire"]
        assert settings["announcements"]["2026-07-28"]["method"] == "subscriptions/listen"
        # AND the SDK's own standard headers pass the server's checks (a tools/call carries Mcp-Name)
        found = await client.call_tool("find_tool", {"query": "orders"})
        assert found.is_error is False


# --- a metadata-document client, end to end -------------------------------------------------------------

def _certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1, and its key (PEM files)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


class _Documents:
    """An https server on 127.0.0.1 serving one metadata document; counts its fetches."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.document: dict[str, Any] = {}
        self.fetches = 0
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                served.fetches += 1
                body = json.dumps(served.document).encode()
                self.send_response(200 if self.path == "/oauth/client.json" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Cache-Control", "max-age=300")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://localhost:{self.httpd.server_address[1]}/oauth/client.json"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def documents(tls: tuple[Path, Path]) -> Iterator[_Documents]:
    served = _Documents(*tls)
    yield served
    served.close()


@pytest.fixture(scope="module")
def trusting_stack(tmp_path_factory: pytest.TempPathFactory, tls: tuple[Path, Path]) -> Iterator[Stack]:
    """A stack that trusts the test's certificate (and nothing else): its outbound guard verifies TLS
    as it always does, against this one trust anchor."""
    running = start_stack(tmp_path_factory.mktemp("cimd-stack"), {"SSL_CERT_FILE": str(tls[0])})
    yield running
    stop_stack(running)


@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is not installed: `./dev test` installs it")
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_metadata_document_client_connects_without_registering(trusting_stack: Stack,
                                                                        documents: _Documents, mode: str) -> None:
    stack = trusting_stack
    person = Person(stack, f"cimd-{uuid.uuid4().hex[:6]}", f"http://localhost:{free_port()}/callback")
    # GIVEN a client that publishes its metadata document at an https URL
    documents.document = {"client_id": documents.url, "client_name": "CIMD Chat", "redirect_uris": [person.callback],
                          "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
                          "token_endpoint_auth_method": "none"}
    storage = MemoryStorage()
    provider = OAuthClientProvider(
        server_url=f"{stack.url}/mcp", client_metadata_url=documents.url,
        client_metadata=OAuthClientMetadata(client_name="CIMD Chat", redirect_uris=[person.callback],
                                            grant_types=["authorization_code", "refresh_token"],
                                            token_endpoint_auth_method="none"),
        storage=storage, redirect_handler=person.redirect_handler, callback_handler=person.callback_handler)
    http = httpx2.AsyncClient(auth=provider, timeout=30)
    async with http, Client(streamable_http_client(f"{stack.url}/mcp", http_client=http), mode=mode) as client:
        # WHEN it connects by the server's URL alone
        tools = [tool.name for tool in (await client.list_tools()).tools]
        # THEN it used its URL as its client_id, with no registration
        assert "find_tool" in tools
        assert storage.client_info is not None and storage.client_info.client_id == documents.url
    # AND the stack read the document (once: it may be reused for five minutes), and the person saw
    # the client identified by the document's host, warned that the answer goes to this computer
    page = person.pages[0]
    assert documents.fetches == 1
    assert "CIMD Chat" in page and f"identified by localhost:{documents.url.split(':')[2].split('/')[0]}" in page
    assert 'id="unverified"' not in page and 'id="loopback-warning"' in page
    # AND the token it got works
    assert storage.tokens is not None and list_with(stack, storage.tokens.access_token) == 200


# --- the TypeScript SDK's client ---------------------------------------------------------------------------

TS_CLIENT = Path(__file__).with_name("ts_client.cjs")
TS_SDK = Path(__file__).parent.parent / "upstreams" / "node_modules" / "@modelcontextprotocol" / "sdk"


@pytest.mark.skipif(not TS_SDK.exists() or shutil.which("node") is None,
                    reason="node and tests/upstreams/node_modules are needed: `./dev test` installs them")
def test_the_typescript_sdk_client_reads_the_extension_from_initialize(stack: Stack) -> None:
    # GIVEN an agent, and the TypeScript SDK's client (a 2025-11-25 client: initialize)
    agent = stack.new_agent()
    # WHEN it connects, lists and calls a tool
    done = subprocess.run(["node", str(TS_CLIENT)], capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "MCP_URL": f"{stack.url}/mcp", "MCP_KEY": agent["api_key"]})
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # THEN it kept the working-set extension from initialize's capabilities (its schema has the field)
    assert seen["capabilities"]["extensions"][WORKING_SET]["changedByTools"] == ["promote", "demote", "acquire"]
    assert seen["capabilities"]["tools"] == {"listChanged": True}
    # AND it worked as before: the meta-tools listed, a tool called
    assert "find_tool" in seen["tools"] and seen["isError"] is False
