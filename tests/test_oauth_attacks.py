"""The second attack round on Workset's OAuth server, written as the attacks (issue 24, items 1
and 2), with their neighbours: a code must go only where the client registered, as a browser
reads the address; an error goes back unasked only to a URI registered exactly; a refresh token
presented twice, at any timing, revokes the grant."""

from __future__ import annotations

import json
import threading
from typing import Any
from urllib.parse import urlencode

import pytest
from chalice.test import Client

from chalicelib.oauth import tokens as oauth_tokens
from chalicelib.store.models import OAUTH_CLIENT_PREFIX, OAUTH_CODE_PREFIX, OAuthClientItem, OAuthCodeItem
from tests import test_oauth
from tests.conftest import Admin, Console, log_lines
from tests.test_console import text
from tests.test_oauth import Clock, Flow, Pkce, authorize_query, mcp, register

LOOPBACK = "http://127.0.0.1:9/cb"
SMUGGLED = "http://evil.example\\ * @127.0.0.1:9/cb"  # urlsplit: 127.0.0.1; a browser: evil.example
clock, flow = test_oauth.clock, test_oauth.flow  # the OAuth tests' fixtures


def codes() -> int:
    return sum(1 for item in OAuthCodeItem.scan() if item.token_hash.startswith(OAUTH_CODE_PREFIX))


def agents(admin: Admin) -> list[Any]:
    return json.loads(admin.call("GET", "/v1/agents").body)["items"]


@pytest.fixture
def loopback_flow(client: Client, console: Console, clock: Clock) -> Flow:
    """A public client that registered only a loopback redirect URI."""
    registered = register(client, redirect_uris=[LOOPBACK])
    assert registered.status_code == 201, text(registered)
    return Flow(client, console, json.loads(registered.body)["client_id"], Pkce.new())


def consent_page(flow: Flow, **overrides: str) -> Any:
    query = authorize_query(flow.client_id, flow.pkce, **overrides)
    return flow.console.get("/console/oauth/authorize?" + urlencode(query))


def approve(flow: Flow, **overrides: str) -> Any:
    query = authorize_query(flow.client_id, flow.pkce, **overrides)
    return flow.console.post("/console/oauth/authorize", {**query, "agent": "new", "decision": "approve",
                                                          "name": "chat agent"})


# --- item 1: a code goes only where the client registered ------------------------------------------

def test_a_smuggled_redirect_uri_gets_no_code_and_no_policy_entry(loopback_flow: Flow, admin: Admin) -> None:
    # GIVEN a client that registered only http://127.0.0.1:9/cb
    # WHEN a person is sent to consent with a URI urlsplit reads as 127.0.0.1, a browser as evil.example
    page = consent_page(loopback_flow, redirect_uri=SMUGGLED)
    posted = approve(loopback_flow, redirect_uri=SMUGGLED)
    # THEN the person is told, nothing is redirected, the policy admits no other target
    assert page.status_code == 400 and "did not register" in text(page)
    assert "Location" not in page.headers and "Location" not in posted.headers and posted.status_code == 400
    assert "form-action 'self';" in page.headers["Content-Security-Policy"]
    # AND no code was minted, no agent created
    assert codes() == 0 and agents(admin) == []


@pytest.mark.parametrize("asked", [
    SMUGGLED, "http://evil.example\\@127.0.0.1:9/cb", "http://evil.example@127.0.0.1:9/cb",
    "http://127.0.0.1:9\\@evil.example/cb", "http://2130706433:9/cb", "http://0x7f.1:9/cb", "http://127.1:9/cb",
    "http://127.0.0.1:9/cb/../../evil", "http://127.0.0.1:9/c\tb", "http://localhost:9/cb", "http://[::1]:9/cb",
    "http://127.0.0.1:9/cb?next=https://evil.example", "http://127.0.0.1:9/CB",
])
def test_no_unasked_redirect_for_a_uri_that_is_not_registered(loopback_flow: Flow, asked: str) -> None:
    # GIVEN a request that would fail anyway (response_type=token): no click needed to redirect
    page = consent_page(loopback_flow, redirect_uri=asked, response_type="token")
    # THEN it is told to the person, never redirected (no open redirect)
    assert page.status_code == 400 and "Location" not in page.headers


def test_a_loopback_uri_on_another_port_is_consented_but_its_faults_are_not_redirected(loopback_flow: Flow) -> None:
    # GIVEN the registered loopback URI on another port (a native app's listener, RFC 8252 7.3)
    other_port = "http://127.0.0.1:5555/cb"
    page = consent_page(loopback_flow, redirect_uri=other_port)
    assert page.status_code == 200 and 'id="redirect-host">127.0.0.1:5555<' in text(page)
    assert "form-action 'self' http://127.0.0.1:5555;" in page.headers["Content-Security-Policy"]
    # WHEN the person approves THEN the code goes there
    assert approve(loopback_flow, redirect_uri=other_port).headers["Location"].startswith(other_port + "?code=")
    # BUT a faulty request to it is not registered exactly: told to the person, not redirected
    faulty = consent_page(loopback_flow, redirect_uri=other_port, code_challenge_method="plain")
    assert faulty.status_code == 400 and "Location" not in faulty.headers
    # AND the URI registered exactly gets its error redirect, as before
    exact = consent_page(loopback_flow, redirect_uri=LOOPBACK, code_challenge_method="plain")
    assert exact.status_code == 303 and exact.headers["Location"].startswith(LOOPBACK + "?error=invalid_request")


@pytest.mark.parametrize("uri", [
    "https://evil.example\\.good.example/cb", "https://good.example/\u2603", "https://\uff47ood.example/cb",
    "https://%67ood.example/cb", "https:good.example/cb", "https:///good.example/cb", "https://good.example/a/../cb",
    "http://0x7f.1:9/cb", "http://2130706433/cb", "https://good.example:0/cb", "https://good.example/c b",
    "http://[::1", "https://good.example/cb\n",
])
def test_registration_refuses_what_a_browser_reads_otherwise(client: Client, uri: str) -> None:
    before = sum(1 for item in OAuthClientItem.scan() if item.token_hash.startswith(OAUTH_CLIENT_PREFIX))
    answer = register(client, redirect_uris=[uri])
    assert answer.status_code == 400 and json.loads(answer.body)["error"] == "invalid_redirect_uri"
    assert sum(1 for item in OAuthClientItem.scan() if item.token_hash.startswith(OAUTH_CLIENT_PREFIX)) == before


def test_a_uri_stored_before_these_checks_matches_nothing(client: Client, console: Console, clock: Clock,
                                                          admin: Admin) -> None:
    # GIVEN a client registered (before today's checks) with a URI a browser reads otherwise
    registered = json.loads(register(client).body)
    item = OAuthClientItem.get(f"{OAUTH_CLIENT_PREFIX}{registered['client_id']}")
    item.update(actions=[OAuthClientItem.redirect_uris.set(["https://good.example/\u2603", SMUGGLED])])
    flow = Flow(client, console, registered["client_id"], Pkce.new())
    # WHEN a person is sent to consent with either of them (or with none: the first is not the only)
    for asked in ("https://good.example/\u2603", SMUGGLED):
        page = consent_page(flow, redirect_uri=asked)
        posted = approve(flow, redirect_uri=asked)
        # THEN each is told to the person; no Location, no code, no agent
        assert page.status_code == 400 and posted.status_code == 400 and "Location" not in posted.headers
    assert codes() == 0 and agents(admin) == []


def test_the_consent_page_names_the_host_the_browser_goes_to(client: Client, console: Console, clock: Clock) -> None:
    registered = json.loads(register(client, redirect_uris=["https://Chat.Example:443/oauth/callback"]).body)
    flow = Flow(client, console, registered["client_id"], Pkce.new())
    page = consent_page(flow, redirect_uri="https://Chat.Example:443/oauth/callback")
    assert 'id="redirect-host">chat.example<' in text(page)
    assert "form-action 'self' https://chat.example;" in page.headers["Content-Security-Policy"]


def test_every_location_is_ascii_and_carries_the_state_encoded(flow: Flow) -> None:
    answer = approve(flow, state="a b&c=d")
    location = answer.headers["Location"]
    assert location.isascii() and "state=a+b%26c%3Dd" in location


# --- item 2: a refresh token presented twice, at any timing, revokes the grant ----------------------

def test_the_same_refresh_token_twice_at_once_revokes_the_grant(flow: Flow, monkeypatch: pytest.MonkeyPatch,
                                                                 logged: Any) -> None:
    # GIVEN tokens, and two requests that both pass every check before either rotates the token
    first = flow.tokens()
    both_checked = threading.Barrier(2, timeout=30)
    rotate = oauth_tokens.oauth_store.rotate

    def rotate_after_both_checked(*args: Any, **kwargs: Any) -> bool:
        both_checked.wait()
        return rotate(*args, **kwargs)

    monkeypatch.setattr(oauth_tokens.oauth_store, "rotate", rotate_after_both_checked)
    answers: list[Any] = []
    threads = [threading.Thread(target=lambda: answers.append(flow.refresh(first["refresh_token"])))
               for _ in range(2)]
    # WHEN both present the same refresh token at once
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    # THEN one got tokens, the other was refused as a replay, and the grant is revoked
    assert sorted(answer.status_code for answer in answers) == [200, 400]
    won = json.loads(next(answer for answer in answers if answer.status_code == 200).body)
    lost = json.loads(next(answer for answer in answers if answer.status_code == 400).body)
    assert lost["error"] == "invalid_grant" and "revoked" in lost["error_description"]
    assert mcp(flow.client, won["access_token"]).status_code == 401
    assert flow.refresh(won["refresh_token"]).status_code == 400
    # AND it counts as a replay, for its alarm
    [replay] = log_lines(logged, "oauth.replay_revoked")
    assert replay["replayed"] == "refresh_token"


def test_a_refresh_token_rotated_away_generations_ago_still_revokes_the_grant(flow: Flow, logged: Any) -> None:
    # GIVEN a token rotated twice since (no longer the previous one either)
    first = flow.tokens()
    second = json.loads(flow.refresh(first["refresh_token"]).body)
    third = json.loads(flow.refresh(second["refresh_token"]).body)
    # WHEN the first comes back
    replay = flow.refresh(first["refresh_token"])
    # THEN it is a replay: the grant is revoked, the current tokens stop
    assert replay.status_code == 400 and "revoked" in json.loads(replay.body)["error_description"]
    assert mcp(flow.client, third["access_token"]).status_code == 401
    assert flow.refresh(third["refresh_token"]).status_code == 400
    assert [line["replayed"] for line in log_lines(logged, "oauth.replay_revoked")] == ["refresh_token"]


def test_a_made_up_refresh_token_revokes_nothing(flow: Flow) -> None:
    tokens = flow.tokens()
    agent_id = tokens["access_token"].split("_")[1]
    assert flow.refresh(f"wsr_{agent_id}_{'x' * 43}").status_code == 400
    # THEN the real grant still works: only a token that was issued and spent counts as a replay
    assert mcp(flow.client, tokens["access_token"]).status_code == 200
    assert flow.refresh(tokens["refresh_token"]).status_code == 200


def test_an_authorization_parameter_sent_twice_is_told_to_the_person(flow: Flow, admin: Admin) -> None:
    # GIVEN a link whose redirect_uri appears twice (which copy counts would be a guess)
    query = urlencode(authorize_query(flow.client_id, flow.pkce)) + "&" + urlencode({"redirect_uri": LOOPBACK})
    page = flow.console.get("/console/oauth/authorize?" + query)
    # THEN refused to the person: no redirect, no consent form
    assert page.status_code == 400 and "Location" not in page.headers and "sent twice" in text(page)
    assert 'name="decision"' not in text(page) and codes() == 0
