"""Workset as an OAuth 2.1 authorization server for `/mcp` (chalicelib/oauth/): discovery,
registration, consent in the console, codes, tokens, refresh rotation, revocation; and the agent
lifecycle (rotate a key, revoke, archive). Driven through Chalice's test client; the end-to-end
flow with the MCP SDK's own OAuth client is tests/e2e/test_oauth_client.py."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from chalice.test import Client

from chalicelib.base.clock import utcnow
from chalicelib.base.config import settings
from tests.conftest import FORM, Admin, Console, log_lines
from tests.test_console import rows, text

REDIRECT = "https://chat.example/oauth/callback"
MCP_INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}


@dataclass
class Clock:
    """The time the OAuth endpoints, the console and authentication read."""

    now: datetime

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    held = Clock(utcnow())
    for module in ("chalicelib.api.authorization", "chalicelib.identity.accounts", "chalicelib.console.common"):
        monkeypatch.setattr(f"{module}.utcnow", lambda: held.now)
    yield held


@dataclass
class Pkce:
    verifier: str

    @classmethod
    def new(cls) -> Pkce:
        return cls(secrets.token_urlsafe(48))

    @property
    def challenge(self) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(self.verifier.encode()).digest()).decode().rstrip("=")


def register(client: Client, **metadata: Any) -> Any:
    body = {"client_name": "Chat Product", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"], **metadata}
    return client.http.post("/oauth/register", headers={"Content-Type": "application/json"}, body=json.dumps(body))


def authorize_query(client_id: str, pkce: Pkce, **overrides: str) -> dict[str, str]:
    return {"response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT, "state": "st-123",
            "code_challenge": pkce.challenge, "code_challenge_method": "S256", "scope": "mcp",
            "resource": settings().mcp_url, **overrides}


def token(client: Client, **form: str) -> Any:
    return client.http.post("/oauth/token", headers=FORM, body=urlencode(form))


def mcp(client: Client, bearer: str, message: dict[str, Any] = LIST) -> Any:
    return client.http.post("/mcp", headers={"Content-Type": "application/json", "Authorization": f"Bearer {bearer}",
                                             "MCP-Protocol-Version": "2025-11-25"}, body=json.dumps(message))


def redirected(answer: Any) -> dict[str, str]:
    """The query of a redirect to the client (asserting it goes there)."""
    assert answer.status_code == 303, text(answer)
    location = answer.headers["Location"]
    assert location.startswith(REDIRECT + "?"), location
    return {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}


@dataclass
class Flow:
    """One client's way through consent to tokens."""

    client: Client
    console: Console
    client_id: str
    pkce: Pkce

    def consent(self, agent: str = "new", decision: str = "approve", **overrides: str) -> Any:
        query = authorize_query(self.client_id, self.pkce, **overrides)
        page = self.console.get("/console/oauth/authorize?" + urlencode(query))
        assert page.status_code == 200, text(page)
        return self.console.post("/console/oauth/authorize",
                                 {**query, "agent": agent, "decision": decision, "name": "chat agent"})

    def code(self, agent: str = "new") -> str:
        answer = redirected(self.consent(agent))
        assert answer["state"] == "st-123" and answer["iss"] == settings().public_url + "/"
        return answer["code"]

    def redeem(self, code: str, **overrides: str) -> Any:
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "client_id": self.client_id,
                "code_verifier": self.pkce.verifier, "resource": settings().mcp_url, **overrides}
        return token(self.client, **form)

    def tokens(self, agent: str = "new") -> dict[str, Any]:
        answer = self.redeem(self.code(agent))
        assert answer.status_code == 200, text(answer)
        return json.loads(answer.body)

    def refresh(self, refresh_token: str) -> Any:
        return token(self.client, grant_type="refresh_token", refresh_token=refresh_token, client_id=self.client_id)


@pytest.fixture
def flow(client: Client, console: Console, clock: Clock) -> Flow:
    registered = register(client)
    assert registered.status_code == 201, text(registered)
    return Flow(client, console, json.loads(registered.body)["client_id"], Pkce.new())


# --- discovery ------------------------------------------------------------------------------------

def test_a_401_from_mcp_points_at_the_resource_metadata_which_points_at_this_server(client: Client) -> None:
    # WHEN a client calls /mcp with no token
    answer = client.http.post("/mcp", headers={"Content-Type": "application/json"}, body=json.dumps(MCP_INIT))
    # THEN the challenge names the resource metadata (and no token error: none was sent)
    challenge = answer.headers["WWW-Authenticate"]
    assert answer.status_code == 401
    metadata_url = re.search(r'resource_metadata="([^"]+)"', challenge).group(1)
    assert "error=" not in challenge and 'scope="mcp"' in challenge
    resource = json.loads(client.http.get(urlsplit(metadata_url).path).body)
    assert resource["resource"] == settings().mcp_url
    # AND the authorization server's metadata names itself as that issuer, with S256 only
    server = json.loads(client.http.get("/.well-known/oauth-authorization-server").body)
    assert resource["authorization_servers"] == [server["issuer"]]
    assert server["code_challenge_methods_supported"] == ["S256"]
    assert server["authorization_response_iss_parameter_supported"] is True
    assert urlsplit(server["authorization_endpoint"]).path == "/console/oauth/authorize"


def test_a_wrong_token_is_an_invalid_token_challenge(client: Client) -> None:
    answer = mcp(client, "wst_ag0123_nothing")
    assert answer.status_code == 401
    assert 'error="invalid_token"' in answer.headers["WWW-Authenticate"]


# --- registration ---------------------------------------------------------------------------------

def test_a_public_client_registers_without_a_secret_and_a_confidential_one_gets_one(client: Client) -> None:
    public = json.loads(register(client, extra_field="ignored").body)
    confidential = register(client, token_endpoint_auth_method="client_secret_post")
    assert confidential.status_code == 201
    assert "client_secret" not in public and public["redirect_uris"] == [REDIRECT]
    assert json.loads(confidential.body)["client_secret"].startswith("wss_")


@pytest.mark.parametrize("uri", ["http://chat.example/cb", "https://chat.example/cb#frag", "javascript:alert(1)",
                                 "https://user:pw@chat.example/cb", "/relative", "https://chat.example/\u0000"])
def test_an_unsafe_redirect_uri_is_refused_at_registration(client: Client, uri: str) -> None:
    answer = register(client, redirect_uris=[uri])
    assert answer.status_code == 400
    assert json.loads(answer.body)["error"] == "invalid_redirect_uri"


@pytest.mark.parametrize("metadata", [{"grant_types": ["client_credentials"]}, {"response_types": ["token"]},
                                      {"token_endpoint_auth_method": "private_key_jwt"}, {"redirect_uris": []},
                                      {"client_name": "a\nb"}])
def test_bad_metadata_is_refused(client: Client, metadata: dict[str, Any]) -> None:
    answer = register(client, **metadata)
    assert answer.status_code == 400
    assert json.loads(answer.body)["error"] in ("invalid_client_metadata", "invalid_redirect_uri")


def test_a_body_that_is_not_json_is_refused(client: Client) -> None:
    answer = client.http.post("/oauth/register", headers={"Content-Type": "application/json"}, body="{nope")
    assert answer.status_code == 400 and json.loads(answer.body)["error"] == "invalid_client_metadata"


# --- consent --------------------------------------------------------------------------------------

def test_the_consent_page_names_the_client_and_where_the_answer_goes(flow: Flow) -> None:
    page = flow.console.get("/console/oauth/authorize?" + urlencode(authorize_query(flow.client_id, flow.pkce)))
    body = text(page)
    assert 'id="client-name">Chat Product<' in body
    assert 'id="redirect-host">chat.example<' in body
    assert 'id="unverified"' in body
    # AND the form may send the browser to the client (Content Security Policy's form-action)
    assert "form-action 'self' https://chat.example;" in page.headers["Content-Security-Policy"]


def test_without_a_session_the_person_signs_in_and_comes_back(flow: Flow, client: Client, admin: Admin) -> None:
    path = "/console/oauth/authorize?" + urlencode(authorize_query(flow.client_id, flow.pkce))
    answer = client.http.get(path)
    assert answer.status_code == 303
    assert answer.headers["Location"] == "/console/sign-in?" + urlencode({"next": path})
    person = Console(client)
    assert person.sign_in(admin.token, next_path=path).headers["Location"] == path


def test_approving_for_a_new_agent_mints_a_code_that_gives_tokens_for_mcp(flow: Flow, admin: Admin) -> None:
    tokens = flow.tokens()
    assert tokens["token_type"] == "Bearer" and tokens["expires_in"] == 3600 and tokens["scope"] == "mcp"
    # THEN the access token acts as the new agent at /mcp
    listed = mcp(flow.client, tokens["access_token"])
    assert listed.status_code == 200
    assert "find_tool" in text(listed)
    agents = json.loads(admin.call("GET", "/v1/agents").body)["items"]
    assert [agent["name"] for agent in agents] == ["chat agent"]


def test_approving_for_an_existing_agent_grants_that_agent(flow: Flow, admin: Admin) -> None:
    agent = admin.create_agent("hermes")
    tokens = flow.tokens(agent=agent["id"])
    assert tokens["access_token"].startswith(f"wst_{agent['id']}_")
    grants = json.loads(admin.call("GET", f"/v1/agents/{agent['id']}/grants").body)["items"]
    assert [(grant["client_name"], grant["revoked_at"]) for grant in grants] == [("Chat Product", None)]
    # AND the agent's key keeps working beside the token
    assert mcp(flow.client, agent["api_key"]).status_code == 200


def test_declining_tells_the_client_and_grants_nothing(flow: Flow, admin: Admin) -> None:
    answer = redirected(flow.consent(decision="deny"))
    assert answer["error"] == "access_denied" and "code" not in answer and answer["state"] == "st-123"
    assert json.loads(admin.call("GET", "/v1/agents").body)["items"] == []


def test_a_foreign_redirect_uri_is_told_to_the_person_and_nothing_is_sent_there(flow: Flow) -> None:
    query = authorize_query(flow.client_id, flow.pkce, redirect_uri="https://evil.example/cb")
    page = flow.console.get("/console/oauth/authorize?" + urlencode(query))
    assert page.status_code == 400 and "Location" not in page.headers
    assert "did not register" in text(page)
    # AND a form posted with the foreign URI anyway gets no code either
    posted = flow.console.post("/console/oauth/authorize", {**query, "agent": "new", "decision": "approve"})
    assert posted.status_code == 400 and "Location" not in posted.headers


def test_an_unknown_client_is_told_to_the_person(flow: Flow) -> None:
    page = flow.console.get("/console/oauth/authorize?" + urlencode(authorize_query("ocnope", flow.pkce)))
    assert page.status_code == 400 and "not registered" in text(page)


@pytest.mark.parametrize(("overrides", "error"), [
    ({"code_challenge_method": "plain"}, "invalid_request"),
    ({"code_challenge": ""}, "invalid_request"),
    ({"response_type": "token"}, "unsupported_response_type"),
    ({"scope": "admin"}, "invalid_scope"),
    ({"resource": "https://other.example/mcp"}, "invalid_target"),
])
def test_a_bad_authorization_request_is_answered_at_the_redirect_uri(flow: Flow, overrides: dict[str, str],
                                                                     error: str) -> None:
    query = authorize_query(flow.client_id, flow.pkce, **overrides)
    answer = redirected(flow.console.get("/console/oauth/authorize?" + urlencode(query)))
    assert answer["error"] == error and answer["state"] == "st-123"


def test_a_form_without_the_session_csrf_token_grants_nothing(flow: Flow) -> None:
    query = authorize_query(flow.client_id, flow.pkce)
    answer = flow.console.post("/console/oauth/authorize", {**query, "agent": "new", "decision": "approve"},
                               csrf="forged")
    assert answer.status_code == 403 and "Location" not in answer.headers


def test_a_revoked_agent_cannot_be_chosen(flow: Flow, admin: Admin) -> None:
    agent = admin.create_agent("gone")
    admin.call("POST", f"/v1/agents/{agent['id']}/revoke")
    answer = flow.consent(agent=agent["id"])
    assert answer.status_code == 400 and "revoked" in text(answer)


# --- codes ----------------------------------------------------------------------------------------

def test_a_bad_pkce_verifier_is_refused(flow: Flow) -> None:
    code = flow.code()
    answer = flow.redeem(code, code_verifier=Pkce.new().verifier)
    assert answer.status_code == 400 and json.loads(answer.body)["error"] == "invalid_grant"
    assert "access_token" not in text(answer)


def test_a_reused_code_is_refused_and_revokes_what_it_gave(flow: Flow, logged: Any) -> None:
    code = flow.code()
    first = json.loads(flow.redeem(code).body)
    again = flow.redeem(code)
    assert again.status_code == 400 and json.loads(again.body)["error"] == "invalid_grant"
    assert mcp(flow.client, first["access_token"]).status_code == 401
    assert flow.refresh(first["refresh_token"]).status_code == 400
    # AND the replay is logged and counted for its alarm, without the code
    [replay] = log_lines(logged, "oauth.replay_revoked")
    assert replay["replayed"] == "code" and replay["client_id"] == flow.client_id
    assert replay["_aws"]["CloudWatchMetrics"][0]["Metrics"] == [{"Name": "OAuthReplays", "Unit": "Count"}]
    assert code not in json.dumps(replay)


def test_a_code_for_another_redirect_uri_or_resource_or_client_is_refused(flow: Flow, client: Client) -> None:
    code = flow.code()
    assert json.loads(flow.redeem(code, redirect_uri="https://chat.example/other").body)["error"] == "invalid_grant"
    assert json.loads(flow.redeem(code, resource="https://x.example/mcp").body)["error"] == "invalid_target"
    other = json.loads(register(client).body)["client_id"]
    assert json.loads(flow.redeem(code, client_id=other).body)["error"] == "invalid_grant"
    # AND after those refusals the right redemption still works
    assert flow.redeem(code).status_code == 200


def test_an_expired_code_is_refused(flow: Flow, clock: Clock) -> None:
    code = flow.code()
    clock.advance(minutes=6)
    assert json.loads(flow.redeem(code).body)["error"] == "invalid_grant"


def test_a_confidential_client_must_authenticate(client: Client, console: Console, clock: Clock) -> None:
    registered = json.loads(register(client, token_endpoint_auth_method="client_secret_basic").body)
    flow = Flow(client, console, registered["client_id"], Pkce.new())
    code = flow.code()
    refused = flow.redeem(code)
    assert refused.status_code == 401 and json.loads(refused.body)["error"] == "invalid_client"
    basic = base64.b64encode(f"{registered['client_id']}:{registered['client_secret']}".encode()).decode()
    answer = client.http.post("/oauth/token", headers={**FORM, "Authorization": f"Basic {basic}"}, body=urlencode({
        "grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT,
        "code_verifier": flow.pkce.verifier}))
    assert answer.status_code == 200, text(answer)


def test_a_parameter_sent_twice_is_refused(flow: Flow) -> None:
    answer = flow.client.http.post("/oauth/token", headers=FORM, body="grant_type=refresh_token&grant_type=x")
    assert answer.status_code == 400 and json.loads(answer.body)["error"] == "invalid_request"


# --- tokens ---------------------------------------------------------------------------------------

def test_refresh_rotates_both_tokens_and_the_old_access_token_stops(flow: Flow) -> None:
    first = flow.tokens()
    renewed = flow.refresh(first["refresh_token"])
    assert renewed.status_code == 200, text(renewed)
    second = json.loads(renewed.body)
    assert second["refresh_token"] != first["refresh_token"]
    assert mcp(flow.client, second["access_token"]).status_code == 200
    assert mcp(flow.client, first["access_token"]).status_code == 401


def test_a_rotated_away_refresh_token_coming_back_revokes_the_grant(flow: Flow) -> None:
    first = flow.tokens()
    second = json.loads(flow.refresh(first["refresh_token"]).body)
    replay = flow.refresh(first["refresh_token"])
    assert replay.status_code == 400 and json.loads(replay.body)["error"] == "invalid_grant"
    assert mcp(flow.client, second["access_token"]).status_code == 401
    assert flow.refresh(second["refresh_token"]).status_code == 400


def test_an_access_token_expires_after_an_hour(flow: Flow, clock: Clock) -> None:
    tokens = flow.tokens()
    clock.advance(minutes=59)
    assert mcp(flow.client, tokens["access_token"]).status_code == 200
    clock.advance(minutes=2)
    assert mcp(flow.client, tokens["access_token"]).status_code == 401
    # AND the refresh token still gives a new one
    assert mcp(flow.client, json.loads(flow.refresh(tokens["refresh_token"]).body)["access_token"]).status_code == 200


def test_a_refresh_token_of_another_client_is_refused(flow: Flow, client: Client) -> None:
    tokens = flow.tokens()
    other = json.loads(register(client).body)["client_id"]
    answer = token(client, grant_type="refresh_token", refresh_token=tokens["refresh_token"], client_id=other)
    assert answer.status_code == 400
    assert flow.refresh(tokens["refresh_token"]).status_code == 200


def test_the_revocation_endpoint_stops_the_grant(flow: Flow) -> None:
    tokens = flow.tokens()
    answer = flow.client.http.post("/oauth/revoke", headers=FORM, body=urlencode(
        {"token": tokens["refresh_token"], "client_id": flow.client_id}))
    assert answer.status_code == 200
    assert mcp(flow.client, tokens["access_token"]).status_code == 401
    assert flow.refresh(tokens["refresh_token"]).status_code == 400
    # AND an unknown token is answered the same way, changing nothing
    assert flow.client.http.post("/oauth/revoke", headers=FORM, body=urlencode(
        {"token": "wsr_ag1_nothing", "client_id": flow.client_id})).status_code == 200


def test_no_token_or_secret_reaches_a_log_line(flow: Flow, logged: Any) -> None:
    tokens = flow.tokens()
    flow.refresh(tokens["refresh_token"])
    lines = "\n".join(record.getMessage() for record in logged.records)
    assert "oauth.request" in lines
    assert tokens["access_token"] not in lines and tokens["refresh_token"] not in lines
    assert flow.pkce.verifier not in lines


# --- the agent's page and lifecycle ---------------------------------------------------------------

def test_the_agent_page_lists_its_clients_and_revoke_stops_the_token(flow: Flow, admin: Admin) -> None:
    agent = admin.create_agent("hermes")
    tokens = flow.tokens(agent=agent["id"])
    page = text(flow.console.get(f"/console/agents/{agent['id']}"))
    grant_ids = rows(page, "grant")
    assert len(grant_ids) == 1 and "Chat Product" in page
    answer = flow.console.post(f"/console/agents/{agent['id']}/grants/revoke", {"grant": grant_ids[0]})
    assert answer.status_code == 303
    assert mcp(flow.client, tokens["access_token"]).status_code == 401
    assert mcp(flow.client, agent["api_key"]).status_code == 200  # the key is another door


def test_rotating_a_key_stops_the_old_one_at_once(client: Client, admin: Admin) -> None:
    agent = admin.create_agent("hermes")
    rotated = admin.call("POST", f"/v1/agents/{agent['id']}/key")
    new_key = json.loads(rotated.body)["api_key"]
    assert mcp(client, agent["api_key"]).status_code == 401
    assert mcp(client, new_key).status_code == 200


def test_rotating_from_the_console_shows_the_new_key_once(console: Console, client: Client, admin: Admin) -> None:
    agent = admin.create_agent("hermes")
    page = text(console.post(f"/console/agents/{agent['id']}/key"))
    new_key = re.search(r'id="api-key">(wsk_[^<]+)<', page).group(1)
    assert mcp(client, new_key).status_code == 200 and mcp(client, agent["api_key"]).status_code == 401


def test_revoking_an_agent_stops_every_key_and_grant_and_keeps_its_records(flow: Flow, admin: Admin) -> None:
    agent = admin.create_agent("hermes")
    tokens = flow.tokens(agent=agent["id"])
    admin.publish()
    assert admin.call("POST", f"/v1/agents/{agent['id']}/working-set",
                      {"vendor": "unleashed", "name": "list-sales-orders"}).status_code == 201
    revoked = json.loads(admin.call("POST", f"/v1/agents/{agent['id']}/revoke").body)
    assert revoked["revoked_at"] is not None
    assert mcp(flow.client, agent["api_key"]).status_code == 401
    assert mcp(flow.client, tokens["access_token"]).status_code == 401
    assert flow.refresh(tokens["refresh_token"]).status_code == 400
    assert admin.call("POST", f"/v1/agents/{agent['id']}/key").status_code == 409
    # AND its working set and history stay readable
    working_set = json.loads(admin.call("GET", f"/v1/agents/{agent['id']}/working-set").body)["items"]
    assert [item["name"] for item in working_set] == ["list-sales-orders"]
    assert json.loads(admin.call("GET", f"/v1/agents/{agent['id']}/history").body)["items"]
    assert 'id="revoked-notice"' in text(flow.console.get(f"/console/agents/{agent['id']}"))


def test_archiving_needs_a_revoked_agent_and_takes_it_out_of_the_list(console: Console, admin: Admin) -> None:
    kept, gone = admin.create_agent("kept"), admin.create_agent("gone")
    refused = admin.call("POST", f"/v1/agents/{gone['id']}/archive")
    assert refused.status_code == 409
    admin.call("POST", f"/v1/agents/{gone['id']}/revoke")
    assert console.post(f"/console/agents/{gone['id']}/archive").status_code == 303
    listed = json.loads(admin.call("GET", "/v1/agents").body)["items"]
    archived = json.loads(admin.call("GET", "/v1/agents?archived=true").body)["items"]
    assert [agent["id"] for agent in listed] == [kept["id"]]
    assert [agent["id"] for agent in archived] == [gone["id"]]
    assert rows(text(console.get("/console/agents")), "agent") == [kept["id"]]
    assert rows(text(console.get("/console/agents?archived=1")), "agent") == [gone["id"]]
    assert admin.call("GET", f"/v1/agents/{gone['id']}").status_code == 200


def test_another_accounts_agent_cannot_be_granted_or_revoked(flow: Flow, other_admin: Admin, admin: Admin) -> None:
    theirs = other_admin.create_agent("theirs")
    answer = flow.consent(agent=theirs["id"])
    assert answer.status_code == 404
    assert admin.call("POST", f"/v1/agents/{theirs['id']}/revoke").status_code == 404
    assert mcp(flow.client, theirs["api_key"]).status_code == 200


def test_an_access_token_is_authenticated_by_the_same_one_query_as_a_key(flow: Flow) -> None:
    from bench.dynamo_calls import DynamoCalls

    tokens = flow.tokens()
    counter = DynamoCalls().install()
    with counter.measure() as made:
        assert mcp(flow.client, tokens["access_token"]).status_code == 200
    assert made == ["Query"]  # nothing promoted: the agent's partition is all tools/list reads
