"""The local stack's demo toolbox: the hand-written tools the README's walk-through calls, and a
real public API description, shipped in the repository, imported whole and pointed at the demo
vendor on 127.0.0.1."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from chalicelib.base.clock import utcnow
from chalicelib.catalog import imports, toolbox
from chalicelib.tools import definitions
from local import demo
from tests.conftest import Admin

BASE = "http://127.0.0.1:9"


@pytest.fixture
def vendor() -> Iterator[ThreadingHTTPServer]:
    server = demo.start_vendor(0)
    yield server
    server.shutdown()
    server.server_close()


def _account(admin: Admin) -> str:
    from chalicelib.identity import accounts

    found = accounts.account_of_admin_token(admin.token)
    assert found is not None
    return found


def test_the_demo_api_is_hundreds_of_operations_and_not_one_kept_for_evaluation() -> None:
    # GIVEN the shipped document and the list of APIs kept for measuring find_tool
    document = demo.demo_api()
    from bench.apis import evaluation

    # THEN it is a real public description with hundreds of operations, under a licence that allows shipping it
    operations = [op for item in document["paths"].values() for op in item.values() if isinstance(op, dict)]
    assert len(operations) >= 150
    assert document["info"]["license"]["name"].startswith("Apache")
    assert (demo.DEMO_API.parent / "LICENSE-Apache-2.0").exists()
    # AND neither its host nor its vendor name is one of the held-out APIs (the list lives beside
    # the project, in ../shared: a clone without it, such as CI's, cannot check this part)
    try:
        held_out = evaluation()
    except FileNotFoundError as missing:
        pytest.skip(str(missing))
    host = document["servers"][0]["url"].split("//")[1]
    assert not any(host.endswith(name.split("/")[0]) or demo.DEMO_API_VENDOR in name for name in held_out)


def test_the_demo_import_publishes_its_operations_calling_only_the_demo_vendor(admin: Admin) -> None:
    # GIVEN an account, and the demo's import request for a demo vendor at BASE
    account_id = _account(admin)
    # WHEN the local stack's seed imports it (dry run: the same lines, nothing written)
    report = imports.import_openapi(account_id, {**demo.demo_import(BASE), "dry_run": True}, "demo", utcnow())
    # THEN nearly every operation becomes a tool (what cannot be one is skipped with its reason)
    counts = report.counts()
    assert counts[imports.PUBLISHED] >= 190, counts
    assert all(line.reason for line in report.lines if line.outcome == imports.SKIPPED)
    # AND every tool it would publish calls the demo vendor, never the vendor's real host
    found = imports.import_openapi(account_id, demo.demo_import(BASE), "demo", utcnow())
    heads = toolbox.resolve_many(account_id, [(demo.DEMO_API_VENDOR, line.name) for line in found.lines
                                              if line.outcome == imports.PUBLISHED])
    assert len(heads) == counts[imports.PUBLISHED]
    assert all(head.spec.request.url.startswith(f"{BASE}{demo.DEMO_API_PREFIX}/") for head in heads)


def test_the_demo_toolbox_spares_tokens_and_the_walkthrough_search_finds_the_hand_tools(admin: Admin) -> None:
    # GIVEN the demo toolbox seeded as the local stack seeds it
    from chalicelib.console import present

    account_id = _account(admin)
    for definition in demo.demo_tools(BASE):
        toolbox.publish(account_id, definitions.parse_spec(definition), published_by="demo", now=utcnow())
    imports.import_openapi(account_id, demo.demo_import(BASE), "demo", utcnow())
    every_tool = toolbox.resolve_many(account_id, [(head.vendor, head.name) for head in
                                                   _all_heads(account_id)])
    # WHEN one tool is promoted, as in the README's walk-through
    promoted = [tool for tool in every_tool if tool.key == ("unleashed", "list-sales-orders")]
    footprint = present.footprint(promoted, every_tool)
    # THEN listing the whole toolbox would cost far more than the working set: the card shows tokens spared
    assert footprint.spared_bytes > 10 * footprint.working_set_bytes
    # AND the walk-through's search still finds the hand-written tools first
    hits, _ = toolbox.search(account_id, "unleashed sales orders", 3)
    assert {tool.spec.vendor for tool in hits} == {"unleashed"}


def test_the_demo_vendor_answers_an_imported_operation_with_a_placeholder(vendor: ThreadingHTTPServer) -> None:
    # GIVEN the demo vendor
    base = f"http://127.0.0.1:{vendor.server_address[1]}"
    # WHEN an imported operation's request reaches it
    request = urllib.request.Request(f"{base}{demo.DEMO_API_PREFIX}/v2/locations?limit=2", method="GET")
    with urllib.request.urlopen(request, timeout=5) as answer:
        body: dict[str, Any] = json.loads(answer.read())
    # THEN it answers what was asked, saying it is the demo
    assert body["demo"] is True and body["path"] == "/v2/locations" and body["query"] == {"limit": "2"}
    # AND a path outside its APIs is a 404
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(f"{base}/elsewhere", method="DELETE"), timeout=5)
    assert refused.value.code == 404


def _all_heads(account_id: str) -> list[Any]:
    heads: list[Any] = []
    cursor = None
    while True:
        page = toolbox.page(account_id, limit=100, cursor=cursor)
        heads += page.items
        if not page.next:
            return heads
        cursor = page.next




@pytest.mark.parametrize("length", ["-1", "lots", "99999999999", "9" * 5000])
def test_the_demo_vendor_answers_a_bad_content_length_at_once(vendor: ThreadingHTTPServer, length: str) -> None:
    # GIVEN a request to an imported operation whose Content-Length is negative, no number, or far
    # more than is sent (the connection stays open, as a client's keep-alive does)
    import socket

    with socket.create_connection(("127.0.0.1", vendor.server_address[1]), timeout=5) as connection:
        connection.sendall(f"POST {demo.DEMO_API_PREFIX}/v2/payments HTTP/1.1\r\nHost: x\r\n"
                           f"Content-Length: {length}\r\n\r\n{{}}".encode())
        # WHEN it reads the answer THEN one comes (no thread waits forever for bytes never sent)
        connection.settimeout(5)
        answer = connection.recv(4096)
    assert answer.startswith(b"HTTP/1.") and b" 400 " in answer.split(b"\r\n", 1)[0]
