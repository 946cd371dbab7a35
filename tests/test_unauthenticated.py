"""A stranger with no credential, trying to fill a table or run up the bill. The one write such a
request may cause is an OAuth client registration (RFC 7591 is open to anyone), bounded per source
address and overall per hour (chalicelib/oauth/limits.py), and forgotten a day later unless a
person approves it. Every other entrance answers a stranger without writing: each attack here
checks the tables (every item, before and after) and the AWS calls it caused.

The source address is what API Gateway saw the connection come from
(`requestContext.identity.sourceIp`); Chalice's test client says 127.0.0.1 unless a test says
otherwise (`from_address`). The local stack passes the socket's peer: the last test sends through
its real HTTP server from two loopback addresses."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode

import boto3
import pytest
from chalice.config import Config
from chalice.local import LambdaEventConverter, LocalDevServer
from chalice.test import Client

from app import app
from chalicelib.base.clock import utcnow
from chalicelib.base.config import settings
from chalicelib.store.models import TABLES
from tests.conftest import FORM, Admin, Console
from tests.iam import record_aws_fixture  # noqa: F401 - fixture `record_aws`: every AWS call a test makes
from tests.infra import AwsCall
from tests.test_oauth import Clock

REDIRECT = "https://chat.example/oauth/callback"
JSON = {"Content-Type": "application/json"}
PER_SOURCE = 20  # WORKSET_REGISTRATIONS_PER_SOURCE_HOUR's default
# what changes a table or a queue; a conditional write that fails changes nothing, which the
# tables' snapshots show
WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems",
                    "SendMessage", "SendMessageBatch"})


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    held = Clock(utcnow())
    for module in ("chalicelib.api.authorization", "chalicelib.identity.accounts", "chalicelib.console.common",
                   "chalicelib.console.auth"):
        monkeypatch.setattr(f"{module}.utcnow", lambda: held.now)
    return held


@pytest.fixture
def from_address(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Make the test client's requests come from `address`, as API Gateway tells it."""
    return lambda address: monkeypatch.setattr(LambdaEventConverter, "LOCAL_SOURCE_IP", address)


def register(client: Client, headers: dict[str, str] | None = None, **metadata: Any) -> Any:
    body = {"client_name": "Chat Product", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none",
            **metadata}
    return client.http.post("/oauth/register", headers={**JSON, **(headers or {})}, body=json.dumps(body))


def tables() -> dict[str, list[dict[str, Any]]]:
    """Every item of every table, in a stable order."""
    dynamodb = boto3.client("dynamodb")
    found = {}
    for model in TABLES:
        name = model.Meta.table_name
        items = dynamodb.scan(TableName=name, ConsistentRead=True)["Items"]
        found[name] = sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    return found


def oauth_clients() -> int:
    """How many OAuth clients are stored (expired ones too: moto never deletes by TTL)."""
    table = f"{settings().table_prefix}-admin-tokens"
    return sum(item["token_hash"]["S"].startswith("oauth-client#") for item in tables()[table])


def writes(record: list[AwsCall]) -> list[str]:
    return [f"{service}:{operation}" for service, operation, _, _ in record if operation in WRITES]


def refused(answer: Any, error: str) -> int:
    """Assert a quota's refusal; answer its Retry-After."""
    assert answer.status_code == 429, answer.body
    assert json.loads(answer.body) == {"error": error, "error_description": json.loads(answer.body)["error_description"]}
    assert answer.headers["Cache-Control"] == "no-store"
    return int(answer.headers["Retry-After"])


# --- registration: per source address ----------------------------------------------------------


def test_150_registrations_from_one_address_store_the_quota_and_nothing_more(
        client: Client, from_address: Callable[[str], None]) -> None:
    # GIVEN a stranger at one address
    from_address("203.0.113.7")
    # WHEN it registers 150 clients
    answers = [register(client, client_name=f"flood {n}") for n in range(PER_SOURCE + 1)]
    after_first_refusal = tables()
    answers += [register(client, client_name=f"flood {n}") for n in range(PER_SOURCE + 1, 150)]
    # THEN the first 20 are stored, and every later one is refused without a write
    assert [answer.status_code for answer in answers[:PER_SOURCE]] == [201] * PER_SOURCE
    for answer in answers[PER_SOURCE:]:
        assert 0 < refused(answer, "slow_down") <= 3600
    assert oauth_clients() == PER_SOURCE
    assert tables() == after_first_refusal  # not even the counter moved


def test_another_address_still_registers_while_one_is_refused(client: Client,
                                                               from_address: Callable[[str], None]) -> None:
    # GIVEN one address that spent its quota
    from_address("203.0.113.7")
    for _ in range(PER_SOURCE):
        assert register(client).status_code == 201
    assert register(client).status_code == 429
    # WHEN another address registers THEN it is stored
    from_address("198.51.100.20")
    assert register(client).status_code == 201
    assert oauth_clients() == PER_SOURCE + 1


@pytest.mark.parametrize("header", ["X-Forwarded-For", "X-Real-IP", "Forwarded", "CloudFront-Viewer-Address",
                                    "True-Client-IP"])
def test_a_forwarded_address_neither_dodges_nor_spends_a_quota(client: Client, from_address: Callable[[str], None],
                                                                header: str) -> None:
    # GIVEN an address that spent its quota
    from_address("203.0.113.7")
    for _ in range(PER_SOURCE):
        assert register(client).status_code == 201
    before = tables()
    # WHEN it claims, in a header, to be 40 other addresses
    for n in range(40):
        claimed = f"192.0.2.{n}"
        value = f"for={claimed}" if header == "Forwarded" else f"{claimed}:443" if "Viewer" in header else claimed
        refused(register(client, headers={header: value}), "slow_down")
    # THEN nothing was stored
    assert tables() == before
    # AND a header naming an address that spent its quota does not hold back another sender
    from_address("198.51.100.20")
    assert register(client, headers={header: "203.0.113.7"}).status_code == 201


def test_the_quota_comes_back_when_the_hour_ends(client: Client, from_address: Callable[[str], None],
                                                 clock: Clock) -> None:
    # GIVEN an address that spent its quota a minute before the hour ends
    clock.now = clock.now.replace(minute=59, second=0, microsecond=0)
    from_address("203.0.113.7")
    for _ in range(PER_SOURCE):
        assert register(client).status_code == 201
    # WHEN it asks again THEN it is told to come back when the hour ends
    assert refused(register(client), "slow_down") == 60
    clock.advance(seconds=59)
    assert refused(register(client), "slow_down") == 1
    # AND at the new hour its registrations are stored again, counted afresh
    clock.advance(seconds=1)
    assert [register(client).status_code for _ in range(PER_SOURCE + 1)] == [201] * PER_SOURCE + [429]
    assert oauth_clients() == 2 * PER_SOURCE


@pytest.mark.parametrize(("spent_by", "same", "other"), [
    # an IPv6 subscriber holds a whole /64: counting single addresses would be no bound at all
    ("2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:3::1"),
    # an IPv4 client reached over IPv6 (IPv4-mapped) is its IPv4 address
    ("203.0.113.7", "::ffff:203.0.113.7", "203.0.113.8"),
    # no readable address: all such share one quota
    ("", "not an address", "203.0.113.8"),
])
def test_addresses_count_by_who_holds_them(client: Client, from_address: Callable[[str], None], spent_by: str,
                                           same: str, other: str) -> None:
    from_address(spent_by)
    for _ in range(PER_SOURCE):
        assert register(client).status_code == 201
    from_address(same)
    refused(register(client), "slow_down")
    from_address(other)
    assert register(client).status_code == 201


# --- registration: overall ---------------------------------------------------------------------


def test_many_addresses_stop_at_the_overall_ceiling(client: Client, from_address: Callable[[str], None],
                                                    settings_env: Any, clock: Clock) -> None:
    # GIVEN an overall ceiling of 30 registrations an hour
    settings_env(WORKSET_REGISTRATIONS_PER_HOUR="30")
    # WHEN 60 addresses register one client each
    answers = []
    for n in range(60):
        from_address(f"198.51.100.{n}")
        answers.append(register(client))
        if n == 30:
            after_first_refusal = tables()
    # THEN 30 are stored, every later one refused as the service's, not the address's, limit
    assert [answer.status_code for answer in answers[:30]] == [201] * 30
    for answer in answers[30:]:
        refused(answer, "temporarily_unavailable")
    assert oauth_clients() == 30
    # AND a refusal wrote no client (each new address still gets its own counter)
    table = f"{settings().table_prefix}-admin-tokens"
    assert [item for item in tables()[table] if item["token_hash"]["S"].startswith("oauth-client#")] == [
        item for item in after_first_refusal[table] if item["token_hash"]["S"].startswith("oauth-client#")]
    # AND at the next hour registrations are stored again
    clock.advance(hours=1)
    assert register(client).status_code == 201


def test_registration_can_be_closed(client: Client, settings_env: Any, record_aws: list[AwsCall]) -> None:
    settings_env(WORKSET_REGISTRATIONS_PER_SOURCE_HOUR="0")
    refused(register(client), "slow_down")
    assert writes(record_aws) == [] and oauth_clients() == 0


# --- registration: what one may store ----------------------------------------------------------


@pytest.mark.parametrize("metadata", [
    {"client_name": "Chat\x1b[31mProduct"}, {"client_name": "Chat\nProduct"}, {"client_name": "\x00"},
    {"client_name": "Chat\u202eProduct"}, {"client_name": "Chat\u200bProduct"}, {"client_name": "a" * 101},
    {"client_uri": "https://chat.example/\x07"}, {"client_uri": "https://chat.example/a b"},
    {"redirect_uris": [REDIRECT] * 6}, {"grant_types": ["authorization_code"] * 11},
])
def test_a_refused_registration_writes_nothing_and_spends_no_quota(client: Client, record_aws: list[AwsCall],
                                                                    metadata: dict[str, Any]) -> None:
    # WHEN an address sends 30 registrations that are refused
    for _ in range(30):
        answer = register(client, **metadata)
        assert answer.status_code == 400, answer.body
        assert json.loads(answer.body)["error"] in ("invalid_client_metadata", "invalid_redirect_uri")
    # THEN nothing was written or even read
    assert [call for call in record_aws if call[0] == "dynamodb"] == []
    # AND its quota is whole
    assert [register(client).status_code for _ in range(PER_SOURCE)] == [201] * PER_SOURCE


def test_a_huge_registration_body_is_413_and_writes_nothing(client: Client, record_aws: list[AwsCall]) -> None:
    body = json.dumps({"redirect_uris": [REDIRECT], "client_name": "x", "padding": "a" * settings().max_request_bytes})
    answer = client.http.post("/oauth/register", headers=JSON, body=body)
    assert answer.status_code == 413 and json.loads(answer.body)["error"] == "invalid_request"
    assert [call for call in record_aws if call[0] == "dynamodb"] == []


def test_the_largest_registration_stores_one_small_item(client: Client) -> None:
    # GIVEN five redirect URIs of 2,000 characters, a long name and a long client_uri
    uris = [f"https://chat{n}.example/" + "a" * (2000 - len(f"https://chat{n}.example/")) for n in range(5)]
    answer = register(client, redirect_uris=uris, client_name="n" * 100,
                      client_uri="https://chat.example/" + "b" * (2000 - len("https://chat.example/")))
    assert answer.status_code == 201, answer.body
    # THEN the item stays far below DynamoDB's 400 KB (what a client can make us store is bounded)
    (item,) = [item for item in tables()[f"{settings().table_prefix}-admin-tokens"]
               if item["token_hash"]["S"].startswith("oauth-client#")]
    assert len(json.dumps(item)) < 16 * 1024


def test_an_unconsented_client_is_forgotten_after_a_day(client: Client, admin: Admin, clock: Clock) -> None:
    # GIVEN a client no person approved
    client_id = json.loads(register(client).body)["client_id"]
    query = {"response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT, "scope": "mcp",
             "code_challenge": "c" * 43, "code_challenge_method": "S256", "resource": settings().mcp_url}
    clock.advance(hours=23, minutes=59)
    person = Console(client)
    assert person.sign_in(admin.token).status_code == 303
    assert person.get("/console/oauth/authorize?" + urlencode(query)).status_code == 200
    # WHEN a day has passed (moto, like DynamoDB's TTL for up to two days, still holds the item)
    clock.advance(minutes=1)
    assert oauth_clients() == 1
    # THEN the consent page and the token endpoint no longer know it
    page = person.get("/console/oauth/authorize?" + urlencode(query))
    assert page.status_code == 400 and "not registered" in page.body.decode()
    answer = client.http.post("/oauth/token", headers={"Content-Type": FORM["Content-Type"]},
                              body=urlencode({"grant_type": "authorization_code", "code": "wsc_x", "client_id": client_id}))
    assert answer.status_code == 401 and json.loads(answer.body)["error"] == "invalid_client"


# --- every other entrance writes nothing for a stranger ----------------------------------------


def test_the_token_and_revocation_endpoints_write_nothing_for_junk(client: Client, admin: Admin,
                                                                   record_aws: list[AwsCall]) -> None:
    # GIVEN a public client a stranger registered, and an agent that exists
    client_id = json.loads(register(client).body)["client_id"]
    agent_id = admin.create_agent()["id"]
    before = tables()
    record_aws.clear()
    # WHEN it sends junk at volume to both endpoints
    junk = [
        {"grant_type": "authorization_code", "code": "wsc_guess", "client_id": client_id, "code_verifier": "v" * 43},
        {"grant_type": "refresh_token", "refresh_token": f"wsr_{agent_id}_guess", "client_id": client_id},
        {"grant_type": "refresh_token", "refresh_token": "wsr_../../x_y", "client_id": client_id},
        {"grant_type": "client_credentials", "client_id": client_id},
        {"grant_type": "authorization_code", "code": "wsc_guess", "client_id": "ocunknown"},
        {"grant_type": "authorization_code", "code": "x", "client_id": "a" * 5000},
        {},
    ]
    revocations = [{"token": f"wst_{agent_id}_guess", "client_id": client_id},
                   {"token": f"wsr_{agent_id}_guess", "client_id": client_id}, {"token": "x", "client_id": "ocnope"}]
    statuses = set()
    for _ in range(15):
        for form in junk:
            statuses.add(client.http.post("/oauth/token", headers={"Content-Type": FORM["Content-Type"]},
                                          body=urlencode(form)).status_code)
        for form in revocations:
            statuses.add(client.http.post("/oauth/revoke", headers={"Content-Type": FORM["Content-Type"]},
                                          body=urlencode(form)).status_code)
        statuses.add(client.http.post("/oauth/token", headers={"Content-Type": FORM["Content-Type"],
                                                               "Authorization": "Basic !!!"}, body="").status_code)
    # THEN every answer is a refusal (RFC 7009: an unknown token's revocation is a 200 that
    # changes nothing), and nothing was written
    assert statuses <= {200, 400, 401}
    assert writes(record_aws) == []
    assert tables() == before


def test_failed_console_sign_ins_write_nothing(client: Client, admin: Admin, record_aws: list[AwsCall]) -> None:
    # GIVEN a sign-in form (its nonce cookie and CSRF token, which a stranger can fetch)
    before = tables()
    form = client.http.get("/console/sign-in")
    cookie = form.headers["Set-Cookie"].split(";")[0]
    csrf = form.body.decode().split('name="csrf" value="')[1].split('"')[0]
    # WHEN 100 wrong admin tokens are tried
    for n in range(100):
        answer = client.http.post("/console/sign-in", headers={**FORM, "Cookie": cookie},
                                  body=urlencode({"csrf": csrf, "token": f"wsa_guess{n:04d}" + "x" * 40}))
        assert answer.status_code == 401
    # THEN nothing was written: each try costs one read, and the stage throttle bounds the tries
    assert writes(record_aws) == []
    assert tables() == before
    assert sum(call[1] == "GetItem" for call in record_aws) == 100


def _route_requests() -> list[tuple[str, str, str]]:
    """Every route and method of the app, as a stranger would call it: path parameters filled with
    junk, and a body of each route's first content type."""
    found = []
    for path, methods in sorted(app.routes.items()):
        for method, entry in sorted(methods.items()):
            found.append((method, path.replace("{", "").replace("}", ""), entry.content_types[0]))
    return found


@pytest.mark.parametrize(("method", "path", "content_type"), _route_requests())
def test_no_route_writes_for_a_stranger_but_registration(client: Client, admin: Admin, record_aws: list[AwsCall],
                                                         method: str, path: str, content_type: str) -> None:
    """A route added later is tried too: whatever it is, a request without a credential (with a
    forged session cookie and bearer token, a wrong CSRF token, junk fields) writes nothing."""
    before = tables()
    record_aws.clear()
    body = json.dumps({"name": "x", "redirect_uris": []}) if content_type == "application/json" else urlencode(
        {"csrf": "forged", "token": "wsa_guess_" + "x" * 40, "decision": "approve", "agent": "new", "name": "x"})
    headers = {"Content-Type": content_type, "Authorization": "Bearer wsk_ag00_forged",
               "Cookie": "workset_console=ac1.9999999999.forged.forged"}
    answer = client.http.request(method, f"{path}?client_id=x&state=x&code=x", headers=headers,
                                 body=body if method in ("POST", "PUT", "PATCH") else b"")
    assert answer.status_code < 500, (answer.status_code, answer.body[:300])
    assert writes(record_aws) == []
    assert tables() == before


def test_the_consent_page_costs_a_stranger_no_call_at_all(client: Client, record_aws: list[AwsCall]) -> None:
    # WHEN a browser without a session opens the consent page
    answer = client.http.get("/console/oauth/authorize?" + urlencode({"client_id": "ocx", "redirect_uri": REDIRECT}))
    # THEN it is sent to sign in, and neither DynamoDB nor any other service was asked anything
    assert answer.status_code == 303 and answer.headers["Location"].startswith("/console/sign-in")
    assert record_aws == []


# --- the local stack: the socket's peer is the source ------------------------------------------


@pytest.fixture
def local_server() -> Iterator[int]:
    """The local stack's own HTTP server and handler (local/http.py) over this test's tables."""
    from local.http import Handler, Server

    server = LocalDevServer(app, Config.create(chalice_stage="local", app_name="workset"), "127.0.0.1", 0,
                            handler_cls=Handler, server_cls=Server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server.server_address[1]
    server.shutdown()
    thread.join(timeout=10)


def _register_over_http(port: int, source: str, forwarded: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    body = json.dumps({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"})
    try:
        connection.request("POST", "/oauth/register", body=body, headers={
            **JSON, "X-Forwarded-For": forwarded, "Forwarded": f"for={forwarded}", "X-Real-IP": forwarded})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_the_local_stack_counts_the_socket_peer_not_a_header(local_server: int) -> None:
    # WHEN 30 registrations come from 127.0.0.1, each claiming another address in its headers
    statuses = [_register_over_http(local_server, "127.0.0.1", f"192.0.2.{n}") for n in range(PER_SOURCE + 10)]
    # THEN the peer's quota holds
    assert statuses == [201] * PER_SOURCE + [429] * 10
    # AND another peer (127.0.0.2, loopback too), claiming to be the first, registers
    assert _register_over_http(local_server, "127.0.0.2", "127.0.0.1") == 201
    assert oauth_clients() == PER_SOURCE + 1
